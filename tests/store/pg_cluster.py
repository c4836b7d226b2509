"""A throwaway PostgreSQL server for the PostgreSQL tests and benchmark.

``SESSIONKIT_PG_URL`` names a server to use instead (its user needs CREATE on the
database: every store gets a schema of its own, dropped at the end). Otherwise the
first caller starts a private cluster from the PostgreSQL binaries on this machine
(Debian's ``postgresql`` package: ``/usr/lib/postgresql/<version>/bin``): ``initdb``
in a temporary folder, ``pg_ctl start`` listening on 127.0.0.1 only with its socket
in that folder; it is stopped and removed when the interpreter exits. As root, the
server runs as the ``postgres`` user (PostgreSQL refuses to run as root).

Without binaries and without ``SESSIONKIT_PG_URL``, :func:`pg_url` skips the tests,
saying why, except when ``CI=true``: there a missing server fails the run.
"""

from __future__ import annotations

import atexit
import glob
import itertools
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import threading
import urllib.parse

try:  # the benchmark uses Cluster without pytest
    import pytest
except ImportError:  # pragma: no cover
    pytest = None

__all__ = ["Cluster", "Unavailable", "find_bindir", "base_url", "new_store_url", "pg_url", "pg_store_url"]


class Unavailable(RuntimeError):
    """No PostgreSQL server can be had on this machine."""


def _version_key(path: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", path)) or (0,)


def find_bindir() -> str | None:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``, newest version first."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(os.path.dirname(os.path.realpath(which)))
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                candidates.append(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    for folder in candidates:
        if all(os.access(os.path.join(folder, exe), os.X_OK) for exe in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A private PostgreSQL cluster in a temporary folder.

    ``durable=False`` (tests) turns fsync off: nothing here must survive a power cut,
    and tests run several times faster. The benchmark keeps the server's defaults.
    """

    def __init__(self, bindir: str | None = None, *, durable: bool = False, stop_at_exit: bool = True):
        self.bindir = bindir or find_bindir()
        if self.bindir is None:
            raise Unavailable(
                "no PostgreSQL binaries (initdb, pg_ctl) found; install Debian's postgresql package "
                "(apt-get install -y postgresql) or set SESSIONKIT_PG_URL"
            )
        self.durable = durable
        self.stop_at_exit = stop_at_exit
        self.root: str | None = None
        self.port: int | None = None
        self._user: str | None = None

    # -- running commands, as the postgres user when we are root ---------------
    def _run(self, args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        if self._user is not None:
            if shutil.which("runuser"):
                args = ["runuser", "-u", self._user, "--", *args]
            else:
                args = ["su", self._user, "-s", "/bin/sh", "-c", shlex.join(args)]
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self) -> Cluster:
        import pwd

        as_root = os.geteuid() == 0
        # as root the server runs as 'postgres', which must reach the folder: not under
        # a private TMPDIR such as /root/tmp
        self.root = tempfile.mkdtemp(prefix="sessionkit-pg-", dir="/tmp" if as_root else None)
        if as_root:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise Unavailable("running as root and there is no 'postgres' user to run the server") from exc
            self._user = "postgres"
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        data = os.path.join(self.root, "data")
        out = self._run(
            [
                os.path.join(self.bindir, "initdb"),
                "-D",
                data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            ]
        )
        if out.returncode != 0:
            self._remove()
            raise Unavailable(f"initdb failed: {out.stderr.strip() or out.stdout.strip()}")
        settings = [
            "-c listen_addresses=127.0.0.1",
            f"-k {self.root}",
            "-c max_connections=200",
            "-c shared_buffers=64MB",
        ]
        if not self.durable:
            settings += ["-c fsync=off", "-c full_page_writes=off", "-c synchronous_commit=off"]
        last = ""
        for _ in range(3):  # a port picked by another program in between: try another
            self.port = _free_port()
            opts = " ".join([f"-p {self.port}", *settings])
            out = self._run(
                [
                    os.path.join(self.bindir, "pg_ctl"),
                    "-D",
                    data,
                    "-l",
                    os.path.join(self.root, "log"),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    opts,
                    "start",
                ]
            )
            if out.returncode == 0:
                if self.stop_at_exit:
                    atexit.register(self.stop)
                return self
            last = self._log_tail() or out.stderr.strip() or out.stdout.strip()
        self._remove()
        raise Unavailable(f"pg_ctl start failed: {last}")

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.root, "log"), encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-15:]).strip()
        except OSError:
            return ""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def stop(self) -> None:
        """Stop the server and remove its folder (idempotent)."""
        if self.root is None:
            return
        data = os.path.join(self.root, "data")
        if os.path.isdir(data):
            self._run([os.path.join(self.bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"], timeout=60)
        self._remove()

    def _remove(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# ---------------------------------------------------------------------------
# one server per test process, a fresh schema per store

_lock = threading.Lock()
_state: dict = {}
_names = itertools.count()


def _with_query(url: str, **params: str) -> str:
    """``url`` with ``params`` appended to its query string (the rest kept as written)."""
    extra = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in params.items())
    return url + ("&" if urllib.parse.urlsplit(url).query else "?") + extra


def base_url() -> str:
    """The URL of the database the tests use; starts the private cluster on first call."""
    with _lock:
        if "url" in _state:
            return _state["url"]
        if "error" in _state:
            raise Unavailable(_state["error"])
        try:
            url = os.environ.get("SESSIONKIT_PG_URL")
            if url:
                _state["external"] = True
            else:
                cluster = Cluster().start()
                _state["cluster"] = cluster
                url = cluster.url("postgres")
                _admin(url, "CREATE DATABASE sessionkit_tests")
                url = cluster.url("sessionkit_tests")
            _admin(url, "SELECT 1")
        except Unavailable as exc:
            _state["error"] = str(exc)
            raise
        except Exception as exc:  # a server we cannot reach counts as unavailable
            _state["error"] = f"PostgreSQL server not reachable: {exc}"
            raise Unavailable(_state["error"]) from exc
        _state["url"] = url
        _state["schemas"] = []
        atexit.register(_drop_schemas)
        return url


def _admin(url: str, statement: str, params=None) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(statement, params)


def new_store_url() -> str:
    """A URL naming a new, empty schema (``?schema=...``) on the test server."""
    url = base_url()
    name = f"t_{os.getpid()}_{next(_names)}"
    with _lock:
        _state["schemas"].append(name)
    return _with_query(url, schema=name)


def _drop_schemas() -> None:
    """Drop the schemas the tests made on an external server (a private cluster just goes)."""
    if not _state.get("external") or not _state.get("schemas"):
        return
    import psycopg

    try:
        with psycopg.connect(_state["url"], autocommit=True, connect_timeout=10) as conn:
            for name in _state["schemas"]:
                quoted = name.replace('"', '""')
                conn.execute(f'DROP SCHEMA IF EXISTS "{quoted}" CASCADE')
    except psycopg.Error:
        pass
    _state["schemas"] = []


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required in CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


if pytest is not None:

    @pytest.fixture(scope="session")
    def pg_url() -> str:
        """The test database's URL (skips, or fails under CI=true, when there is no server)."""
        try:
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
        except ImportError as exc:
            _unavailable(f"psycopg is not installed ({exc}); pip install 'sessionkit[postgres]'")
        try:
            return base_url()
        except Unavailable as exc:
            _unavailable(str(exc))

    @pytest.fixture
    def pg_store_url(pg_url):
        """``new()`` -> a URL for a fresh, empty store."""
        return new_store_url


# ---------------------------------------------------------------------------
# for CI: one cluster for the whole run, started before the tests and stopped after


def _main(argv: list[str]) -> int:
    """``start`` prints ``<folder> <url>`` of a new cluster (with a database for the tests);
    ``stop <folder>`` stops that cluster and removes its folder."""
    import json
    import sys

    if argv[:1] == ["start"]:
        cluster = Cluster(stop_at_exit=False).start()
        try:
            _admin(cluster.url("postgres"), "CREATE DATABASE sessionkit_tests")
        except BaseException:
            cluster.stop()
            raise
        with open(os.path.join(cluster.root, "cluster.json"), "w") as f:
            json.dump({"bindir": cluster.bindir, "user": cluster._user}, f)
        print(cluster.root, cluster.url("sessionkit_tests"))
        return 0
    if argv[:1] == ["stop"] and len(argv) == 2:
        with open(os.path.join(argv[1], "cluster.json")) as f:
            saved = json.load(f)
        cluster = Cluster(saved["bindir"], stop_at_exit=False)
        cluster.root, cluster._user = argv[1], saved["user"]
        cluster.stop()
        return 0
    print("usage: pg_cluster.py start | stop FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    import sys

    raise SystemExit(_main(sys.argv[1:]))
