"""Shared pieces of the importers: the grouped writes every importer makes, the sessions an
import wrote to, and imports that add a conversation to a session that already holds one.
Reading files (:mod:`._reading`) and progress (:mod:`._progress`) have rooms of their own.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sqlite3
import sys
import warnings
from array import array
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple

from ..errors import MalformedInput, MessageTooLarge, SessionKitError
from ..store import Session, Store
from ._progress import check_progress

__all__ = [
    "Batches",
    "located",
    "SessionList",
    "sessions_result",
    "SessionMergeWarning",
    "RootWatch",
    "watching_roots",
    "write_items",
]


def _plural(n: int, unit: str) -> str:
    return f"{n:,} {unit[:-1] if n == 1 and unit.endswith('s') else unit}"


# ---------------------------------------------------------------------------
# Grouped writes


class Batches:
    """The writes of one import: records grouped into transactions, and how far they got.

    Each record (a tree, a pair, a block of JSONL lines, a batch of chat messages) is
    written by one call of :meth:`write`, inside the open ``store.transaction()``;
    every ``group`` records, or ``max_bytes`` of source text, the transaction
    commits. Fewer commits make bulk imports much faster, on file stores and on
    DuckDB above all.

    When an import fails, what it stored is whole and is exactly the records before
    the one at fault:

    * a problem found before a record is written (its text, its shape): the records
      written so far commit, nothing of that record is written;
    * the store refusing a record (or failing while writing it): the transaction is
      rolled back, the earlier records of its group are written again and commit,
      and ``salvage`` may store the part of a splittable record (a block of JSONL
      lines, a batch of chat messages) that precedes the bad item and name that item.

    The error then says how many records are stored (:attr:`MalformedInput.imported`,
    or a note on other errors); importing the corrected file again completes the
    import, since imports are idempotent.

    Records of messages (:meth:`write_import`: a pair, a tree, a block of lines) wait
    until the group is complete, or another kind of record comes, and are then written
    together by one ``store.import_many``, a few statements for the whole group on
    engines that insert in batches. When the store refuses that call, nothing of it is
    kept and the group's records are written again one at a time as above, so the
    record at fault fails alone with its own error.
    """

    def __init__(self, store, *, source: str, unit: str, group: int = 200, max_bytes: int = 32 << 20):
        self._store = store
        self._source = source
        self._unit = unit
        self._group = group
        self._max_bytes = max_bytes
        self._cm = None
        self._pending: list[tuple[str, Callable[[], Any], int]] = []  # (where, write, records)
        self._queued: list[_Queued] = []  # records of messages waiting for one import_many
        self._bytes = 0
        self.stored = 0  # records committed
        self.last: str | None = None  # where the last committed record was

    def __enter__(self) -> Batches:
        return self

    def _open(self) -> None:
        cm = self._store.transaction()
        cm.__enter__()
        self._cm = cm

    def _close(self, exc: BaseException | None) -> None:
        cm, self._cm = self._cm, None
        if cm is None:
            return
        if exc is None:
            cm.__exit__(None, None, None)
        else:
            cm.__exit__(type(exc), exc, exc.__traceback__)

    def write(
        self,
        where: str,
        fn: Callable[[], Any],
        *,
        nbytes: int = 0,
        records: int = 1,
        salvage: Callable[[BaseException], BaseException | None] | None = None,
    ) -> None:
        """Run ``fn`` (the writes of one record, found at ``where``) in the open transaction.

        ``records``: how many records ``fn`` stores (a block of lines counts each).
        ``salvage(error)``, called after a failure once the earlier records are safe,
        stores the good part of this record itself (reporting it with :meth:`add`)
        and returns the error to raise in place of ``error`` (or None to keep it).
        """
        if self._queued:
            self._drain()  # in file order: the records of messages before this one first
        if self._cm is None:
            self._open()
        try:
            fn()
        except Exception as exc:
            self._close(exc)
            self._rewrite()
            if salvage is not None:
                try:
                    replacement = salvage(exc)
                except Exception:
                    replacement = None
                if replacement is not None:
                    raise replacement from exc
            raise
        except BaseException as exc:  # KeyboardInterrupt: give up the group, quickly
            self._pending.clear()
            self._close(exc)
            raise
        self._pending.append((where, fn, records))
        self._bytes += nbytes
        if len(self._pending) >= self._group or self._bytes >= self._max_bytes:
            self.commit()

    def write_import(
        self,
        where: str,
        session,
        items: list,
        fn: Callable[[], Any],
        *,
        watch: RootWatch | None = None,
        nbytes: int = 0,
        records: int = 1,
        salvage: Callable[[BaseException], BaseException | None] | None = None,
    ) -> None:
        """A record of messages: ``session.import_many(items)``, written with the rest of its
        group in one ``store.import_many``. ``fn`` writes it alone, turning the store's
        errors into the record's own (``write`` runs it when the group's call fails);
        ``watch`` hears of the roots the group added."""
        self._queued.append(_Queued(where, session, items, fn, watch, nbytes, records, salvage))
        self._bytes += nbytes
        if len(self._pending) + len(self._queued) >= self._group or self._bytes >= self._max_bytes:
            self.commit()

    def write_record(
        self,
        where: str,
        session,
        items: list,
        what: str,
        *,
        watch: RootWatch | None,
        nbytes: int = 0,
        at: str | None = None,
    ) -> None:
        """:meth:`write_import` of a record of messages that is one ``what`` (a pair, a tree)
        found at ``where``; written alone by :func:`write_alone`, naming ``at`` in its errors
        (default ``where``)."""
        fn = partial(write_alone, session, items, self._source, at or where, watch, what)
        self.write_import(where, session, items, fn, watch=watch, nbytes=nbytes)

    def _drain(self) -> None:
        """Write the queued records of messages in one ``store.import_many``, in the open
        transaction; when it fails, write them one at a time (see the class notes)."""
        queued, self._queued = self._queued, []
        if not queued:
            return
        if self._cm is None:
            self._open()
        batch = [(q.session.session_id, q.items) for q in queued]
        try:
            for watch in {id(q.watch): q.watch for q in queued if q.watch is not None}.values():
                watch.before_many([q.session.session_id for q in queued if q.watch is watch])
            results = self._store.import_many(batch)
        except Exception as exc:
            self._close(exc)
            self._rewrite()
            for q in queued:  # the record at fault raises its own error; those before it stay
                self.write(q.where, q.fn, nbytes=q.nbytes, records=q.records, salvage=q.salvage)
            return
        except BaseException as exc:  # KeyboardInterrupt: give up the group, quickly
            self._pending.clear()
            self._close(exc)
            raise
        for q, result in zip(queued, results):
            if q.watch is not None:
                q.watch.after(q.session, q.items, result)
        stored = sum(q.records for q in queued)
        self._pending.append((queued[-1].where, partial(self._store.import_many, batch), stored))

    def add(self, records: int, where: str) -> None:
        """Count ``records`` stored by a caller's own committed write (see ``salvage``)."""
        if records:
            self.stored += records
            self.last = where

    def _rewrite(self) -> None:
        """After a rollback: write the group's earlier records again, and commit them."""
        pending, self._pending = self._pending, []
        self._bytes = 0
        if not pending:
            return
        try:
            with self._store.transaction():
                for _, fn, _ in pending:
                    fn()
        except Exception:
            return
        self.stored += sum(n for _, _, n in pending)
        self.last = pending[-1][0]

    def commit(self) -> None:
        self._drain()
        pending, self._pending = self._pending, []
        self._bytes = 0
        self._close(None)
        if pending:
            self.stored += sum(n for _, _, n in pending)
            self.last = pending[-1][0]

    def progress_note(self) -> str:
        if not self.stored:
            return "nothing was stored"
        return (
            f"the {_plural(self.stored, self._unit)} before it are stored, through {self.last}; "
            f"importing the corrected file again adds the rest"
        )

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._queued:  # records read before the end (or the problem): written, unless one fails
            try:
                self._drain()
            except Exception as failed:  # that record's own error: it comes first in the file
                self._note(failed)
                raise
            except BaseException:
                self._queued.clear()
                if exc is None:
                    raise
        if exc is None:
            self.commit()
            return
        if self._cm is not None:  # a problem found between writes: what was written is whole
            try:
                self.commit()
            except BaseException:
                self._pending.clear()
                self._cm = None
        self._note(exc)

    def _note(self, exc: BaseException) -> None:
        """Tell ``exc`` how far the import got."""
        note = self.progress_note()
        if isinstance(exc, MalformedInput):
            exc._set_progress(self.stored, note)
        elif isinstance(exc, MessageTooLarge) and getattr(exc, "_sessionkit_io", False):
            exc.args = (f"{exc.args[0]} ({note})",)
        elif isinstance(exc, BaseException):
            exc.add_note(f"importing {self._source}: {note}")


class _Queued(NamedTuple):
    """A record of messages waiting in :class:`Batches` (see ``Batches.write_import``)."""

    where: str
    session: Any
    items: list
    fn: Callable[[], Any]
    watch: RootWatch | None
    nbytes: int
    records: int
    salvage: Callable[[BaseException], BaseException | None] | None


def located(exc: MessageTooLarge, source: str, where: str) -> MessageTooLarge:
    """``exc`` again, its message naming the file and the record."""
    new = MessageTooLarge(f"{source}, {where}: {exc}")
    new._sessionkit_io = True  # type: ignore[attr-defined]
    return new


def check_file_import(store: Any, session_prefix: Any, progress: Any) -> None:
    """The first checks of a file importer that takes ``session_prefix``: a sessionkit
    :class:`Store`, a str prefix (``TypeError`` naming what was given), a valid ``progress``."""
    if not isinstance(store, Store):
        raise TypeError(f"expected a sessionkit Store, got {type(store).__name__}")
    if not isinstance(session_prefix, str):
        raise TypeError(f"session_prefix must be a string, got {type(session_prefix).__name__}")
    check_progress(progress)


def write_alone(session, items: list, source: str, where: str, watch: RootWatch | None, what: str) -> None:
    """One record of messages (a ``what``: a pair, a tree) written by itself (:func:`write_items`):
    a message over the store's limit raises :class:`MessageTooLarge` naming the file and
    ``where``, anything else the store refuses :class:`MalformedInput` naming the record."""
    try:
        write_items(session, items, watch)
    except MessageTooLarge as exc:
        raise located(exc, source, where) from None
    except (ValueError, TypeError, LookupError) as exc:
        raise MalformedInput(source, where, f"cannot import {what} into session {session.session_id!r}: {exc}") from exc


# ---------------------------------------------------------------------------
# The sessions an import wrote to


class _SeenIds:
    """An exact set of strings that stays small in memory: a Python set up to
    ``spill`` entries, then a table in a private temporary SQLite file.

    An import of a million one-session lines must not keep a million ids in memory
    (a set of them takes about 110 MB); SQLite's B-tree on disk keeps only its page
    cache (a few MB) and answers in microseconds, next to the milliseconds a record
    takes to store. sqlite3 is in the standard library.
    """

    def __init__(self, spill: int = 50_000):
        self._set: set[str] | None = set()
        self._spill = spill
        self._db: sqlite3.Connection | None = None

    def add(self, key: str) -> bool:
        """Add ``key``; True when it was not there yet."""
        if self._set is not None:
            if key in self._set:
                return False
            self._set.add(key)
            if len(self._set) > self._spill:
                self._to_disk()
            return True
        assert self._db is not None
        return self._db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (key,)).rowcount == 1

    def _to_disk(self) -> None:
        db = sqlite3.connect("", isolation_level=None)  # "": a private file, deleted on close
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE seen (k TEXT PRIMARY KEY) WITHOUT ROWID")
        db.execute("BEGIN")  # one transaction for the whole import: no commit per id
        db.executemany("INSERT INTO seen VALUES (?)", ((k,) for k in self._set or ()))
        self._db, self._set = db, None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._set = None


#: Up to this many sessions an import returns a plain ``list`` of handles (docs/importing.md:
#: ``list[Session]``, about 280 bytes a session); past it, the packed :class:`SessionList`,
#: so that an import of a million sessions stays in bounded memory.
LIST_UP_TO = 10_000


def sessions_result(sessions: SessionList) -> Sequence[Session]:
    """What an import of many sessions returns: a ``list`` of its sessions, or past
    :data:`LIST_UP_TO` of them the :class:`SessionList` itself (the one type every importer
    into a store declares: ``Sequence[Session]``)."""
    return list(sessions) if len(sessions) <= LIST_UP_TO else sessions


class SessionList(Sequence[Session]):
    """The sessions an import wrote to, in order: a sequence of :class:`sessionkit.Session`.

    Used as a list (``len``, indexing, slicing, iteration, unpacking, ``==`` with a
    list of sessions). It holds the session ids packed, about 8 bytes plus the id's
    length each, and gives each handle (``store.session(id)``) when asked for, so an
    import of a million sessions does not keep a million handles in memory.
    """

    def __init__(self, store, *, spill: int = 50_000):
        self._store = store
        self._data = bytearray()  # the ids' UTF-8 bytes, one after the other
        self._ends = array("q")  # where each id ends in _data
        self._seen: _SeenIds | None = _SeenIds(spill)  # while ids are added: those added so far

    def append_new(self, session_id: str) -> bool:
        """Add ``session_id`` unless it is there already; True when added."""
        if self._seen is None:
            raise RuntimeError("the list is finished")
        if not self._seen.add(session_id):
            return False
        self._data += session_id.encode("utf-8", "surrogatepass")
        self._ends.append(len(self._data))
        return True

    @property
    def store(self):
        """The store the sessions are in."""
        return self._store

    def finish(self) -> SessionList:
        """No more ids: let go of what finding duplicates needed."""
        if self._seen is not None:
            self._seen.close()
            self._seen = None
        return self

    def __enter__(self) -> SessionList:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()

    def ordered(self, keys: array) -> SessionList:
        """A new, finished list of these sessions sorted by ``keys`` (one per session; stable)."""
        out = SessionList(self._store).finish()
        for i in sorted(range(len(self)), key=keys.__getitem__):
            out._data += self._raw(i)
            out._ends.append(len(out._data))
        return out

    def _raw(self, i: int) -> bytes:
        return bytes(self._data[self._ends[i - 1] if i else 0 : self._ends[i]])

    def _id(self, i: int) -> str:
        return self._raw(i).decode("utf-8", "surrogatepass")

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"session indices must be integers or slices, not {type(i).__name__}") from None
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("session index out of range")
        return self._store.session(self._id(i))

    def __iter__(self) -> Iterator:
        for i in range(len(self)):
            yield self._store.session(self._id(i))

    @property
    def ids(self) -> list[str]:
        """The session ids, in order."""
        return [self._id(i) for i in range(len(self))]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SessionList):
            return self.store is other.store and self.ids == other.ids
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a is b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable while the import runs, as a list

    def __repr__(self) -> str:
        n = len(self)
        shown = ", ".join(repr(self._id(i)) for i in range(min(n, 3))) + (", ..." if n > 3 else "")
        return f"<SessionList: {n} session{'' if n == 1 else 's'} [{shown}]>"


# ---------------------------------------------------------------------------
# Imports that add a conversation to a session that already holds one


class SessionMergeWarning(UserWarning):
    """An import added new root messages to sessions that already held messages.

    Each such session now holds several separate conversations (trees), usually because
    two sources use the same conversation ids (``airline-1`` in two frameworks' stores).
    ``sessions`` lists the first few such session ids, ``count`` says how many there are
    and ``source`` names the file. Import with ``session_prefix=`` (``sessionkit import
    --session-prefix``) to keep the sources apart. Importing the same file again adds no
    root and does not warn.
    """

    def __init__(self, message: str, *, source: str = "", sessions: tuple[str, ...] = (), count: int = 0):
        super().__init__(message)
        self.source = source
        self.sessions = sessions
        self.count = count


def _outside_package_level() -> int:
    """The ``stacklevel`` that makes a warning point at the first caller outside sessionkit."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frame = sys._getframe(1)  # the caller of warnings.warn is frame 1 of the warning
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(package) or frame.f_code.co_filename == contextlib.__file__
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


class RootWatch:
    """The sessions one import adds a new root message to while they already held messages.

    :func:`write_items` and :class:`Batches` ask it, before the first write to a session,
    whether the session holds messages (one ``store.sessions_holding`` per group of records),
    and after each write which roots were inserted (an idempotent import inserts none). :meth:`warn` then issues one
    :class:`SessionMergeWarning` naming the first few sessions.
    """

    SHOWN = 5

    def __init__(self, store, source: str, hint: str):
        self.store = store
        self.source = source
        self.hint = hint
        self._touched: _SeenIds | None = _SeenIds()  # sessions written to so far (spills to disk)
        self._held: set[str] = set()  # of those, the ones that held messages before this import
        self._found: dict[str, str] = {}  # session -> a root this import added to it (the first SHOWN)
        self.count = 0

    def before(self, session) -> None:
        self.before_many([session.session_id])

    def before_many(self, session_ids: list[str]) -> None:
        """Before writing to these sessions: note which of those this import has not written
        to yet held messages (one ``store.sessions_holding`` for all of them)."""
        if self._touched is None:
            return
        first = [sid for sid in dict.fromkeys(session_ids) if self._touched.add(sid)]
        if first:
            self._held.update(self.store.sessions_holding(first))

    def after(self, session, items: Sequence, results: Sequence) -> None:
        sid = session.session_id
        if sid not in self._held:
            return
        for (message, parent, _), result in zip(items, results):
            if parent is None and result.inserted:
                self._held.discard(sid)  # each session counted once
                self.count += 1
                if len(self._found) < self.SHOWN:
                    self._found[sid] = message["id"]
                return

    def warn(self) -> None:
        """One :class:`SessionMergeWarning` when the import added roots to sessions that held messages."""
        if self._touched is not None:
            self._touched.close()
            self._touched = None
        # a root written in a transaction that was rolled back (the record at fault) is not stored
        shown = []
        for sid, root in self._found.items():
            try:
                stored = self.store.session(sid).get(root) is not None
            except SessionKitError:  # the store closed meanwhile: say what was written
                stored = True
            if stored:
                shown.append(sid)
            else:
                self.count -= 1
        self._found = {}
        if self.count <= 0:
            return
        listed = ", ".join(repr(sid) for sid in shown)
        more = self.count - len(shown)
        if more > 0:
            listed += f" and {more:,} more"
        n = _plural(self.count, "sessions")
        verb = "it" if self.count == 1 else "each"
        message = (
            f"importing {self.source} added new conversations (root messages) to {n} that already held "
            f"messages: {listed}; {verb} now holds several separate conversations. {self.hint}"
        )
        warnings.warn(
            SessionMergeWarning(message, source=self.source, sessions=tuple(shown), count=self.count),
            stacklevel=_outside_package_level(),
        )


def write_items(session, items: list, watch: RootWatch | None):
    """``session.import_many(items)``, telling ``watch`` which new roots it added to a session
    that already held messages."""
    if watch is None:
        return session.import_many(items)
    watch.before(session)
    results = session.import_many(items)
    watch.after(session, items, results)
    return results


#: What a :class:`SessionMergeWarning` suggests, for the importers that take ``session_prefix``.
PREFIX_HINT = (
    "Import with session_prefix= (sessionkit import --session-prefix) to keep the sessions of different sources apart."
)


@contextlib.contextmanager
def watching_roots(store, source: str, hint: str = PREFIX_HINT) -> Iterator[RootWatch]:
    """A :class:`RootWatch` for one import; its warning is issued when the import ends, also when
    it fails (the roots written before the failure stay)."""
    watch = RootWatch(store, source, hint)
    try:
        yield watch
    except BaseException as exc:
        try:
            watch.warn()
        except Exception as turned:  # warnings filtered into errors: the import's own error goes first
            exc.add_note(str(turned))
        raise
    watch.warn()
