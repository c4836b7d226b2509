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
  index and the order index. The same column makes a path cheap to read: the starts
  index holds the rows that branch and the roots, so the rows between two of its
  entries are one run of a path, read in a range of the order index.
* **Fast append.** A plain append is one statement; under the latest leaf it inserts
  with ``VALUES`` and checks, in the same statement, that the session's latest row is
  still the one this connection last wrote there (see _APPEND_AFTER).
* **Search.** FTS5, built on the first search and kept by triggers after, with a
  second index of the newest messages on a large store (``search.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .... import messages as _msg
from ....errors import SessionKitError, StoreCorrupt, StoreLocked
from ... import _files
from ..._schema import DIALECTS, INSERT_COLUMNS, PREPARED_COLUMNS, SCHEMA_VERSION, TABLES
from ..._sql import LocalEngine
from ..._values import Appended, Capabilities, Node, _Latest

if TYPE_CHECKING:
    from .analysis import SQLiteSource
from .search import DEFAULT_SEARCH_WINDOW, FTS_TABLE, FTS_TRIGGERS, FTS5Index, index_json, stem_text

__all__ = ["SQLiteEngine", "SCHEMA_VERSION", "DEFAULT_SEARCH_WINDOW"]

# SQLite's primary result codes (https://sqlite.org/rescode.html) that translate() maps.
_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED, _SQLITE_CORRUPT, _SQLITE_NOTADB = 1, 5, 6, 11, 26

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


#: The first row of the run of a path that ends at seq ?2: going down the session's rows
#: from there, each follows the one before it (branch = 0) until a row whose parent is
#: elsewhere (branch = 1) or a root: the newest entry of the starts index at or below ?2.
_RUN_START = """SELECT seq, depth, parent_id FROM sessionkit_messages INDEXED BY sessionkit_messages_starts
    WHERE session_id = ?1 AND seq <= ?2 AND (branch = 1 OR parent_id IS NULL) ORDER BY seq DESC LIMIT 1"""


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
        for stmt in FTS_TRIGGERS:
            db.execute(stmt)


class SQLiteEngine(LocalEngine):
    kind = "sqlite"
    dialect = DIALECTS["sqlite"]
    driver_errors = (sqlite3.Error,)
    capabilities = Capabilities()  # an import writes a statement per message
    STATEMENTS = {"children": _CHILDREN, "descendants": _DESCENDANTS, "insert": _INSERT_ROW}
    EXTRA_SCHEMA = (FTS_TABLE,)
    INDEX = FTS5Index
    BEGIN = "BEGIN IMMEDIATE"  # the write lock now: waits busy_timeout for other processes
    TEXT_FROM_JSON = True  # (the analysis text read by SQLite's JSON functions: Dialect.message_text)

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
        #: How many of the newest messages the search window holds at least (see search.py).
        self.search_window = search_window
        self.busy_timeout = float(busy_timeout)
        self.path = None if path == ":memory:" else str(Path(path).resolve())
        # session -> (seq, id, depth, path_bytes, path_tokens) of the last row append_fast
        # wrote there: the next append under the latest row checks it in its statement
        # (_APPEND_AFTER), so a stale entry costs a retry, never a wrong parent.
        self._tails: dict[str, tuple[Any, ...]] = {}
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
        self._db.create_function("sessionkit_index_text", 1, index_json, deterministic=True)
        # (and the index build, on a message's text: FTS5Index.fill)
        self._db.create_function("sessionkit_stem_text", 1, stem_text, deterministic=True)
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

    def analysis_source(self) -> SQLiteSource:
        """The analysis cache of a file is a file beside it, read through the ADBC driver
        where it is installed (see ``analysis.py``)."""
        from .analysis import SQLiteSource

        return SQLiteSource(self)

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

    def path_runs(self, sid: str, start: Node) -> list[tuple[int, int, int, int]] | None:
        # The branch column tells where a run of the path begins: a row that follows its
        # parent is the next row of its session after it.
        self.before_read(sid)
        runs: list[tuple[int, int, int, int]] = []
        top: Node | None = start
        while top is not None:
            row = self.fetch_one(_RUN_START, (sid, top.seq))
            if row is None or row[1] > top.depth:
                return None  # not the shape a run has: the engine reads row by row
            first, depth, parent = row
            runs.append((first, top.seq, depth, top.depth - depth + 1))
            if parent is None:
                break
            top = self.node(sid, parent)  # None: deleted meanwhile, the path ends here
        runs.reverse()
        return runs

    def listed(self, values: Iterable[Any]) -> str:
        return json.dumps(list(values))

    def append_fast(
        self, sid: str, preps: list[_msg.Prepared], parent_id: str | _Latest | None, stamps: list[str]
    ) -> Appended:
        """One plain message (no payloads, no continuation rows) in one statement; a
        chain takes the batch insert."""
        if len(preps) != 1:
            return Appended.UNSUPPORTED
        prep, created_at = preps[0], stamps[0]
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
            self.row_json(prep, created_at),
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

    def _append_latest(self, sid: str, prep: _msg.Prepared, params: tuple[Any, ...]) -> bool:
        """append_fast under the session's latest row; keeps ``_tails``."""
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
