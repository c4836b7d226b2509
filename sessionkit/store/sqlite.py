"""SQLite engine: stdlib ``sqlite3``, WAL, FTS5.

What SQLite changes from the shared engine (:mod:`sessionkit.store._sql`):

* **Connection.** One connection per store, shared by threads under a re-entrant
  lock; writes run in ``BEGIN IMMEDIATE`` transactions so several processes can
  append to one file: a writer waits up to ``busy_timeout`` seconds (30 by default)
  for another process's write lock, then gets :class:`~sessionkit.StoreLocked`.
* **Write order.** Each message is one row keyed by a store-wide ``seq`` (the rowid:
  a new row always gets a number above every row present, which is all write order
  needs; ``AUTOINCREMENT`` would cost an extra write per append), with
  ``UNIQUE(session_id, id)`` giving idempotent inserts.
* **Fewer index pages per append.** Each index a row enters is one more page written
  per commit, which is most of an append's cost. The latest leaf comes from the index
  on ``(session_id, seq)``; the children index holds branches only: a row whose parent
  was its session's latest row is the next row after it in that order (``branch`` =
  0), which is how conversations grow, so such an append writes the table, the key
  index and the order index.
* **Fast append.** A plain append is one statement; under the latest leaf it inserts
  with ``VALUES`` and checks, in the same statement, that the session's latest row is
  still the one this connection last wrote there (see _APPEND_AFTER).
* **Search.** FTS5, built on the first search and kept by triggers after. A store
  larger than ``search_window`` messages (131,072 by default; an ``open_store``
  option) by a quarter also keeps a second FTS5 index of its newest messages, the
  search window, brought up to date by each search: a search whose candidates all lie
  there is ranked with the window's word statistics, so its cost stays bounded however
  large the store grows (see _RECENT_TABLE).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .. import messages as _msg
from ..errors import SessionKitError, StoreCorrupt, StoreLocked
from . import _files
from . import search as _search
from ._schema import DIALECTS, INSERT_COLUMNS, PREPARED_COLUMNS, SCHEMA_VERSION, TABLES
from ._sql import LocalEngine
from ._values import Appended, Capabilities, Node, _Latest

__all__ = ["SQLiteEngine", "SCHEMA_VERSION", "DEFAULT_SEARCH_WINDOW"]

# SQLite's primary result codes (https://sqlite.org/rescode.html) that translate() maps.
_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 1, 5, 6, 11, 26

#: Messages in the search window (see _RECENT_TABLE): a store larger than this by a
#: quarter keeps a second full-text index of its newest messages.
DEFAULT_SEARCH_WINDOW = 1 << 17

_MAX_SEQ = (1 << 63) - 1


_FTS_TABLE = """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )"""

_FTS_TRIGGERS = [
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_insert AFTER INSERT ON sessionkit_messages
       WHEN new.chunks = 0 BEGIN
         INSERT INTO sessionkit_fts(rowid, body) VALUES (new.seq, sessionkit_index_text(new.content));
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_delete AFTER DELETE ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
       END""",
    """CREATE TRIGGER IF NOT EXISTS sessionkit_fts_update AFTER UPDATE OF content ON sessionkit_messages BEGIN
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
         INSERT INTO sessionkit_fts(rowid, body)
           SELECT new.seq, sessionkit_index_text(new.content) WHERE new.chunks = 0;
       END""",
]

# The search window. FTS5's bm25() counts, for each query word, every indexed row that
# holds it, so ranking a common word costs time in proportion to the whole store even
# when only the newest matches are ranked. Once a store outgrows `search_window` by a
# quarter, a second FTS5 table holds exactly the main index's rows with seq in
# [recent_lo, recent_hi] (kept in sessionkit_meta). Each search first brings the window
# up to the newest row, dropping what falls behind its `search_window` messages, in one
# write transaction (SQLiteEngine._sync_window), so appends never pay for it; a search
# whose candidates all lie in the window is ranked there and its word counts stay
# bounded however large the store grows. The triggers below replace _FTS_TRIGGERS then:
# they keep rows inside the window's range in step (deletes, updates, and inserts that
# reuse a number inside it after the newest rows were deleted), copying the main
# table's row so the text is stemmed once. FTS5 rather than a hand-written index because
# it is SQLite's own and transactional with the rows it indexes.
_RECENT_TABLE = """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts_recent USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )"""
_IN_WINDOW = """{seq} BETWEEN (SELECT CAST(value AS INTEGER) FROM sessionkit_meta WHERE key = 'recent_lo')
               AND (SELECT CAST(value AS INTEGER) FROM sessionkit_meta WHERE key = 'recent_hi')"""
_FTS_NAMES = ("sessionkit_fts_insert", "sessionkit_fts_delete", "sessionkit_fts_update")
_COPY_TO_RECENT = f"""INSERT INTO sessionkit_fts_recent(rowid, body)
           SELECT rowid, body FROM sessionkit_fts WHERE rowid = {{seq}} AND {_IN_WINDOW}"""
_DROP_FROM_RECENT = f"DELETE FROM sessionkit_fts_recent WHERE rowid = {{seq}} AND {_IN_WINDOW}"
_FTS_TRIGGERS_WINDOWED = [
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_insert AFTER INSERT ON sessionkit_messages
       WHEN new.chunks = 0 BEGIN
         INSERT INTO sessionkit_fts(rowid, body) VALUES (new.seq, sessionkit_index_text(new.content));
         {_COPY_TO_RECENT.format(seq="new.seq")};
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_delete AFTER DELETE ON sessionkit_messages BEGIN
         {_DROP_FROM_RECENT.format(seq="old.seq")};
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
       END""",
    f"""CREATE TRIGGER IF NOT EXISTS sessionkit_fts_update AFTER UPDATE OF content ON sessionkit_messages BEGIN
         {_DROP_FROM_RECENT.format(seq="old.seq")};
         DELETE FROM sessionkit_fts WHERE rowid = old.seq;
         INSERT INTO sessionkit_fts(rowid, body)
           SELECT new.seq, sessionkit_index_text(new.content) WHERE new.chunks = 0;
         {_COPY_TO_RECENT.format(seq="new.seq")};
       END""",
]

#: The children of a message, oldest first: those in the children index, and the next
#: row of the session when that one follows it (branch = 0).
_CHILDREN = """SELECT {node} FROM {messages} WHERE session_id = ?1 AND parent_id = ?2 AND branch = 1
    UNION ALL
    SELECT {node} FROM (
        SELECT {node}, branch FROM {messages}
        WHERE session_id = ?1 AND seq > (SELECT seq FROM {messages} WHERE session_id = ?1 AND id = ?2)
        ORDER BY seq LIMIT 1
    ) WHERE parent_id = ?2 AND branch = 0
    ORDER BY seq"""

#: The rows whose ids are in the JSON list ?1 and all their descendants (session ?2).
#: A row's children: those in the children index, and the next row of its session when
#: that one follows it (branch = 0). Both are named (INDEXED BY, the unary +) because
#: without table statistics SQLite may otherwise scan the whole session at each step.
_DESCENDANTS = """WITH RECURSIVE down(seq, id) AS (
    SELECT seq, id FROM {messages} WHERE session_id = ?2 AND id IN (SELECT value FROM json_each(?1))
    UNION
    SELECT m.seq, m.id FROM down JOIN {messages} AS m ON m.seq IN (
        SELECT c.seq FROM {messages} AS c INDEXED BY sessionkit_messages_branches
          WHERE c.session_id = ?2 AND c.parent_id = down.id AND c.branch = 1
        UNION ALL
        SELECT min(x.seq) FROM {messages} AS x INDEXED BY sessionkit_messages_order
          WHERE x.session_id = ?2 AND x.seq > down.seq
      ) AND +m.parent_id = down.id
) SELECT {node} FROM {messages} WHERE seq IN (SELECT seq FROM down) ORDER BY seq"""


def _insert(values: dict[str, str], source: str = "") -> str:
    """``INSERT OR IGNORE`` of a message row with one SQL expression per column (every
    column of ``TABLES["messages"]`` but ``seq`` must have one), as ``VALUES`` or, with a
    ``source`` (``FROM ...``), as a ``SELECT``."""
    cols = [c for c in TABLES["messages"].column_names("sqlite") if c != "seq"]
    exprs = ", ".join(values[c] for c in cols)
    body = f"SELECT {exprs} {source}" if source else f"VALUES ({exprs})"
    return f"INSERT OR IGNORE INTO sessionkit_messages ({', '.join(cols)}) {body}"


# The fast appends' statements; parameters ?1 session, ?2 id, ?3 role, ?4 created_at,
# ?5 bytes, ?6 tokens, ?7 JSON, then the prepared columns (_schema.PREPARED_COLUMNS, in their
# order), then each statement's own, numbered from _OWN (their names below).
_PLAIN = {
    "session_id": "?1",
    "id": "?2",
    "role": "?3",
    "created_at": "?4",
    "bytes": "?5",
    "tokens": "?6",
    "chunks": "0",
    "content": "?7",
    **{name: f"?{8 + i}" for i, name in enumerate(PREPARED_COLUMNS)},
}
_OWN = 8 + len(PREPARED_COLUMNS)
# _APPEND_AFTER's: the session's latest row as this connection last wrote it; _APPEND_UNDER's: the parent's id.
_LAST_SEQ, _LAST_ID, _LAST_DEPTH, _LAST_BYTES, _LAST_TOKENS = (f"?{_OWN + i}" for i in range(5))
_PARENT_ID = f"?{_OWN}"
_APPEND_ROOT = _insert(
    {**_PLAIN, "parent_id": "NULL", "depth": "0", "path_bytes": "?5", "path_tokens": "?6", "branch": "0"}
)
# Under the latest row: it follows its parent (branch 0). The empty session gives a root.
# (max() is one seek in the order index; a LIMIT 1 subquery joined in costs more.)
_APPEND_LATEST = _insert(
    {
        **_PLAIN,
        "parent_id": "p.id",
        "depth": "coalesce(p.depth + 1, 0)",
        "path_bytes": "coalesce(p.path_bytes, 0) + ?5",
        "path_tokens": "coalesce(p.path_tokens, 0) + ?6",
        "branch": "0",
    },
    """FROM (SELECT max(seq) AS seq FROM sessionkit_messages WHERE session_id = ?1) AS last
    LEFT JOIN sessionkit_messages AS p ON p.seq = last.seq""",
)
# Under the latest row as this connection last wrote it (its seq, id, depth, path bytes,
# path tokens): when the session's latest row is no longer exactly that, depth is NULL
# and the row is ignored (the caller falls back to _APPEND_LATEST). Reading the parent
# in a subquery of VALUES spares the temporary copy of the row that INSERT ... SELECT
# makes when it reads the table it writes.
_APPEND_AFTER = _insert(
    {
        **_PLAIN,
        "parent_id": _LAST_ID,
        "depth": f"""CASE WHEN (SELECT seq, id, depth, path_bytes, path_tokens FROM sessionkit_messages
               WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1)
               = ({_LAST_SEQ}, {_LAST_ID}, {_LAST_DEPTH}, {_LAST_BYTES}, {_LAST_TOKENS}) THEN {_LAST_DEPTH} + 1 END""",
        "path_bytes": f"{_LAST_BYTES} + ?5",
        "path_tokens": f"{_LAST_TOKENS} + ?6",
        "branch": "0",
    }
)
# What _APPEND_LATEST wrote, for _tails, in the same statement where SQLite has RETURNING.
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
_TAIL_RETURNED = " RETURNING seq, id, depth, path_bytes, path_tokens"
# Under a given parent (its id): no row when it does not exist.
_APPEND_UNDER = _insert(
    {
        **_PLAIN,
        "parent_id": "p.id",
        "depth": "p.depth + 1",
        "path_bytes": "p.path_bytes + ?5",
        "path_tokens": "p.path_tokens + ?6",
        "branch": "p.seq <> (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1)",
    },
    f"FROM sessionkit_messages AS p WHERE p.session_id = ?1 AND p.id = {_PARENT_ID}",
)
# The general insert: _schema.INSERT_COLUMNS in their order, then the parent's seq (NULL for
# a root): a row follows its parent (branch 0) when the parent is the session's latest row.
_PARENT_SEQ = f"?{len(INSERT_COLUMNS) + 1}"
_INSERT_ROW = _insert(
    {
        **{name: f"?{i + 1}" for i, name in enumerate(INSERT_COLUMNS)},
        "branch": f"{_PARENT_SEQ} IS NOT NULL AND {_PARENT_SEQ} IS NOT"
        " (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1)",
    }
)


def _index_json(content: str) -> str:
    """The indexed form of a stored message: stemmed words of its text parts."""
    return _search.index_text(_msg.message_text(json.loads(content)))


def _upgrade_to_3(engine: SQLiteEngine) -> None:
    """Version 3: the ``branch`` column and the partial children index (see _schema.TABLES).

    The table is rebuilt so ``branch`` sits before ``content``, with the layout of
    version 3 as it was (later versions alter it). Every row keeps its ``seq``, so search
    index rows, continuation rows and payload references stay valid.
    """
    db = engine._db
    built = db.execute("SELECT value FROM sessionkit_meta WHERE key='index_built'").fetchone()
    db.execute("""CREATE TABLE sessionkit_messages_v3 (
        seq INTEGER PRIMARY KEY, session_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT,
        depth INTEGER NOT NULL, role TEXT NOT NULL, created_at TEXT NOT NULL, bytes INTEGER NOT NULL,
        tokens INTEGER NOT NULL, path_bytes INTEGER NOT NULL, path_tokens INTEGER NOT NULL,
        chunks INTEGER NOT NULL DEFAULT 0, branch INTEGER NOT NULL DEFAULT 1, content TEXT NOT NULL)""")
    db.execute(
        """INSERT INTO sessionkit_messages_v3 (seq, session_id, id, parent_id, depth, role, created_at, bytes,
               tokens, path_bytes, path_tokens, chunks, branch, content)
           SELECT seq, session_id, id, parent_id, depth, role, created_at, bytes, tokens, path_bytes,
               path_tokens, chunks,
               parent_id IS NOT NULL AND parent_id IS NOT (
                   SELECT p.id FROM sessionkit_messages p WHERE p.session_id = m.session_id AND p.seq < m.seq
                   ORDER BY p.seq DESC LIMIT 1),
               content
           FROM sessionkit_messages m ORDER BY seq"""
    )
    db.execute("DROP TABLE sessionkit_messages")  # its indexes and search triggers go with it
    db.execute("ALTER TABLE sessionkit_messages_v3 RENAME TO sessionkit_messages")
    messages = TABLES["messages"]
    for index in messages.indexes:
        if "sqlite" in index.only:
            db.execute(engine.index_sql(index, messages))
    if built is not None and built[0] == "1":
        for stmt in _FTS_TRIGGERS:
            db.execute(stmt)


class SQLiteEngine(LocalEngine):
    kind = "sqlite"
    dialect = DIALECTS["sqlite"]
    driver_errors = (sqlite3.Error,)
    capabilities = Capabilities()  # an import writes a statement per message
    STATEMENTS = {"children": _CHILDREN, "descendants": _DESCENDANTS, "insert": _INSERT_ROW}
    EXTRA_SCHEMA = (_FTS_TABLE,)
    BEGIN = "BEGIN IMMEDIATE"  # the write lock now: waits busy_timeout for other processes

    def __init__(
        self,
        path: str,
        *,
        busy_timeout: float = 30.0,
        wal_autocheckpoint: int = 8192,
        search_window: int = DEFAULT_SEARCH_WINDOW,
        **options: Any,
    ) -> None:
        if not isinstance(search_window, int) or isinstance(search_window, bool) or search_window < 1:
            raise ValueError(f"search_window must be a positive int, got {search_window!r}")
        if (
            not isinstance(busy_timeout, (int, float))
            or isinstance(busy_timeout, bool)
            or not 0 <= busy_timeout <= 86_400
            or busy_timeout != busy_timeout
        ):
            raise ValueError(f"busy_timeout must be a number of seconds from 0 to 86400, got {busy_timeout!r}")
        super().__init__(**options)
        #: How many of the newest messages the search window holds at least (_RECENT_TABLE).
        self.search_window = search_window
        self.busy_timeout = float(busy_timeout)
        self.path = None if path == ":memory:" else str(Path(path).resolve())
        # session -> (seq, id, depth, path_bytes, path_tokens) of the last row append_simple
        # wrote there: the next append under the latest row checks it in its statement
        # (_APPEND_AFTER), so a stale entry costs a retry, never a wrong parent.
        self._tails: dict[str, tuple] = {}
        if self.path is not None:
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise ValueError(f"cannot open store {path!r}: folder {str(parent)!r} does not exist")
            if Path(self.path).is_dir():
                raise ValueError(f"cannot open store {path!r}: it is a folder")
        # The name this process opens the file by (see _files): SQLite names its -wal and
        # -shm files after it, so one file reached through two names (a hard link, a bind
        # mount) must be opened through one of them.
        self._held: _files.Claim | None = None
        self._file: str | None = None
        try:
            if self.path is None:
                self._db = self._connect(path)
            else:
                with _files.claim(self.path) as held:
                    self._db = self._connect(held.name)
                self._held, self._file = held, held.name
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open SQLite store {path!r}: {exc}") from exc
        # Search indexing runs inside SQLite triggers (so every writing process keeps the
        # index current without asking whether it exists); they call this function.
        self._db.create_function("sessionkit_index_text", 1, _index_json, deterministic=True)
        self._autocheckpoint = int(wal_autocheckpoint)
        try:
            self._setup(self.durability)
        except BaseException:
            self._db.close()
            _files.release(self._held)
            raise

    def _connect(self, name: str) -> sqlite3.Connection:
        return sqlite3.connect(name, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False)

    # -- setup ----------------------------------------------------------------
    def _setup(self, durability: str) -> None:
        try:
            self._pragmas(durability)
        except StoreCorrupt as exc:
            if "not a database" in str(exc.__cause__):  # a foreign file: a bad argument, not damage
                raise ValueError(f"{self.path} is not a SQLite database: {exc.__cause__}") from exc
            raise
        version = self.schema_version()
        if version is not None and version > SCHEMA_VERSION:
            raise self.too_new(version)
        if version != SCHEMA_VERSION:
            with self.write():
                self.create_or_migrate()  # reads the version again: another process may have done it

    def _pragmas(self, durability: str) -> None:
        db = self._db
        with self.guard():
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            if self.path is not None:
                db.execute("PRAGMA journal_mode = WAL")
                # A checkpoint syncs the WAL and the database file. Checkpointing every
                # 8,192 pages instead of SQLite's 1,000 makes those syncs rarer (appends
                # ~1.5x faster) without changing what a returned commit guarantees; the
                # WAL is truncated back to 64 MiB after each checkpoint.
                db.execute(f"PRAGMA wal_autocheckpoint = {self._autocheckpoint}")
                db.execute(f"PRAGMA journal_size_limit = {64 * 2**20}")
            db.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
            db.execute("PRAGMA foreign_keys = OFF")

    def table_exists(self, name: str) -> bool:
        return self.fetch_one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)) is not None

    def upgrade_to_3(self) -> None:
        _upgrade_to_3(self)

    def translate(self, exc: BaseException) -> BaseException:
        """A driver error as the contract's: by SQLite's result code (its primary part; the
        extended codes refine it), which Python's sqlite3 gives with every error SQLite
        raised. A missing table or column comes as SQLite's generic error code, so only
        those two are told by their message."""
        text = str(exc)
        where = self.path or ":memory:"
        code = getattr(exc, "sqlite_errorcode", None)
        primary = code & 0xFF if isinstance(code, int) else None
        if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
            return StoreLocked(
                f"store {where} is locked: another process held its write lock for more than "
                f"busy_timeout={self.busy_timeout:g} s ({text})"
            )
        if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB) or (
            primary == _SQLITE_ERROR and text.startswith(("no such table", "no such column"))
        ):
            return StoreCorrupt(f"store {where} is damaged: {text}")
        return SessionKitError(f"SQLite store {where}: {text}")

    def close(self) -> None:
        self.close_analysis()
        with self._lock:
            self._closed = True
            self._db.close()
        _files.release(self._held)

    # -- connection model -------------------------------------------------------
    def began(self) -> None:
        self._tails.clear()  # this transaction may move any session's latest row

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[SQLiteEngine]:
        with self._lock:
            if self._depth or self._db.in_transaction:
                yield self
                return
            with self.guard():
                self._db.execute("BEGIN")  # deferred: a read transaction, one state of the file
            try:
                yield self
            finally:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("COMMIT")

    # -- reads ------------------------------------------------------------------
    def size_bytes(self) -> int:
        if self.path is None:
            return 0
        with self._lock:
            size = self.fetch_one("PRAGMA page_count")[0] * self.fetch_one("PRAGMA page_size")[0]
        with contextlib.suppress(OSError):
            size += os.path.getsize(str(self._file) + "-wal")
        return size

    def indexed_count(self) -> int:
        return self.fetch_one("SELECT count(*) FROM sessionkit_fts")[0] if self.index_built() else 0

    def search(
        self, fts_query: str, terms: _search.Query, sid: str | None, limit: int
    ) -> list[tuple[int, str, str, str, float]]:
        # Rank only the newest `search_candidates` matches: FTS5 walks matches in rowid
        # order and stops there (see Store.search). When all of them lie in the search
        # window, they are ranked there, so bm25()'s word counts cover the window, not
        # the store (see _RECENT_TABLE).
        cand = self.search_candidates
        lo, hi = self._sync_window()
        with self._lock:
            first, last = 0, _MAX_SEQ
            if sid is not None:
                # (one subquery for each end: SQLite seeks one end of an index for a lone
                # min() or max(), but scans the whole session for both in one SELECT)
                first, last, low, high = self.fetch_one(
                    "SELECT (SELECT min(seq) FROM sessionkit_messages WHERE session_id = ?1),"
                    " (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1),"
                    " (SELECT min(session_id) FROM sessionkit_messages),"
                    " (SELECT max(session_id) FROM sessionkit_messages)",
                    (sid,),
                )
                if first is None:
                    return []
                if low == high:
                    # The store holds this session alone: every match is the session's,
                    # and checking each one in the session index would only cost time.
                    sid = None
            # Rows above hi were written after this search began (it synced the window).
            if lo is not None and hi is not None and lo <= last and first <= hi:
                rows, n = self._rank(
                    "sessionkit_fts_recent", fts_query, sid, max(first, lo), min(last, hi), cand, limit
                )
                if first >= lo or n >= cand:
                    return rows
            return self._rank("sessionkit_fts", fts_query, sid, first, last, cand, limit)[0]

    def _rank(
        self, table: str, fts_query: str, sid: str | None, first: int, last: int, cand: int, limit: int
    ) -> tuple[list[tuple[int, str, str, str, float]], int]:
        """``(rows, n)``: the best ``limit`` of the newest ``cand`` matches in ``table``
        with seq in [first, last], as ``(seq, session_id, id, role, score)``, and how
        many matches were ranked (0 when there is no hit)."""
        # A session's matches: the full-text index walks its matches newest first and
        # each is checked in the compact (session_id, seq) index, not in the table, whose
        # rows hold the content.
        where, params = "", [fts_query, first, last]
        if sid is not None:
            where = (
                f"AND EXISTS (SELECT 1 FROM sessionkit_messages s INDEXED BY sessionkit_messages_order"
                f" WHERE s.session_id = ? AND s.seq = {table}.rowid)"
            )
            params.append(sid)
        params += [cand, limit]
        # The candidates are ranked and counted in one pass (the window function), and
        # only the best `limit` are joined to their messages.
        rows = self.fetch(
            f"""SELECT t.seq, m.session_id, m.id, m.role, t.score, t.n FROM (
                    SELECT seq, score, count(*) OVER () AS n FROM (
                        SELECT {table}.rowid AS seq, -bm25({table}) AS score FROM {table}
                        WHERE {table} MATCH ? AND {table}.rowid BETWEEN ? AND ? {where}
                        ORDER BY {table}.rowid DESC LIMIT ?
                    ) ORDER BY score DESC, seq DESC LIMIT ?
                ) AS t JOIN sessionkit_messages m ON m.seq = t.seq
                ORDER BY t.score DESC, t.seq DESC""",
            params,
        )
        return [r[:5] for r in rows], (rows[0][5] if rows else 0)

    # -- the search window --------------------------------------------------------------
    def _sync_window(self) -> tuple[int | None, int | None]:
        """Bring the search window up to the newest row (see _RECENT_TABLE): create it
        once the store outgrows it, copy the rows added since, drop those that fell
        behind. A read when there is nothing to do; otherwise one write transaction.
        Returns the window's range as _window does."""
        if not self.index_built():
            return None, None
        with self._lock:
            top, lo, hi = self._window_work()
            if top is None:
                return lo, hi
            with self.write():
                top, lo, hi = self._window_work()  # another process may have done it meanwhile
                if top is None:
                    return lo, hi
                new_lo = top - self.search_window + 1
                if lo is None:
                    self.execute(_RECENT_TABLE)
                    self._install_triggers(_FTS_TRIGGERS_WINDOWED)
                elif hi < new_lo:  # type: ignore[operator]  # hi is set with lo; nothing in it would stay: start afresh
                    self.execute("DROP TABLE sessionkit_fts_recent")
                    self.execute(_RECENT_TABLE)
                    lo = None
                if lo is None:
                    lo, hi = new_lo, new_lo - 1
                self.execute(
                    "INSERT INTO sessionkit_fts_recent(rowid, body) "
                    "SELECT rowid, body FROM sessionkit_fts WHERE rowid > ? AND rowid <= ?",
                    (hi, top),
                )
                if new_lo > lo:
                    self.execute("DELETE FROM sessionkit_fts_recent WHERE rowid < ?", (new_lo,))
                    lo = new_lo
                self.execute(self.sql["meta_put"], ("recent_lo", str(lo)))
                self.execute(self.sql["meta_put"], ("recent_hi", str(top)))
                return lo, top

    def _window_work(self) -> tuple[int | None, int | None, int | None]:
        """``(top, lo, hi)``: the newest seq and the window's range, with ``top`` None
        unless the window must be created or has rows to catch up on."""
        top = self.fetch_one("SELECT max(seq) FROM sessionkit_messages")[0]
        lo, hi = self._window()
        w = self.search_window
        due = top is not None and (top >= w + w // 4 if lo is None else top > hi)
        return (top if due else None), lo, hi

    def _window(self) -> tuple[int | None, int | None]:
        """``(recent_lo, recent_hi)``: the seq range the window holds, or Nones."""
        rows = dict(self.fetch("SELECT key, value FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')"))
        if "recent_lo" not in rows:
            return None, None
        return int(rows["recent_lo"]), int(rows["recent_hi"])

    def _install_triggers(self, triggers: Iterable[str]) -> None:
        for name in _FTS_NAMES:
            self.execute(f"DROP TRIGGER IF EXISTS {name}")
        for stmt in triggers:
            self.execute(stmt)

    # -- the search index (triggers keep it; see _FTS_TRIGGERS) ------------------------
    def w_index_on(self) -> bool:
        return False  # triggers keep the index

    def _flag_in_tx(self) -> bool:
        return self.meta("index_built") == "1"

    def begin_index_build(self) -> None:
        self.execute("DELETE FROM sessionkit_fts")
        self.execute("DROP TABLE IF EXISTS sessionkit_fts_recent")
        self.execute("DELETE FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')")

    def index_batch(self, rows: list[tuple[int, str, str]]) -> None:
        self.execute_many(
            "INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)",
            [(seq, _search.index_text(text)) for seq, _, text in rows],
        )

    def finish_index_build(self) -> None:
        self._install_triggers(_FTS_TRIGGERS)  # (a window's triggers, if any, went with its table)

    def _index_long(self, seq: int, prep: _msg.Prepared) -> None:
        """The trigger skips rows whose JSON continues elsewhere: index them here."""
        self.execute("INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)", (seq, _search.index_text(prep.text)))
        if self._window()[0] is not None:
            self.execute(_COPY_TO_RECENT.format(seq="?1"), (seq,))

    def index_new(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if nchunks and self._flag_in_tx():
            self._index_long(seq, prep)

    def index_changed(self, sid: str, seq: int, prep: _msg.Prepared, nchunks: int, index: bool) -> None:
        if nchunks and self._flag_in_tx():  # the trigger dropped the old text
            self.execute("DELETE FROM sessionkit_fts WHERE rowid = ?", (seq,))
            self._index_long(seq, prep)

    # -- writes -------------------------------------------------------------------
    def insert_row(
        self, sid: str, prep: _msg.Prepared, node: Node, parent: Node | None, head: str, nchunks: int, index: bool
    ) -> int | None:
        values = self.message_values(sid, node, head, nchunks, prep) + (None if parent is None else parent.seq,)
        with self.guard(), self.connection() as db:
            cur = db.execute(self.sql["insert"], values)  # (no RETURNING: SQLite before 3.35 lacks it)
            return cur.lastrowid if cur.rowcount == 1 else None

    def w_descendants(self, sid: str, mids: Iterable[str]) -> list[Node]:
        return [Node(*r) for r in self.fetch(self.sql["descendants"], (json.dumps(list(mids)), sid))]

    def listed(self, values: Iterable) -> str:
        return json.dumps(list(values))

    def append_simple(
        self, sid: str, prep: _msg.Prepared, parent_id: str | _Latest | None, created_at: str
    ) -> Appended:
        if prep.blobs or len(prep.stored_json) > self._chunk:
            return Appended.UNSUPPORTED
        # One statement (its own transaction): the parent's place is read and the row
        # written atomically, so this needs no BEGIN/COMMIT round trips.
        params = (
            sid,
            prep.id,
            prep.role,
            created_at,
            prep.bytes,
            prep.tokens,
            prep.stored_json,
            *self.prepared_values(prep),
        )
        with self._lock, self.guard():
            db = self._db
            if parent_id is None:
                inserted = db.execute(_APPEND_ROOT, params).rowcount == 1
            elif isinstance(parent_id, str):
                inserted = db.execute(_APPEND_UNDER, params + (parent_id,)).rowcount == 1
            else:
                inserted = self._append_latest(sid, prep, params)
            if inserted:
                if parent_id is None or isinstance(parent_id, str):
                    self._tails.pop(sid, None)
                return Appended.INSERTED
        if self.node(sid, prep.id) is not None:
            return Appended.EXISTS
        return Appended.NO_PARENT

    def _append_latest(self, sid: str, prep: _msg.Prepared, params: tuple) -> bool:
        """append_simple under the session's latest row; keeps ``_tails``."""
        db = self._db
        tail = self._tails.get(sid)
        if tail is not None:
            cur = db.execute(_APPEND_AFTER, params + tail)
            if cur.rowcount == 1:
                self._tails[sid] = (cur.lastrowid, prep.id, tail[2] + 1, tail[3] + prep.bytes, tail[4] + prep.tokens)
                return True
        if _RETURNING:
            rows = db.execute(_APPEND_LATEST + _TAIL_RETURNED, params).fetchall()  # all: the statement ends
            row = rows[0] if rows else None
        else:
            cur = db.execute(_APPEND_LATEST, params)
            row = (
                cur.rowcount == 1
                and db.execute(
                    "SELECT seq, id, depth, path_bytes, path_tokens FROM sessionkit_messages WHERE seq = ?",
                    (cur.lastrowid,),
                ).fetchone()
            )
        if not row:
            return False
        if len(self._tails) >= 4096:  # a bound: the sessions written most recently gain
            self._tails.clear()
        self._tails[sid] = tuple(row)
        return True
