"""The server lease: one server at a time on a SQLite or DuckDB store file.

The lease is an operating-system lock (``flock`` on POSIX, ``msvcrt.locking`` on
Windows) on a small file beside the store, ``<store file>.server.lock``. The kernel
drops the lock when the holding process ends, however it ends (``kill -9``, a
crash, a power cut), so a crashed server never leaves a stale lease behind and no
expiry or refresh is needed. While it holds the lock, the server writes who it is
into the file (pid, program name, host, start time; never its command line, which
may carry secrets), so a second server can name the holder when it refuses to start.

The lock file is never deleted: unlinking a lock file lets a process that opened the
old file lock it while another locks a new one, and both would believe they hold it.
Locks on network file systems depend on the file system; keep a served store on a
local disk, or use PostgreSQL to share one store between servers.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

from .. import messages as _msg
from ..errors import SessionKitError, StoreLocked

__all__ = ["Lease"]

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]
    import msvcrt

# On Windows the locked byte is far past the holder text, so the text stays readable.
_WIN_LOCK_OFFSET = 1 << 20


class Lease:
    """An exclusive, crash-safe lease on a store file for this server."""

    def __init__(self, store_path: str) -> None:
        self.store_path = store_path
        self.path = store_path + ".server.lock"
        self._fd: int | None = None
        self.holder: dict | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lease, or raise :class:`~sessionkit.StoreLocked` naming the holder."""
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SessionKitError(
                f"cannot take the server lease on {self.store_path}: cannot open {self.path}: {exc}"
            ) from exc
        try:
            if not _try_lock(fd):
                holder = _read_holder(fd)
                raise StoreLocked(_describe_holder(self.store_path, self.path, holder))
            me = {
                "pid": os.getpid(),
                "program": _program(),
                "host": socket.gethostname(),
                "startedAt": _msg.now_iso(),
                "store": self.store_path,
            }
            data = (json.dumps(me) + "\n").encode()
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, data)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.holder = me

    def release(self) -> None:
        """Give the lease back (idempotent). The file stays, empty."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        try:
            _unlock(fd)
        finally:
            os.close(fd)

    def __del__(self) -> None:  # a forgotten lease still goes when the object does
        try:
            self.release()
        except Exception:
            pass


def _try_lock(fd: int) -> bool:
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as exc:  # EACCES/EAGAIN on some systems mean "held"
            if exc.errno in (11, 13, 35):
                return False
            raise
        return True
    os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)  # pragma: no cover - Windows
    try:  # pragma: no cover - Windows
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:  # pragma: no cover - Windows
        return False
    return True  # pragma: no cover - Windows


def _unlock(fd: int) -> None:
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return
    os.lseek(fd, _WIN_LOCK_OFFSET, os.SEEK_SET)  # pragma: no cover - Windows
    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # pragma: no cover - Windows


def _read_holder(fd: int) -> dict | None:
    # The holder writes its name just after locking: give it a moment if the file is empty.
    for _ in range(20):
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            raw = os.read(fd, 4096)
        except OSError:
            return None
        if raw.strip():
            try:
                value = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
        time.sleep(0.025)
    return None


def _program() -> str:
    """This process's program name, never its arguments (they may hold secrets)."""
    try:
        with open("/proc/self/comm", encoding="utf-8", errors="replace") as fh:
            comm = fh.read().strip()
    except OSError:
        comm = ""
    return comm or os.path.basename(sys.executable) or "python"


def _describe_holder(store_path: str, lock_path: str, holder: dict | None) -> str:
    if holder:
        program = holder.get("program")
        program = f" ({str(program)[:64]})" if program else ""
        who = (
            f"pid {holder.get('pid', '?')}{program} on host {holder.get('host', '?')}, "
            f"started {holder.get('startedAt', '?')}"
        )
    else:
        who = "a process that has not written its name"
    return (
        f"store {store_path} is already served by another sessionkit server ({who}); "
        f"stop that server first, or use a PostgreSQL store to run several servers "
        f"(lease file: {lock_path})"
    )
