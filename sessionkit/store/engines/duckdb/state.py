"""What the DuckDB engine keeps of one database file in memory, and its append journal.

Only this process can write a DuckDB file (DuckDB's file lock), and every engine on one
file in this process shares one :class:`FileState`, under one lock. So the engine keeps
in memory what would otherwise cost a statement each (DuckDB spends about a millisecond
on any statement): each session's newest row, the newest rows of its latest path, the
ids each session holds, the sessions with stored messages, a block of reserved write
sequence numbers; and single appends go to a journal file beside the database instead
of a committed statement each (see ``engine.py``'s notes).

Invariant. Write *D* for the committed rows of ``sessionkit_messages`` and *J* for the
journal's rows: the complete lines of ``<file>.journal`` past its header (each line a
JSON array of messages rows, in ``TABLES`` order) and the rows of the
``sessionkit_journal`` table. Whenever the file's lock is released outside a write
transaction (and in no move of the journal), the following hold; :meth:`FileState.check`
tests every one of them against the database and the file:

J1. ``log_rows`` is the number of lines in the journal file past its header and
    ``log_size`` the file's length (with no file open, ``log_rows == 0``);
    ``table_rows`` the rows of ``sessionkit_journal``. ``pending`` is 0 exactly when
    *J* is empty, and at most its rows: it counts the rows written since the opening,
    and a line a killed process left as one (what decides a move: every read moves a
    journal that is not empty, an append one of ``_JOURNAL_ROWS``).
J2. Every row of *J* is a new message: its key is in neither *D* nor elsewhere in *J*
    (a journal moved again after a failure to empty it is the exception the move's
    ``ON CONFLICT DO NOTHING`` absorbs; it is emptied at once).
S1. ``journal_sids`` is None (not known: rows a killed process left) or holds every
    session with a row in *J*.
S2. A held id set ``keys[sid]`` is exactly the ids of ``sid`` in *D* and *J*, and
    ``key_total`` is the sum of the held sets' sizes.
S3. ``sids``, when it is a set, holds every session with a row in *D* or *J* (it may hold
    sessions since emptied).
C1. ``tails[sid]``, when held, is the newest row (highest seq) of ``sid`` in *D* and *J*.
C2. ``paths`` holds for ``sid`` a run that starts at that newest row, each row the parent
    of the one before, each with its stored JSON; ``sizes``/``total`` are their lengths.
C3. ``compacted[sid]``, when held, tells whether ``sid`` has compactions; ``any_compacted``
    False: no session has any (True or None: not known to be none).
Q1. Every number in ``seqs`` is above every seq of *D* and *J*, in ascending order.
I1. ``index_on``, when held, is the stored ``index_built`` flag.

What keeps it: every write of a row goes through :meth:`FileState.appended` (or
:meth:`imported`, for a batch); a change to a session's rows drops that session
(:meth:`forget_session`); a rollback drops every cache (:meth:`rolled_back`): what it
held may describe rows that were never committed; a move of the journal commits *J*
into *D* before it empties the file (:meth:`merged`); the first opening of a file in a
process (another may have written it) drops every cache and counts the lines a killed
process left (:meth:`recover`), whose sessions are then unknown (S1).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from ....errors import SessionKitError
from ..._schema import NODE_COLUMNS, TABLES
from ..._sql import with_created_at
from ..._values import Node

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileState"]

# Journal rows that make an append move the journal into the messages table at once
# (see DuckDBEngine.merge_journal); reads move it before they run.
_JOURNAL_ROWS = 4096
# Message ids held in memory for the journal's duplicate check, over all sessions
# (see FileState.keys_of); a session with more takes the indexed path.
_KEY_BUDGET = 200_000
# Session ids held in memory so that a new session's first append reads nothing.
_SESSION_BUDGET = 100_000

# The journal file beside a store file ``x.duckdb``.
_LOG_SUFFIX = ".journal"
# Its first line: what it is and the database it belongs to (sessionkit_meta's journal_id).
_LOG_HEADER = "sessionkit journal 1 "

#: A reader of rows that moves nothing first: ``read(sql, params) -> rows``.
Read = Callable[..., list[Any]]

_MESSAGE_COLUMNS = [c.name for c in TABLES["messages"].columns if "duckdb" in c.only]


class _Everything:
    """Contains every session (in place of a set too large to hold)."""

    def __contains__(self, item: object) -> bool:
        return True


_EVERYTHING = _Everything()


#: Where a row's JSON leaves out its text (the engine's row_json; Dialect.message_content
#: puts it back in SQL, whole_content here).
TEXT_GAP = '"text":}'


def text_value(text: str) -> str:
    """What a row's JSON holds of its text where the text ends its object, as the store
    writes JSON: the ``"text"`` key, the value and the closing brace (see TEXT_GAP)."""
    return '"text":' + json.encoder.encode_basestring(text) + "}"


def whole_content(content: str, text: str | None, created_at: str) -> str:
    """A row's stored JSON whole, as a read gives it (``Dialect.message_content``, then
    ``whole_json``), in Python, for the invariant's check: its text put back where the row
    left it out, its createdAt where a space ends it."""
    if text is not None and TEXT_GAP in content:
        content = content.replace(TEXT_GAP, text_value(text))
    return with_created_at(content, created_at)


def _fsync(fd: int) -> None:
    """Flush a file to stable storage: ``F_FULLFSYNC`` where the system has it (macOS,
    whose plain fsync may leave the data in the drive's cache), else ``fsync``."""
    full = getattr(fcntl, "F_FULLFSYNC", None) if fcntl is not None else None
    if full is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, full)
            return
    os.fsync(fd)


def sync_folder(path: str) -> None:
    """Record a file's creation in its folder (fsync the folder, where the system allows)."""
    try:
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the file itself is synced
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _Paths:
    """The newest rows of each session's latest path, with their stored JSON, newest first.

    Each entry is a run of the path from the session's newest row (its latest leaf)
    upwards: every row is the parent of the one before it. A read of the newest
    messages (``recent_history``, ``get_history``) takes them from here and continues
    in the database from the last one's parent. What is cached is what a read would
    return: rows this process wrote, or read while holding the store's lock. Sessions
    are kept in least-recently-used order within a byte budget.
    """

    #: Rows kept per session (a recent window of up to this many needs no statement).
    ROWS = 256
    #: Stored JSON longer than this is not kept (the path's cached run stops above it).
    ROW_BYTES = 64 * 1024
    #: Characters of stored JSON kept over all sessions.
    BUDGET = 16 * 1024 * 1024

    def __init__(self) -> None:
        self.runs: OrderedDict[str, list[tuple[Node, str]]] = OrderedDict()
        self.sizes: dict[str, int] = {}
        self.total = 0

    def get(self, sid: str) -> list[tuple[Node, str]] | None:
        run = self.runs.get(sid)
        if run is not None:
            self.runs.move_to_end(sid)
        return run

    def drop(self, sid: str) -> None:
        if self.runs.pop(sid, None) is not None:
            self.total -= self.sizes.pop(sid)

    def clear(self) -> None:
        self.runs.clear()
        self.sizes.clear()
        self.total = 0

    def put(self, sid: str, run: list[tuple[Node, str]]) -> None:
        """Cache ``run`` (newest first) for ``sid``, cut at the first row too long to keep."""
        self.drop(sid)
        kept: list[tuple[Node, str]] = []
        size = 0
        for node, raw in run[: self.ROWS]:
            if len(raw) > self.ROW_BYTES:
                break
            kept.append((node, raw))
            size += len(raw)
        if not kept:
            return
        self.runs[sid] = kept
        self.sizes[sid] = size
        self.total += size
        self._fit()

    def _fit(self) -> None:
        """Drop the least recently used sessions until the cache is within its budget."""
        while self.total > self.BUDGET and self.runs:
            self.drop(next(iter(self.runs)))

    def appended(self, sid: str, node: Node, raw: str) -> None:
        """A row was written under ``node.parent_id`` and is the session's newest."""
        run = self.runs.get(sid)
        if (
            run is not None
            and node.parent_id is not None
            and run[0][0].id == node.parent_id
            and len(raw) <= self.ROW_BYTES
        ):
            # The usual append, under the newest row: O(1) instead of copying the run.
            self.runs.move_to_end(sid)
            run.insert(0, (node, raw))
            size = len(raw)
            if len(run) > self.ROWS:
                size -= len(run.pop()[1])
            self.sizes[sid] += size
            self.total += size
            self._fit()
            return
        if node.parent_id is not None and run is not None:
            for i, (above, _) in enumerate(run):
                if above.id == node.parent_id:
                    self.put(sid, [(node, raw), *run[i:]])
                    return
        self.put(sid, [(node, raw)])


class FileState:
    """What this process keeps of one DuckDB file: caches, id sets and the journal file.

    Shared by every engine on the file in this process; callers hold :attr:`lock`. See
    the module's invariant.
    """

    def __init__(self, where: str = ":memory:") -> None:
        self.where = where  # the store's name in error messages
        self.lock = threading.RLock()
        self.users = 0  # open engines on this file in this process
        # The thread inside a write transaction on this file, if any (its reads must
        # see its own uncommitted writes: they run on its connection).
        self.writer: int | None = None
        # Write transactions committed on this file by this process (its change marker).
        self.commits = 0
        # None: not read yet.
        self.index_on: bool | None = None
        # Moves when a write to the file begins and again when it ends. Every write holds
        # the lock throughout, so a read outside the lock that finds the same version
        # under the lock before its snapshot and after the snapshot is taken read the
        # file as of that version (see search.TermsIndex._read_apart).
        self.version = 0
        # The search's indexed lengths as of one version (search._Lengths), if kept, and
        # the version of the newest write that changed or removed indexed messages.
        self.lengths: Any = None
        self.reshaped = 0
        # Each session's newest message (its latest leaf), so an append needs no lookup.
        self.tails: dict[str, Node] = {}
        # The newest rows of each session's latest path, and whether a session has
        # compactions: a recent window then needs no statement at all.
        self.paths = _Paths()
        self.compacted: dict[str, bool] = {}
        self.any_compacted: bool | None = None
        # Write sequence numbers reserved for single appends (see DuckDBEngine._next_seq).
        self.seqs: deque[int] = deque()
        # Rows in the journal (committed appends not yet in the messages table), and
        # whether they are being moved now (see DuckDBEngine.merge_journal).
        self.pending = 0
        self.merging = False
        # Of those, rows in the table (left by an earlier version, or in memory) and rows in
        # the journal file: its descriptor (open while an engine is), name, bytes written
        # (its header included) and header.
        self.table_rows = 0
        self.log_rows = 0
        self.log_fd: int | None = None
        self.log_path: str | None = None
        self.log_size = 0
        self.log_head = 0
        # The sessions those rows belong to; None: not known (rows an earlier process left).
        self.journal_sids: set[str] | None = set()
        # The message ids of sessions appended through the journal, least recently used
        # first, and how many ids they hold (see keys_of).
        self.keys: OrderedDict[str, set[str]] = OrderedDict()
        self.key_total = 0
        # Every session with a stored message, so a new session's first append reads
        # nothing; it may name sessions since emptied (their ids are read then). None:
        # not read yet; _EVERYTHING: more than _SESSION_BUDGET (each first append reads).
        self.sids: set[str] | _Everything | None = None

    # -- what the engine tells it -------------------------------------------------------
    def rolled_back(self) -> None:
        """Cached state may describe rows that were never committed: drop it all (the
        journal's counts stay: its rows are committed, in the file)."""
        self.writer = None
        self.index_on = None
        self.lengths = None
        self.tails.clear()
        self.paths.clear()
        self.compacted.clear()
        self.any_compacted = None
        self.seqs.clear()
        self.keys.clear()
        self.key_total = 0
        self.sids = None

    forget = rolled_back

    def forget_session(self, sid: str) -> None:
        """``sid``'s rows are about to change (an update, a delete, a clear)."""
        self.tails.pop(sid, None)
        self.paths.drop(sid)
        self.compacted.pop(sid, None)
        self.drop_keys(sid)

    def drop_keys(self, sid: str) -> None:
        keys = self.keys.pop(sid, None)
        if keys is not None:
            self.key_total -= len(keys)

    def stored_in(self, sid: str) -> None:
        """``sid`` has a stored message: the session set, if held, includes it."""
        if isinstance(self.sids, set):
            self.sids.add(sid)
            if len(self.sids) > _SESSION_BUDGET:
                self.sids = _EVERYTHING  # too many to hold: each first append reads its ids

    def appended(self, sid: str, node: Node, raw: str) -> None:
        """A row ``node`` (with its stored JSON ``raw``) was written, the session's newest,
        in the journal or the database (a rollback drops every set and cache)."""
        keys = self.keys.get(sid)
        if keys is not None:
            keys.add(node.id)
            self.key_total += 1
        self.stored_in(sid)
        self.tails[sid] = node
        self.paths.appended(sid, node, raw)

    def imported(self, sid: str, newest: Node) -> None:
        """Rows were written to ``sid`` in one batch, ``newest`` the last."""
        self.tails[sid] = newest
        self.paths.drop(sid)
        self.drop_keys(sid)
        self.stored_in(sid)

    def journaled(self, sid: str, rows: int, table: bool = False) -> None:
        """``rows`` rows of ``sid`` were written to the journal (its table when ``table``)."""
        self.pending += rows
        if table:
            self.table_rows += rows
        if self.journal_sids is not None:
            self.journal_sids.add(sid)

    def merged(self, full: bool) -> None:
        """The journal's rows are committed in the messages table: empty the journal."""
        self.table_rows = 0
        if self.log_rows:
            # Emptied only once its rows are committed; should this fail, the rows stay
            # and the next statement moves them again (a stored key keeps its row).
            self.empty_file(full)
        self.pending = 0
        self.journal_sids = set()

    def tail(self, sid: str) -> Node | None:
        return self.tails.get(sid)

    def full_now(self) -> bool:
        """The journal holds enough rows that an append should move it now."""
        return self.pending >= _JOURNAL_ROWS

    # -- the id sets ---------------------------------------------------------------------
    def keys_of(self, sid: str, read: Read, merge: Callable[[], None]) -> set[str] | None:
        """The ids stored in ``sid``, kept in memory while appends go through the journal
        (only this process writes the file, so the set stays true); None for a session
        too large to hold, whose appends take the indexed path. ``read`` reads without
        moving the journal; ``merge`` moves it."""
        keys = self.keys.get(sid)
        if keys is not None:
            self.keys.move_to_end(sid)
            return keys
        if self.pending and (self.journal_sids is None or sid in self.journal_sids):
            merge()  # the session's set was dropped while rows of it wait there
        if sid not in self.stored_sessions(read):
            ids = []  # a new session: nothing to read
        else:
            # Without moving the journal otherwise: one read (about a millisecond, a scan
            # even at a million rows), not a read and a commit.
            ids = read("SELECT id FROM sessionkit_messages WHERE session_id = ?", (sid,))
        if len(ids) > _KEY_BUDGET // 2:
            return None
        keys = self.keys[sid] = {r[0] for r in ids}
        self.key_total += len(keys)
        while self.key_total > _KEY_BUDGET and len(self.keys) > 1:
            self.drop_keys(next(iter(self.keys)))
        return keys

    def after_chain(self, sid: str) -> None:
        """A chain went to the journal: a set grown too large to hold is dropped."""
        if len(self.keys.get(sid, ())) > _KEY_BUDGET // 2:
            self.drop_keys(sid)  # too large to hold: its next append reads (see keys_of)

    def stored_sessions(self, read: Read) -> set[str] | _Everything:
        """The sessions that may have stored messages (read once; see ``sids``); a
        container of everything when there are too many to hold."""
        if self.sids is None:
            if self.pending and self.journal_sids is None:
                # Rows a killed process left, whose sessions are unknown, that the caller's
                # move could not take now: read the set another time.
                return _EVERYTHING
            rows = read("SELECT DISTINCT session_id FROM sessionkit_messages")
            self.sids = (
                {r[0] for r in rows} | (self.journal_sids or set()) if len(rows) <= _SESSION_BUDGET else _EVERYTHING
            )
        return self.sids

    # -- the journal file ----------------------------------------------------------------
    def _fail(self, what: str, exc: OSError) -> SessionKitError:
        return SessionKitError(f"DuckDB store {self.where}: cannot {what} its journal {self.log_path}: {exc}")

    def write_line(self, line: str, full: bool, journal_id: Callable[[], str]) -> None:
        """Append one journal line (the JSON array of the messages rows of one append or
        one chain) to the journal file, opening it (``journal_id()``: the database's id,
        for its header) on first use.

        Why a file of our own rather than a row of a DuckDB table: DuckDB spends about a
        millisecond on any committed statement (0.6 ms with its fsync turned off, on the
        machine of ``benchmarks/duckdb_cliffs_bench.py``), ten times what the SQLite
        engine spends on a whole append. A line written to a file with one ``write`` is
        in the operating system's hands when the append returns, so a killed process
        loses none (as with SQLite's WAL at ``synchronous=NORMAL``); with ``full`` each
        line is also fsynced before the append returns.
        """
        data = (line + "\n").encode("utf-8")
        fd = self.log_fd if self.log_fd is not None else self._open_file(journal_id(), full)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if full:
                _fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # no half line may stay before the next one
                os.ftruncate(fd, self.log_size)
            raise self._fail("write", exc) from exc
        self.log_size += len(data)
        self.log_rows += 1

    def _open_file(self, journal_id: str, full: bool) -> int:
        assert self.log_path is not None
        header = (_LOG_HEADER + journal_id + "\n").encode()
        try:
            fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
        except OSError as exc:
            raise self._fail("open", exc) from exc
        try:
            os.ftruncate(fd, 0)  # (nothing in it is pending: recover set aside or moved it)
            os.write(fd, header)
            if full:
                _fsync(fd)
                sync_folder(self.log_path)
        except OSError as exc:
            os.close(fd)
            raise self._fail("write", exc) from exc
        self.log_fd, self.log_size, self.log_head = fd, len(header), len(header)
        return fd

    def lines(self) -> list[str]:
        """The rows in the journal file, oldest first."""
        assert self.log_fd is not None
        try:
            # (lseek and read rather than pread, which Windows lacks; appends go to the end
            # whatever the offset, and the store's lock keeps them out meanwhile)
            os.lseek(self.log_fd, self.log_head, os.SEEK_SET)
            parts, left = [], self.log_size - self.log_head
            while left > 0:
                part = os.read(self.log_fd, left)
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            data = b"".join(parts)
        except OSError as exc:
            raise self._fail("read", exc) from exc
        lines = data.decode("utf-8").split("\n")
        lines.pop()  # after the last newline: nothing
        return lines

    def empty_file(self, full: bool) -> None:
        assert self.log_fd is not None
        try:
            os.ftruncate(self.log_fd, self.log_head)
            if full:
                _fsync(self.log_fd)
        except OSError as exc:
            raise self._fail("empty", exc) from exc
        self.log_size = self.log_head
        self.log_rows = 0

    def recover(self, file: str | None, belongs: Callable[[str], bool]) -> int:
        """On the first opening in this process: count the rows a killed process left in
        the journal file beside ``file`` (the next statement moves them); 0 when there is
        none. ``belongs(header)`` tells whether a header names this database.

        A line without its newline was being written when the process died (its append
        never returned) and is cut off. A journal file that belongs to another database
        (a store file replaced, or removed and made again, beside it) is renamed to
        ``<file>.journal.orphan`` and left alone.
        """
        self.close_file()
        self.log_path = None
        if file is None:
            return 0
        path = self.log_path = file + _LOG_SUFFIX
        try:
            with open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise self._fail("read", exc) from exc
        end = data.find(b"\n")
        header = data[: end + 1] if end >= 0 else b""
        cut = data.rfind(b"\n") + 1
        rows = data.count(b"\n", 0, cut) - 1 if header else 0
        if rows > 0 and not belongs(header.decode("utf-8", "replace").strip()):
            os.replace(path, path + ".orphan")
            return 0
        if rows <= 0:
            return 0
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            os.ftruncate(fd, cut)  # a half-written last line goes
        except OSError as exc:
            raise self._fail("open", exc) from exc
        self.log_fd, self.log_size, self.log_head = fd, cut, len(header)
        return rows

    def opened(self, table_rows: int, file: str | None, belongs: Callable[[str], bool]) -> None:
        """The first engine on the file in this process opened it: nothing cached from
        before holds (another process may have written it since); count the journal's
        rows that a killed process left (``table_rows`` in its table)."""
        self.rolled_back()
        self.table_rows = table_rows
        self.log_rows = self.recover(file, belongs)
        self.pending = self.table_rows + self.log_rows
        self.journal_sids = set() if not self.pending else None

    def close_file(self) -> None:
        """The last engine on the file closed: let go of the journal file, and remove it
        when it holds no row."""
        fd, self.log_fd = self.log_fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.close(fd)
        if not self.log_rows and self.log_path is not None:
            with contextlib.suppress(OSError):
                os.remove(self.log_path)

    # -- the invariant ----------------------------------------------------------------------
    def journal_rows(self, read: Read) -> list[dict[str, Any]]:
        """The journal's rows as dicts of the messages table's columns, oldest first (the
        table's, then the file's), read without moving them."""
        rows = [json.loads(r[0]) for r in read("SELECT row FROM sessionkit_journal ORDER BY rowid")]
        if self.log_path is not None and os.path.exists(self.log_path):
            with open(self.log_path, "rb") as fh:
                data = fh.read()
            for line in data.decode("utf-8").split("\n")[1:]:
                if line:
                    rows += json.loads(line)
        return [dict(zip(_MESSAGE_COLUMNS, r)) for r in rows]

    def check(self, read: Read) -> None:
        """Raise AssertionError naming the first clause of the module's invariant that
        does not hold. ``read`` reads committed rows without moving the journal; call it
        with the lock free of writers (no write transaction, no move under way)."""
        assert self.writer is None and not self.merging, "checked inside a write"
        # J1
        if self.log_fd is not None:
            assert self.log_path is not None
            size = os.path.getsize(self.log_path)
            assert size == self.log_size, f"J1: journal file of {size} bytes, counted {self.log_size}"
            with open(self.log_path, "rb") as fh:
                lines = fh.read().count(b"\n") - 1
            assert lines == self.log_rows, f"J1: {lines} journal lines, counted {self.log_rows}"
        else:
            assert self.log_rows == 0, "J1: journal rows counted with no journal file open"
        table = read("SELECT count(*) FROM sessionkit_journal")[0][0]
        assert table == self.table_rows, f"J1: {table} rows in sessionkit_journal, counted {self.table_rows}"
        journal = self.journal_rows(read)
        assert (self.pending == 0) == (not journal), f"J1: pending {self.pending} with {len(journal)} journal rows"
        assert self.table_rows + self.log_rows <= self.pending <= len(journal), "J1: pending is not the journal's rows"
        # J2
        cols = (*NODE_COLUMNS, "session_id", "msg_key", "content", "chunks", "text")
        stored = read(f"SELECT {', '.join(cols)} FROM sessionkit_messages")
        rows = [dict(zip(cols, r)) for r in stored]
        for r in rows + journal:  # (each row's JSON whole, as a read gives it)
            if not r["chunks"]:
                r["content"] = whole_content(r["content"], r["text"], r["created_at"])
        keys_in_db = {r["msg_key"] for r in rows}
        jkeys = [r["msg_key"] for r in journal]
        assert len(set(jkeys)) == len(jkeys), "J2: a key twice in the journal"
        assert not keys_in_db.intersection(jkeys), "J2: a journal row's key is stored already"
        every = rows + journal
        # S1
        if self.journal_sids is not None:
            missing = {r["session_id"] for r in journal} - self.journal_sids
            assert not missing, f"S1: journal rows of sessions {sorted(missing)} not in journal_sids"
        by_sid: dict[str, list[dict[str, Any]]] = {}
        for r in every:
            by_sid.setdefault(r["session_id"], []).append(r)
        # S2
        for sid, keys in self.keys.items():
            ids = {r["id"] for r in by_sid.get(sid, [])}
            assert keys == ids, f"S2: the id set of {sid!r} differs from its stored ids"
        assert self.key_total == sum(map(len, self.keys.values())), "S2: key_total is not the sets' sizes"
        # S3
        if isinstance(self.sids, set):
            missing = set(by_sid) - self.sids
            assert not missing, f"S3: sessions {sorted(missing)} stored but not in the session set"
        # C1, C2
        node_of = {(r["session_id"], r["id"]): Node(*(r[c] for c in NODE_COLUMNS)) for r in every}
        content = {(r["session_id"], r["id"]): r["content"] for r in every if not r["chunks"]}
        for sid, tail in self.tails.items():
            newest = max(by_sid.get(sid, []), key=lambda r: r["seq"], default=None)
            assert newest is not None, f"C1: a tail held for {sid!r}, which has no row"
            assert tail == node_of[(sid, newest["id"])], f"C1: the tail of {sid!r} is not its newest row"
        for sid, run in self.paths.runs.items():
            newest = max(by_sid.get(sid, []), key=lambda r: r["seq"], default=None)
            assert newest is not None and run[0][0].id == newest["id"], f"C2: the run of {sid!r} is not at its newest"
            for i, (node, raw) in enumerate(run):
                assert node == node_of.get((sid, node.id)), f"C2: row {node.id!r} of {sid!r} differs from the stored"
                if (sid, node.id) in content:
                    assert raw == content[(sid, node.id)], f"C2: the JSON of {node.id!r} differs from the stored"
                if i:
                    assert run[i - 1][0].parent_id == node.id, f"C2: the run of {sid!r} skips a parent"
            assert self.paths.sizes[sid] == sum(len(raw) for _, raw in run), f"C2: the size of {sid!r}'s run"
        assert self.paths.total == sum(self.paths.sizes.values()), "C2: the total of the runs' sizes"
        # C3
        for sid, flag in self.compacted.items():
            has = read("SELECT count(*) FROM sessionkit_compactions WHERE session_id = ?", (sid,))[0][0] > 0
            assert flag == has, f"C3: {sid!r} is held {'with' if flag else 'without'} compactions"
        if self.any_compacted is False:
            assert read("SELECT count(*) FROM sessionkit_compactions")[0][0] == 0, "C3: compactions held as none"
        # Q1
        seqs = list(self.seqs)
        assert seqs == sorted(seqs), "Q1: reserved seqs out of order"
        if seqs and every:
            top = max(r["seq"] for r in every)
            assert seqs[0] > top, f"Q1: reserved seq {seqs[0]} not above the stored {top}"
        # I1
        if self.index_on is not None:
            built = read("SELECT value FROM sessionkit_meta WHERE key = 'index_built'")
            assert self.index_on == bool(built and built[0][0] == "1"), "I1: index_on differs from the stored flag"
