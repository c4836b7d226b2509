"""One name per open store file in this process.

A file can have several names: hard links, a folder mounted twice (bind mounts), a
case-insensitive file system. SQLite and DuckDB both name their side files (``-wal`` and
``-shm``, ``.wal``) after the name a file was opened by, and DuckDB keeps one database
per name in a process; so one file opened through two names in one process is written
through two logs that know nothing of each other, and acknowledged writes are lost.

The file engines therefore open every file through the first name it was opened by in
this process while it stays open here: a file is identified by its device and inode
(``os.stat``), never by the spelling of its path. When that name no longer leads to the
file (renamed or removed meanwhile), the second opening is refused with
:class:`~sessionkit.errors.StoreLocked` naming both names.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import StoreLocked

# (st_dev, st_ino) -> [the name the file is open by in this process, store objects on it]
_OPEN: dict[tuple[int, int], list[Any]] = {}
_LOCK = threading.Lock()


def file_id(path: str) -> tuple[int, int] | None:
    """The device and inode of ``path``; None when there is no such file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Claim:
    """A store object's hold on an open file: the name to open it by, and the file."""

    __slots__ = ("name", "fid")

    def __init__(self, name: str, fid: tuple[int, int] | None) -> None:
        self.name = name
        self.fid = fid


@contextlib.contextmanager
def claim(path: str) -> Iterator[Claim]:
    """Open ``path`` (an absolute name) as one file in this process.

    Yields a :class:`Claim` whose ``name`` is the name to open the file by: ``path``
    itself, or the name the file is already open by here. The caller opens the file
    inside the ``with`` block and calls :func:`release` when it closes; an exception
    inside the block gives the claim back. A file that does not exist yet is created
    inside the block under this module's lock (so two names of one new file cannot both
    create it); an existing one is opened without it.
    """
    with _LOCK:
        fid = file_id(path)
        if fid is None:
            # A new file: created by the caller while the lock is held, then recorded.
            held = Claim(path, None)
            yield held
            held.fid = file_id(path)
            if held.fid is not None:
                _OPEN.setdefault(held.fid, [path, 0])[1] += 1
            return
        entry = _OPEN.get(fid)
        if entry is None:
            entry = _OPEN[fid] = [path, 0]
        elif entry[0] != path and file_id(entry[0]) != fid:
            raise StoreLocked(
                f"store {path} is open in this process as {entry[0]}, which no longer names that file "
                f"(renamed or removed): close the store opened as {entry[0]} before opening {path}"
            )
        entry[1] += 1  # held from here: the entry stays while the caller opens the file
        held = Claim(entry[0], fid)
    try:
        yield held
    except BaseException:
        release(held)
        raise


def release(held: Claim | None) -> None:
    """A store object holding ``held`` was closed (once per claim; later calls do nothing)."""
    if held is None or held.fid is None:
        return
    with _LOCK:
        fid, held.fid = held.fid, None
        entry = _OPEN.get(fid)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _OPEN[fid]
