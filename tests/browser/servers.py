"""Jupyter servers for the browser and notebook tests, each on a free 127.0.0.1 port with every
Jupyter and IPython folder in a temporary directory.

``jupyter_server`` starts JupyterLab or Notebook 7 and waits for its API; ``launcher`` starts a
command that prints the URL it serves (``python -m sessionkit._lab``, ``sessionkit lab``) and
waits for that line. Both stop what they started on the way out. Used by tests/browser (through
its conftest) and tests/notebooks (this folder is on their path).
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from helpers import free_port, wait_until

#: How long a server may take to answer for the first time before the test is declared hung (seconds).
START = 120


def jupyter_env(base: Path) -> dict:
    """Environment with every Jupyter and IPython folder inside ``base``."""
    env = dict(os.environ)
    for var, sub in (
        ("JUPYTER_CONFIG_DIR", "config"),
        ("JUPYTER_DATA_DIR", "data"),
        ("JUPYTER_RUNTIME_DIR", "runtime"),
        ("IPYTHONDIR", "ipython"),
        ("MPLCONFIGDIR", "mpl"),
        ("JUPYTERLAB_SETTINGS_DIR", "lab-user-settings"),
        ("JUPYTERLAB_WORKSPACES_DIR", "lab-workspaces"),
    ):
        path = base / sub
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["LITELLM_OFFLINE_MODE"] = "true"
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Server:
    """A running Jupyter server: its base URL, token, root folder and environment."""

    url: str
    token: str
    root: Path
    env: dict


# What each front end is started with, past the options every server gets.
_APPS = {
    "lab": ("JupyterLab", ["jupyter", "lab"]),
    "notebook": ("Notebook", ["notebook"]),
}


def wait_file(path: Path, timeout: float = 60) -> str:
    """The text of a file a kernel or an app writes, once it is there and not empty."""
    return wait_until(
        lambda: path.exists() and path.read_text(), timeout=timeout, interval=0.05, what=f"{path.name} to be written"
    )


def _stop(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the process's group (it and what it started), SIGKILL after ``grace`` seconds."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def served(
    argv: Sequence[str],
    *,
    name: str,
    ready_url: str,
    cwd: Path,
    env: dict | None,
    log_path: Path,
    timeout: float = START,
) -> Iterator[subprocess.Popen]:
    """Runs a server in a session of its own until ``ready_url`` answers 200; stops it on the way out."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
                try:
                    with urllib.request.urlopen(ready_url, timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer within {timeout:.0f} s:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.25)
            yield proc
        finally:
            _stop(proc, 10)


@contextmanager
def jupyter_server(app: str, base: Path, extra_args: Sequence[str] = (), *, timeout: float = START) -> Iterator[Server]:
    """JupyterLab (``app="lab"``) or Notebook 7 (``app="notebook"``) serving ``base/root``."""
    name, module = _APPS[app]
    root = base / "root"
    root.mkdir(parents=True, exist_ok=True)
    env = jupyter_env(base)
    port = free_port()
    token = uuid.uuid4().hex
    url = f"http://127.0.0.1:{port}"
    argv = [
        sys.executable,
        "-m",
        *module,
        "--no-browser",
        "--allow-root",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        *extra_args,
    ]
    with served(
        argv,
        name=name,
        ready_url=f"{url}/api/status?token={token}",
        cwd=root,
        env=env,
        log_path=base / f"{app}.log",
        timeout=timeout,
    ):
        yield Server(url, token, root, env)


@dataclass
class Launched:
    """A launcher that printed its URL: the match of ``pattern``, the lines so far, the process."""

    match: re.Match
    proc: subprocess.Popen
    seen: list[str] = field(default_factory=list)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (the launcher stops its server on the way out); returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@contextmanager
def launcher(argv: Sequence[str], *, cwd: Path, env: dict, pattern: str, timeout: float = 170) -> Iterator[Launched]:
    """Runs ``argv`` in a session of its own and waits for a printed line matching ``pattern``."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        match = None
        while match is None:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"{argv[2:4]} printed no URL in time:\n" + "".join(seen)) from None
            if line is None:
                raise AssertionError(f"{argv[2:4]} exited with {proc.wait()}:\n" + "".join(seen))
            seen.append(line)
            match = re.search(pattern, line)
        yield Launched(match, proc, seen)
    finally:
        _stop(proc, 30)
