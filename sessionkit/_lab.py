"""Open the tour notebooks in JupyterLab with a ready demo store.

::

    python -m sessionkit._lab                  # notebooks/ of this checkout, a free port
    python -m sessionkit._lab --port 8890 --no-browser
    python -m sessionkit._lab --prepare-only   # build the demo store and settings, print the command

What it does:

1. finds the notebooks folder (``--notebooks``, else ``./notebooks``, else the one
   next to this package in a source checkout);
2. builds the demo store ``<notebooks>/demo.db`` when it is missing (the data of
   ``sessionkit demo``; the notebooks open it);
3. writes a private JupyterLab settings folder (``<notebooks>/.lab/``): an
   ``overrides.json`` that turns off the news feed and update checks, and a
   ``python3`` kernel spec for this Python, first on ``JUPYTER_PATH``, so the
   notebooks run with the interpreter that has sessionkit installed;
4. starts ``jupyter lab --no-browser --ip 127.0.0.1 --port N`` rooted at the
   notebooks folder (``--allow-root`` when running as root), waits until it
   answers, prints the URL with its token and opens it in a browser when the
   machine has a display. Ctrl-C stops it.

JupyterLab's own log goes to ``<notebooks>/.lab/jupyter.log``.
Needs JupyterLab and ipykernel (``pip install jupyterlab ipykernel``).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = [
    "main",
    "run",
    "add_arguments",
    "find_notebooks",
    "prepare",
    "lab_command",
    "SETTINGS_OVERRIDES",
    "tour_source",
    "copy_tour",
    "store_notebook",
]

DEMO_STORE = "demo.db"
PRIVATE_DIR = ".lab"
FIRST_NOTEBOOK = "01-quickstart.ipynb"
DEFAULT_PORT = 8888

#: JupyterLab settings written to the private ``overrides.json``: no news feed and no update
#: checks (both reach for the network and pop a toast over the notebook).
SETTINGS_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
}


class LabError(RuntimeError):
    """The notebooks cannot be opened (missing folder, JupyterLab not installed, failed start)."""


def find_notebooks(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The notebooks folder: ``explicit``, else ``./notebooks``, else the checkout's ``notebooks/``."""
    if explicit is not None:
        folder = Path(explicit).expanduser().resolve()
        if not folder.is_dir():
            raise LabError(f"{folder} is not a folder")
        return folder
    for candidate in (Path.cwd() / "notebooks", Path(__file__).resolve().parents[1] / "notebooks"):
        if candidate.is_dir() and any(candidate.glob("[0-9][0-9]-*.ipynb")):
            return candidate.resolve()
    raise LabError("no notebooks folder here: run from a sessionkit checkout or pass --notebooks DIR")


def tour_source() -> Path:
    """Where the tour notebooks come from: the installed package's copy, else this checkout's.

    A wheel carries them as ``sessionkit/_notebooks`` (pyproject.toml maps ``notebooks/``
    there); an editable install may map that package to the checkout's folder.
    """
    import importlib.util

    candidates = [Path(__file__).resolve().parent / "_notebooks"]
    try:
        spec = importlib.util.find_spec("sessionkit._notebooks")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) for p in spec.submodule_search_locations]
    candidates.append(Path(__file__).resolve().parents[1] / "notebooks")
    for folder in candidates:
        if folder.is_dir() and any(folder.glob("[0-9][0-9]-*.ipynb")):
            return folder
    raise LabError("this installation of sessionkit has no tour notebooks (reinstall it from a wheel or a checkout)")


def copy_tour(dest: Path, source: Path | None = None) -> tuple[list[Path], list[Path]]:
    """Copy the tour notebooks and their data into ``dest``; returns ``(copied, kept)``.

    A notebook already in ``dest`` is kept as it is (it may hold the reader's own work).
    """
    source = source or tour_source()
    dest.mkdir(parents=True, exist_ok=True)
    copied: list[Path] = []
    kept: list[Path] = []
    items = sorted(source.glob("[0-9][0-9]-*.ipynb")) + sorted((source / "data").glob("*"))
    for item in items:
        if not item.is_file():
            continue
        target = dest / item.relative_to(source)
        if target.exists():
            kept.append(target)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(item, target)
        copied.append(target)
    return copied, kept


STORE_NOTEBOOK = "your-store.ipynb"


def store_notebook(dest: Path, target: str) -> Path:
    """Write ``dest/your-store.ipynb``, a notebook that opens the store ``target`` read-first."""

    def cell(kind: str, source: str) -> dict:
        item: dict = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            item.update(execution_count=None, outputs=[])
        return item

    numbers = sorted(p.name[:2] for p in dest.glob("[0-9][0-9]-*.ipynb"))
    beside = f" The tour notebooks ({numbers[0]} to {numbers[-1]}) are next to this one." if numbers else ""
    notebook = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            cell(
                "markdown",
                f"# Your store\n\n`sessionkit lab` opened this notebook on `{target}`. Run the cells: "
                "the store shows its sessions, the latest session its tree." + beside,
            ),
            cell("code", f"import sessionkit as sk\n\nstore = sk.open_store({target!r}, create=False)\nstore"),
            cell(
                "code",
                "sessions = store.list_sessions()\n"
                'latest = max(sessions, key=lambda info: info.updated_at or "") if sessions else None\n'
                "tree = sk.widgets.BranchTree(store.session(latest.id)) if latest else None\ntree",
            ),
        ],
    }
    path = dest / STORE_NOTEBOOK
    path.write_text(json.dumps(notebook, indent=1) + "\n", encoding="utf-8")
    return path


def _build_demo(path: Path) -> bool:
    """Build the demo store at ``path`` if it does not exist; True when it was built."""
    if path.exists():
        return False
    from ._demo import build_demo_store

    partial = path.with_name(".building-" + path.name)  # keeps the suffix that picks the engine
    for leftover in path.parent.glob(partial.name + "*"):
        leftover.unlink()
    store = build_demo_store(partial)
    store.close()
    for suffix in ("-wal", "-shm"):  # a closed SQLite store leaves none; be sure before the rename
        extra = Path(str(partial) + suffix)
        if extra.exists():
            extra.unlink()
    partial.replace(path)
    return True


def _kernel_spec(share: Path) -> Path:
    """A ``python3`` kernel spec running this interpreter, under ``share/kernels``."""
    spec = share / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (ipykernel)",
                "language": "python",
                "metadata": {"debugger": True},
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )
    return spec


def write_overrides(settings_dir: Path) -> Path:
    """Merge :data:`SETTINGS_OVERRIDES` into ``settings_dir/overrides.json``; returns its path."""
    settings_dir.mkdir(parents=True, exist_ok=True)
    path = settings_dir / "overrides.json"
    current: dict = {}
    if path.exists():
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            current = {}
        if not isinstance(current, dict):
            current = {}
    for plugin, values in SETTINGS_OVERRIDES.items():
        merged = dict(current.get(plugin) or {})
        merged.update(values)
        current[plugin] = merged
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    return path


def prepare(notebooks: Path, *, settings_dir: Path | None = None) -> dict:
    """Build the demo store and the private settings; returns what was prepared.

    ``settings_dir`` is where ``overrides.json`` goes (default ``<notebooks>/.lab/settings``;
    a hosted service passes its JupyterLab's own settings folder instead). Keys of the
    result: ``demo`` (path), ``demo_built`` (bool), ``private`` (the private folder),
    ``settings_dir``, ``overrides``, ``jupyter_path`` (the folder holding the kernel spec).
    """
    private = notebooks / PRIVATE_DIR
    private.mkdir(parents=True, exist_ok=True)
    demo = notebooks / DEMO_STORE
    built = _build_demo(demo)
    settings_dir = settings_dir or private / "settings"
    overrides = write_overrides(settings_dir)
    share = private / "share"
    _kernel_spec(share)
    # Carry over anything JupyterLab's default settings folder holds (page_config.json, an
    # overrides.json from a distribution), so pointing Lab at ours loses nothing.
    if settings_dir == private / "settings":
        try:
            from jupyterlab.commands import get_app_dir

            default = Path(get_app_dir()) / "settings"
        except Exception:
            default = None
        if default is not None and default.is_dir():
            for item in default.iterdir():
                if item.name == "overrides.json" and item.is_file():
                    theirs = json.loads(item.read_text(encoding="utf-8") or "{}")
                    ours = json.loads(overrides.read_text(encoding="utf-8"))
                    overrides.write_text(json.dumps({**theirs, **ours}, indent=2) + "\n", encoding="utf-8")
                elif item.is_file() and not (settings_dir / item.name).exists():
                    shutil.copy2(item, settings_dir / item.name)
    return {
        "demo": demo,
        "demo_built": built,
        "private": private,
        "settings_dir": settings_dir,
        "overrides": overrides,
        "jupyter_path": share,
    }


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(preferred: int = DEFAULT_PORT, tries: int = 10) -> int:
    """``preferred`` or one of the next ``tries`` ports if free, else any free port."""
    for port in range(preferred, preferred + tries):
        if _port_free(port):
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(
    notebooks: Path, *, port: int, token: str, settings_dir: Path, as_root: bool | None = None
) -> list[str]:
    """The ``jupyter lab`` command line serving ``notebooks`` on 127.0.0.1:``port``."""
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={notebooks}",
        f"--IdentityProvider.token={token}",
        f"--LabApp.app_settings_dir={settings_dir}",
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if is_root() if as_root is None else as_root:
        command.append("--allow-root")
    return command


def has_display() -> bool:
    """Whether a browser opened here would show up on a screen."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _wait_until_up(url: str, token: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise LabError(f"JupyterLab exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise LabError(f"JupyterLab did not answer within {timeout:.0f} s")
        time.sleep(0.25)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM if hasattr(signal, "SIGTERM") else signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The launcher's options, for this module's ``main`` or a ``sessionkit lab`` subcommand."""
    parser.add_argument("--notebooks", help="the notebooks folder (default: ./notebooks or the checkout's)")
    parser.add_argument(
        "--port", type=int, default=0, help=f"port on 127.0.0.1 (default: {DEFAULT_PORT} or the next free one)"
    )
    parser.add_argument("--token", help="the server's access token (default: a random one)")
    parser.add_argument("--no-browser", action="store_true", help="only print the URL, even with a display")
    parser.add_argument(
        "--prepare-only",
        action="store_true",
        help="build the demo store and settings, print the command, start nothing",
    )
    parser.add_argument("--settings-dir", help="write overrides.json here instead of <notebooks>/.lab/settings")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for JupyterLab to answer")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m sessionkit._lab [--notebooks DIR] [--port N] [--no-browser] ...``."""
    parser = add_arguments(
        argparse.ArgumentParser(
            prog="python -m sessionkit._lab",
            description="Open the sessionkit tour notebooks in JupyterLab with a ready demo store.",
        )
    )
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Prepare and start JupyterLab as the parsed options say; returns the exit status."""
    out = sys.stdout

    try:
        notebooks = find_notebooks(args.notebooks)
        ready = prepare(notebooks, settings_dir=Path(args.settings_dir).resolve() if args.settings_dir else None)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state = "built" if ready["demo_built"] else "ready"
    print(f"demo store {state}: {ready['demo']}", file=out)
    print(f"JupyterLab settings: {ready['overrides']}", file=out)
    print(f"the whole demo store in a browser: sessionkit view {ready['demo']}", file=out)

    port = args.port or free_port()
    token = args.token or secrets.token_hex(24)
    command = lab_command(notebooks, port=port, token=token, settings_dir=ready["settings_dir"])
    if args.prepare_only:
        print("command: " + " ".join(command), file=out)
        return 0
    try:
        import ipykernel  # noqa: F401
        import jupyterlab  # noqa: F401
    except ImportError as exc:
        print(f"error: {exc.name} is not installed: pip install jupyterlab ipykernel", file=sys.stderr)
        return 2
    if not _port_free(port):
        print(f"error: port {port} on 127.0.0.1 is in use; pass another with --port", file=sys.stderr)
        return 2

    env = dict(os.environ)
    env["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(ready["jupyter_path"]), env.get("JUPYTER_PATH")]))
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    log_path = ready["private"] / "jupyter.log"
    url = f"http://127.0.0.1:{port}"

    def _terminate(signum, frame):  # kill / closed terminal: stop JupyterLab too (finally below)
        raise SystemExit(0)

    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _terminate)
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            command,
            cwd=notebooks,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            try:
                _wait_until_up(url, token, proc, args.timeout)
            except LabError as exc:
                _stop(proc)
                print(f"error: {exc}; the end of {log_path}:\n{_tail(log_path)}", file=sys.stderr)
                return 1
            link = f"{url}/lab/tree/{getattr(args, 'first', None) or FIRST_NOTEBOOK}?token={token}"
            print("JupyterLab is running on the sessionkit notebooks. Open:", file=out)
            print(f"    {link}", file=out)
            if not args.no_browser and has_display():
                import webbrowser

                webbrowser.open(link)
            else:
                print(
                    f"(no browser opened; from another machine: ssh -L {port}:127.0.0.1:{port} <this host>)", file=out
                )
            print(f"log: {log_path} · stop with Ctrl-C", file=out)
            out.flush()
            return proc.wait() and 1
        except KeyboardInterrupt:
            print("\nstopping JupyterLab", file=out)
            return 0
        finally:
            _stop(proc)


if __name__ == "__main__":
    sys.exit(main())
