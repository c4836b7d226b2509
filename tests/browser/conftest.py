"""JupyterLab on 127.0.0.1 and Debian's chromium driven by Playwright, for the browser tests.

Needs the ``chromium`` Debian package (``/usr/bin/chromium``) and the Python
packages playwright, jupyterlab, nbconvert and ipykernel. When one is missing
the tests fail under CI (``CI=true``) and are skipped elsewhere, each time with
a message saying what to install. Playwright never downloads a browser here.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from nbhelpers import jupyter_env

CHROMIUM = os.environ.get("SESSIONKIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "artifacts" / "screenshots"


def _missing(what: str) -> None:
    message = f"browser tests need {what}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Debian's chromium at {CHROMIUM} (apt-get update && apt-get install -y chromium)")
    for module, pkg in (("playwright", "playwright"), ("jupyterlab", "jupyterlab"), ("nbconvert", "nbconvert"),
                        ("ipykernel", "ipykernel"), ("nbformat", "nbformat")):
        try:
            __import__(module)
        except ImportError:
            _missing(f"the Python package {pkg} (pip install -e '.[dev]')")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def lab(chromium_path, tmp_path_factory):
    """A JupyterLab server on a free 127.0.0.1 port: yields ``(base_url, token, root_dir)``."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "root"
    root.mkdir()
    settings = base / "app-settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(json.dumps({
        "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
        "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    }))
    env = jupyter_env(base)
    port = _free_port()
    token = uuid.uuid4().hex
    log = open(base / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.app_settings_dir={settings}", "--ServerApp.terminals_enabled=False",
         "--LabServerApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {proc.returncode}:\n{(base / 'lab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not answer within 60 s:\n{(base / 'lab.log').read_text()[-3000:]}")
            time.sleep(0.25)
        yield url, token, root, env
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="session")
def notebook7(chromium_path, tmp_path_factory):
    """A Jupyter Notebook 7 server on a free 127.0.0.1 port: yields ``(base_url, token, root_dir)``."""
    try:
        import notebook  # noqa: F401
    except ImportError:
        _missing("the Python package notebook, Jupyter Notebook 7 (pip install -e '.[dev]')")
    base = tmp_path_factory.mktemp("nb7")
    root = base / "root"
    root.mkdir()
    env = jupyter_env(base)
    port = _free_port()
    token = uuid.uuid4().hex
    log = open(base / "notebook.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--ServerApp.terminals_enabled=False"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"Notebook exited with {proc.returncode}:\n{(base / 'notebook.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"Notebook did not answer within 60 s:\n{(base / 'notebook.log').read_text()[-3000:]}")
            time.sleep(0.25)
        yield url, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser(chromium_path):
    # Module scope: Playwright's sync API marks an event loop as running in this thread
    # for as long as it is open, which would break asyncio.run() in later test modules.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


def which_chromium() -> str | None:
    return shutil.which("chromium")
