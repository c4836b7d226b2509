"""SQLite engine: stdlib ``sqlite3``, WAL, FTS5.

One connection per store, shared by threads under a re-entrant lock; writes run
in ``BEGIN IMMEDIATE`` transactions so several processes can append to one file
(SQLite's busy timeout queues them). Each message is one row keyed by a
store-wide ``seq`` (the rowid: a new row always gets a number above every row
present, which is all write order needs; ``AUTOINCREMENT`` would cost an extra
write per append), with ``UNIQUE(session_id, id)`` giving idempotent inserts. Every row also keeps
its depth and the running byte and token totals of its path, so path length,
recent windows and compaction thresholds never walk the whole conversation.

Each index a row enters is one more page written per commit, which is most of an
append's cost. The latest leaf comes from the index on ``(session_id, seq)``; the
children index holds branches only: a row whose parent was its session's latest row
is the next row after it in that order (``branch`` = 0), which is how conversations
grow, so such an append writes the table, the key index and the order index. A plain
append is one statement; under the latest leaf it inserts with ``VALUES`` and checks, in
the same statement, that the session's latest row is still the one this connection last
wrote there (see _APPEND_AFTER).

Search uses FTS5, built on the first search and kept by triggers after. A store larger
than ``search_window`` messages (131,072 by default; an ``open_store`` option) by a
quarter also keeps a second FTS5 index of its newest messages, the search window,
brought up to date by each search: a search whose candidates all lie there is ranked
with the window's word statistics, so its cost stays bounded however large the store
grows (see _RECENT_TABLE).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from pathlib import Path

from .. import messages as _msg
from ..errors import SchemaVersionError, SessionKitError, StoreLocked
from . import search as _search
from ._core import Capabilities, Compaction, Engine, Node, RunRecord, SessionInfo

SCHEMA_VERSION = 4

#: Stored JSON longer than this (characters) continues in sessionkit_chunks rows.
DEFAULT_CHUNK_CHARS = 1 << 20

#: Messages in the search window (see _RECENT_TABLE): a store larger than this by a
#: quarter keeps a second full-text index of its newest messages.
DEFAULT_SEARCH_WINDOW = 1 << 17

_MAX_SEQ = (1 << 63) - 1

_NODE = "seq, id, parent_id, depth, bytes, tokens, path_bytes, path_tokens, created_at, role"

# ``branch`` is 0 when the row's parent was its session's latest row as it was written
# (or it has no parent): such a row is the next one after its parent in the session's
# ``seq`` order, where the order index finds it, so it needs no entry in the children
# index. Most rows of a conversation are like that, and each index a row enters is one
# more page written per commit. The default (1) keeps a row findable through the index
# whoever writes it. It comes before ``content`` so reading it never reads a long row's
# overflow pages.
_MESSAGES_TABLE = """CREATE TABLE IF NOT EXISTS {name} (
        seq INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        id TEXT NOT NULL,
        parent_id TEXT,
        depth INTEGER NOT NULL,
        role TEXT NOT NULL,
        created_at TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        tokens INTEGER NOT NULL,
        path_bytes INTEGER NOT NULL,
        path_tokens INTEGER NOT NULL,
        chunks INTEGER NOT NULL DEFAULT 0,
        branch INTEGER NOT NULL DEFAULT 1,
        content TEXT NOT NULL
    )"""

_MESSAGES_INDEXES = [
    "CREATE UNIQUE INDEX IF NOT EXISTS sessionkit_messages_key ON sessionkit_messages(session_id, id)",
    "CREATE INDEX IF NOT EXISTS sessionkit_messages_order ON sessionkit_messages(session_id, seq)",
    "CREATE INDEX IF NOT EXISTS sessionkit_messages_branches ON sessionkit_messages(session_id, parent_id) "
    "WHERE branch = 1",
]

_RECORDS_TABLE = """CREATE TABLE IF NOT EXISTS sessionkit_records (
        session_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        n INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, kind, n)
    ) WITHOUT ROWID"""

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS sessionkit_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    _MESSAGES_TABLE.format(name="sessionkit_messages"),
    *_MESSAGES_INDEXES,
    """CREATE TABLE IF NOT EXISTS sessionkit_chunks (
        seq INTEGER NOT NULL,
        n INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (seq, n)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blobs (
        sha256 TEXT PRIMARY KEY,
        size INTEGER NOT NULL,
        data BLOB NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blob_refs (
        seq INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        PRIMARY KEY (seq, sha256)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS sessionkit_blob_refs_sha ON sessionkit_blob_refs(sha256)",
    """CREATE TABLE IF NOT EXISTS sessionkit_compactions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        id TEXT NOT NULL,
        from_id TEXT NOT NULL,
        to_id TEXT NOT NULL,
        summary TEXT NOT NULL,
        created_at TEXT NOT NULL,
        tokens_before INTEGER NOT NULL,
        tokens_after INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS sessionkit_compactions_session ON sessionkit_compactions(session_id)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS sessionkit_fts USING fts5(
        body, tokenize = 'unicode61 remove_diacritics 0'
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_runs (
        run_id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        input TEXT,
        error TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        usage TEXT,
        n INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS sessionkit_runs_session ON sessionkit_runs(session_id, n)",
    """CREATE TABLE IF NOT EXISTS sessionkit_events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        run_id TEXT,
        data TEXT NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID""",
    _RECORDS_TABLE,
]

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


def _upgrade_to_3(db: sqlite3.Connection) -> None:
    """Version 3: the ``branch`` column and the partial children index (see _MESSAGES_TABLE).

    The table is rebuilt so ``branch`` sits before ``content``. Every row keeps its
    ``seq``, so search index rows, continuation rows and payload references stay valid.
    """
    built = db.execute("SELECT value FROM sessionkit_meta WHERE key='index_built'").fetchone()
    db.execute(_MESSAGES_TABLE.format(name="sessionkit_messages_v3"))
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
    for stmt in _MESSAGES_INDEXES:
        db.execute(stmt)
    if built is not None and built[0] == "1":
        for stmt in _FTS_TRIGGERS:
            db.execute(stmt)


# Upgrades from an older schema version to the next one: {from_version: [statements or
# functions of the connection]}, run in the transaction that opens the store.
_MIGRATIONS: dict[int, list] = {
    1: [_RECORDS_TABLE],  # 2: internal records kept beside a session (the HTTP server's tables)
    2: [_upgrade_to_3],  # 3: rows that follow their parent stay out of the children index
    3: [],  # 4: the search window (_RECENT_TABLE), created when a store outgrows it
}

#: The children of :mid in session :sid, oldest first.
_CHILDREN = f"""SELECT {_NODE} FROM sessionkit_messages WHERE session_id = :sid AND parent_id = :mid AND branch = 1
    UNION ALL
    SELECT {_NODE} FROM (
        SELECT {_NODE}, branch FROM sessionkit_messages
        WHERE session_id = :sid AND seq > (SELECT seq FROM sessionkit_messages WHERE session_id = :sid AND id = :mid)
        ORDER BY seq LIMIT 1
    ) WHERE parent_id = :mid AND branch = 0
    ORDER BY seq"""

#: ``down(seq, id)``: the rows whose ids are in the JSON list :ids and all their descendants.
#: A row's children: those in the children index, and the next row of its session when
#: that one follows it (branch = 0, see _MESSAGES_TABLE). Both are named (INDEXED BY,
#: the unary +) because without table statistics SQLite may otherwise scan the whole
#: session at each step.
_DESCENDANTS = """WITH RECURSIVE down(seq, id) AS (
    SELECT seq, id FROM sessionkit_messages
      WHERE session_id = :sid AND id IN (SELECT value FROM json_each(:ids))
    UNION
    SELECT m.seq, m.id FROM down JOIN sessionkit_messages AS m ON m.seq IN (
        SELECT c.seq FROM sessionkit_messages AS c INDEXED BY sessionkit_messages_branches
          WHERE c.session_id = :sid AND c.parent_id = down.id AND c.branch = 1
        UNION ALL
        SELECT min(x.seq) FROM sessionkit_messages AS x INDEXED BY sessionkit_messages_order
          WHERE x.session_id = :sid AND x.seq > down.seq
      ) AND +m.parent_id = down.id
)"""

_INSERT = """INSERT OR IGNORE INTO sessionkit_messages (session_id, id, parent_id, depth, role, created_at, bytes,
    tokens, path_bytes, path_tokens, chunks, branch, content) """

# append_simple's statements; parameters ?1 session, ?2 id, ?3 role, ?4 created_at,
# ?5 bytes, ?6 tokens, ?7 JSON, then each statement's own.
_APPEND_ROOT = _INSERT + "VALUES (?1, ?2, NULL, 0, ?3, ?4, ?5, ?6, ?5, ?6, 0, 0, ?7)"
# Under the latest row: it follows its parent (branch 0). The empty session gives a root.
# (max() is one seek in the order index; a LIMIT 1 subquery joined in costs more.)
_APPEND_LATEST = _INSERT + """SELECT ?1, ?2, p.id, coalesce(p.depth + 1, 0), ?3, ?4, ?5, ?6,
    coalesce(p.path_bytes, 0) + ?5, coalesce(p.path_tokens, 0) + ?6, 0, 0, ?7
    FROM (SELECT max(seq) AS seq FROM sessionkit_messages WHERE session_id = ?1) AS last
    LEFT JOIN sessionkit_messages AS p ON p.seq = last.seq"""
# Under the latest row as this connection last wrote it, (?8 seq, ?9 id, ?10 depth,
# ?11 path bytes, ?12 path tokens): when the session's latest row is no longer exactly
# that, depth is NULL and the row is ignored (the caller falls back to _APPEND_LATEST).
# Reading the parent in a subquery of VALUES spares the temporary copy of the row
# that INSERT ... SELECT makes when it reads the table it writes.
_APPEND_AFTER = _INSERT + """VALUES (?1, ?2, ?9,
    CASE WHEN (SELECT seq, id, depth, path_bytes, path_tokens FROM sessionkit_messages
               WHERE session_id = ?1 ORDER BY seq DESC LIMIT 1) = (?8, ?9, ?10, ?11, ?12) THEN ?10 + 1 END,
    ?3, ?4, ?5, ?6, ?11 + ?5, ?12 + ?6, 0, 0, ?7)"""
# What _APPEND_LATEST wrote, for _tails, in the same statement where SQLite has RETURNING.
_RETURNING = sqlite3.sqlite_version_info >= (3, 35)
_TAIL_RETURNED = " RETURNING seq, id, depth, path_bytes, path_tokens"
# Under a given parent (?8 its id): no row when it does not exist.
_APPEND_UNDER = _INSERT + """SELECT ?1, ?2, p.id, p.depth + 1, ?3, ?4, ?5, ?6, p.path_bytes + ?5,
    p.path_tokens + ?6, 0, p.seq <> (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1), ?7
    FROM sessionkit_messages AS p WHERE p.session_id = ?1 AND p.id = ?8"""


def _index_json(content: str) -> str:
    """The indexed form of a stored message: stemmed words of its text parts."""
    return _search.index_text(_msg.message_text(json.loads(content)))


class SQLiteEngine(Engine):
    kind = "sqlite"
    capabilities = Capabilities()

    def __init__(self, path: str, *, durability: str = "normal", chunk_chars: int = DEFAULT_CHUNK_CHARS,
                 busy_timeout: float = 30.0, wal_autocheckpoint: int = 8192,
                 search_window: int = DEFAULT_SEARCH_WINDOW):
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
        if not isinstance(search_window, int) or isinstance(search_window, bool) or search_window < 1:
            raise ValueError(f"search_window must be a positive int, got {search_window!r}")
        #: How many of the newest messages the search window holds at least (_RECENT_TABLE).
        self.search_window = search_window
        self.path = None if path == ":memory:" else str(Path(path).resolve())
        self._chunk = int(chunk_chars)
        if self._chunk < 1:
            raise ValueError("chunk_chars must be positive")
        self._lock = threading.RLock()
        self._depth = 0
        self._index_on = False
        # session -> (seq, id, depth, path_bytes, path_tokens) of the last row append_simple
        # wrote there: the next append under the latest row checks it in its statement
        # (_APPEND_AFTER), so a stale entry costs a retry, never a wrong parent.
        self._tails: dict[str, tuple] = {}
        if self.path is not None:
            parent = Path(self.path).parent
            if not parent.is_dir():
                raise ValueError(f"cannot open store {path!r}: folder {str(parent)!r} does not exist")
        try:
            self._db = sqlite3.connect(
                path if self.path is None else self.path,
                timeout=busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise ValueError(f"cannot open SQLite store {path!r}: {exc}") from exc
        # Search indexing runs inside SQLite triggers (so every writing process keeps the
        # index current without asking whether it exists); they call this function.
        self._db.create_function("sessionkit_index_text", 1, _index_json, deterministic=True)
        self._autocheckpoint = int(wal_autocheckpoint)
        try:
            self._setup(durability)
        except BaseException:
            self._db.close()
            raise

    # -- setup ----------------------------------------------------------------
    def _setup(self, durability: str) -> None:
        db = self._db
        try:
            db.execute("PRAGMA busy_timeout = 30000")
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
            version = self._read_version()
            if version is not None and version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"store {self.path or ':memory:'} has schema version {version}; this sessionkit "
                    f"reads up to {SCHEMA_VERSION}: upgrade sessionkit"
                )
            if version != SCHEMA_VERSION:
                with self.write():
                    version = self._read_version()  # another process may have created it meanwhile
                    if version is None:
                        for stmt in _SCHEMA:
                            db.execute(stmt)
                        db.execute("INSERT INTO sessionkit_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                        db.execute("INSERT INTO sessionkit_meta VALUES ('index_built', '0')")
                    elif version > SCHEMA_VERSION:
                        raise SchemaVersionError(f"store has schema version {version}; upgrade sessionkit")
                    else:
                        for v in range(version, SCHEMA_VERSION):
                            for stmt in _MIGRATIONS.get(v, []):
                                if isinstance(stmt, str):
                                    db.execute(stmt)
                                else:
                                    stmt(db)
                        db.execute("UPDATE sessionkit_meta SET value = ? WHERE key = 'schema_version'",
                                   (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc) or "malformed" in str(exc):
                raise ValueError(f"{self.path} is not a SQLite database: {exc}") from exc
            if "locked" in str(exc):
                raise StoreLocked(f"store {self.path} is locked by another process: {exc}") from exc
            raise SessionKitError(f"cannot open SQLite store {self.path}: {exc}") from exc

    def _read_version(self) -> int | None:
        row = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='sessionkit_meta'"
        ).fetchone()
        if row is None:
            return None
        row = self._db.execute("SELECT value FROM sessionkit_meta WHERE key='schema_version'").fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def write(self):
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            self._db.execute("BEGIN IMMEDIATE")
            self._depth = 1
            self._tails.clear()  # this transaction may move any session's latest row
            try:
                yield self
            except BaseException:
                self._depth = 0
                self._db.execute("ROLLBACK")
                raise
            else:
                self._depth = 0
                self._db.execute("COMMIT")

    def _q(self, sql: str, params=()) -> list:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def _one(self, sql: str, params=()):
        with self._lock:
            return self._db.execute(sql, params).fetchone()

    # -- reads ------------------------------------------------------------------
    def node(self, sid, mid):
        row = self._one(f"SELECT {_NODE} FROM sessionkit_messages WHERE session_id=? AND id=?", (sid, mid))
        return None if row is None else Node(*row)

    def latest(self, sid):
        row = self._one(
            f"SELECT {_NODE} FROM sessionkit_messages WHERE session_id=? ORDER BY seq DESC LIMIT 1", (sid,)
        )
        return None if row is None else Node(*row)

    def children(self, sid, mid):
        return [Node(*r) for r in self._q(_CHILDREN, {"sid": sid, "mid": mid})]

    def nodes(self, sid):
        rows = self._q(f"SELECT {_NODE} FROM sessionkit_messages WHERE session_id=? ORDER BY seq", (sid,))
        return [Node(*r) for r in rows]

    def ancestors(self, sid, seq, limit):
        cols = "seq, id, parent_id, depth, bytes, tokens, path_bytes, path_tokens, created_at, role"
        mcols = ", ".join("m." + c.strip() for c in cols.split(","))
        rows = self._q(
            f"""WITH RECURSIVE up({cols}) AS (
                    SELECT {cols} FROM sessionkit_messages WHERE seq = ?
                    UNION ALL
                    SELECT {mcols} FROM up JOIN sessionkit_messages m
                      ON m.session_id = ? AND m.id = up.parent_id
                    LIMIT ?
                ) SELECT {cols} FROM up""",
            (seq, sid, -1 if limit is None else limit),
        )
        return [Node(*r) for r in rows]

    def window(self, sid, start_id, limit):
        cols = "seq, id, parent_id, depth, bytes, tokens, path_bytes, path_tokens, created_at, role, chunks, content"
        mcols = ", ".join("m." + c.strip() for c in cols.split(","))
        if start_id is None:
            seed = (f"SELECT * FROM (SELECT {cols} FROM sessionkit_messages WHERE session_id = :sid "
                    "ORDER BY seq DESC LIMIT 1)")
        else:
            seed = f"SELECT {cols} FROM sessionkit_messages WHERE session_id = :sid AND id = :start"
        rows = self._q(
            f"""WITH RECURSIVE up({cols}) AS (
                    {seed}
                    UNION ALL
                    SELECT {mcols} FROM up JOIN sessionkit_messages m
                      ON m.session_id = :sid AND m.id = up.parent_id
                    LIMIT :limit
                ) SELECT {cols} FROM up""",
            {"sid": sid, "start": start_id, "limit": limit},
        )
        out = []
        for r in rows:
            content = r[11]
            if r[10]:
                content += "".join(x[0] for x in self._q(
                    "SELECT data FROM sessionkit_chunks WHERE seq=? ORDER BY n", (r[0],)))
            out.append((Node(*r[:10]), content))
        return out

    def path_skeleton(self, sid, seq):
        return self._q(
            """WITH RECURSIVE up(seq, id, parent_id, tokens) AS (
                   SELECT seq, id, parent_id, tokens FROM sessionkit_messages WHERE seq = ?
                   UNION ALL
                   SELECT m.seq, m.id, m.parent_id, m.tokens FROM up JOIN sessionkit_messages m
                     ON m.session_id = ? AND m.id = up.parent_id
               ) SELECT seq, id, tokens FROM up""",
            (seq, sid),
        )

    def contents(self, seqs):
        if not seqs:
            return []
        marks = ",".join("?" * len(seqs))
        rows = self._q(f"SELECT seq, content, chunks FROM sessionkit_messages WHERE seq IN ({marks})", seqs)
        found = {}
        for seq, content, chunks in rows:
            if chunks:
                rest = self._q("SELECT data FROM sessionkit_chunks WHERE seq=? ORDER BY n", (seq,))
                content = content + "".join(r[0] for r in rest)
            found[seq] = content
        return [found[s] for s in seqs]

    def blob(self, sha):
        row = self._one("SELECT data FROM sessionkit_blobs WHERE sha256=?", (sha,))
        if row is None:
            raise SessionKitError(f"payload {sha} is missing from the store")
        return bytes(row[0])

    def count(self, sid):
        return self._one("SELECT count(*) FROM sessionkit_messages WHERE session_id=?", (sid,))[0]

    def list_sessions(self):
        rows = self._q(
            """SELECT session_id, count(*), min(created_at), max(created_at) FROM sessionkit_messages
               GROUP BY session_id ORDER BY max(seq) DESC"""
        )
        return [SessionInfo(*r) for r in rows]

    def session_exists(self, sid):
        for table in ("sessionkit_messages", "sessionkit_runs", "sessionkit_events", "sessionkit_compactions",
                      "sessionkit_records"):
            if self._one(f"SELECT 1 FROM {table} WHERE session_id=? LIMIT 1", (sid,)):
                return True
        return False

    def compactions(self, sid):
        rows = self._q(
            """SELECT seq, id, from_id, to_id, summary, created_at, tokens_before, tokens_after
               FROM sessionkit_compactions WHERE session_id=? ORDER BY seq""",
            (sid,),
        )
        return [(r[0], Compaction(*r[1:])) for r in rows]

    def stats(self):
        with self._lock:
            one = lambda sql: self._db.execute(sql).fetchone()  # noqa: E731
            sessions, messages = one("SELECT count(DISTINCT session_id), count(*) FROM sessionkit_messages")
            blobs, blob_bytes = one("SELECT count(*), coalesce(sum(size), 0) FROM sessionkit_blobs")
            size = 0
            if self.path is not None:
                size = one("PRAGMA page_count")[0] * one("PRAGMA page_size")[0]
                wal = self.path + "-wal"
                if os.path.exists(wal):
                    size += os.path.getsize(wal)
            return {
                "engine": self.kind,
                "schema_version": SCHEMA_VERSION,
                "sessions": sessions,
                "messages": messages,
                "compactions": one("SELECT count(*) FROM sessionkit_compactions")[0],
                "blobs": blobs,
                "blob_bytes": blob_bytes,
                "indexed_messages": one("SELECT count(*) FROM sessionkit_fts")[0] if self.index_built() else 0,
                "runs": one("SELECT count(*) FROM sessionkit_runs")[0],
                "events": one("SELECT count(*) FROM sessionkit_events")[0],
                "bytes": size,
            }

    def index_built(self):
        if not self._index_on:
            row = self._one("SELECT value FROM sessionkit_meta WHERE key='index_built'")
            self._index_on = row is not None and row[0] == "1"
        return self._index_on

    def search(self, fts_query, terms, sid, limit):
        # Rank only the newest `search_candidates` matches: FTS5 walks matches in rowid
        # order and stops there (see Store.search). When all of them lie in the search
        # window, they are ranked there, so bm25()'s word counts cover the window, not
        # the store (see _RECENT_TABLE).
        cand = self.search_candidates
        lo, hi = self._sync_window()
        with self._lock:
            first, last = 0, _MAX_SEQ
            if sid is not None:
                first, last = self._db.execute(
                    "SELECT min(seq), max(seq) FROM sessionkit_messages WHERE session_id = ?", (sid,)).fetchone()
                if first is None:
                    return []
            # Rows above hi were written after this search began (it synced the window).
            if lo is not None and lo <= last and first <= hi:
                rows, n = self._rank("sessionkit_fts_recent", fts_query, sid, max(first, lo), min(last, hi),
                                     cand, limit)
                if first >= lo or n >= cand:
                    return rows
            return self._rank("sessionkit_fts", fts_query, sid, first, last, cand, limit)[0]

    def _rank(self, table, fts_query, sid, first, last, cand, limit):
        """``(rows, n)``: the best ``limit`` of the newest ``cand`` matches in ``table``
        with seq in [first, last], as ``(seq, session_id, id, role, score)``, and how
        many matches were ranked (0 when there is no hit)."""
        join, params = "", []
        if sid is not None:
            join = f"JOIN sessionkit_messages s ON s.seq = {table}.rowid AND s.session_id = ?"
            params.append(sid)
        params += [fts_query, first, last, cand, limit]
        # The candidates are ranked and counted in one pass (the window function), and
        # only the best `limit` are joined to their messages.
        rows = self._db.execute(
            f"""SELECT t.seq, m.session_id, m.id, m.role, t.score, t.n FROM (
                    SELECT seq, score, count(*) OVER () AS n FROM (
                        SELECT {table}.rowid AS seq, -bm25({table}) AS score FROM {table} {join}
                        WHERE {table} MATCH ? AND {table}.rowid BETWEEN ? AND ?
                        ORDER BY {table}.rowid DESC LIMIT ?
                    ) ORDER BY score DESC, seq DESC LIMIT ?
                ) AS t JOIN sessionkit_messages m ON m.seq = t.seq
                ORDER BY t.score DESC, t.seq DESC""",
            params,
        ).fetchall()
        return [r[:5] for r in rows], (rows[0][5] if rows else 0)

    def runs(self, sid):
        rows = self._q(
            """SELECT run_id, session_id, status, error, started_at, ended_at, usage, input
               FROM sessionkit_runs WHERE session_id=? ORDER BY n""",
            (sid,),
        )
        return [RunRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else None, r[7]) for r in rows]

    def records(self, sid, kind):
        return self._q("SELECT n, data FROM sessionkit_records WHERE session_id=? AND kind=? ORDER BY n", (sid, kind))

    def events(self, sid, after_seq):
        rows = self._q(
            "SELECT data FROM sessionkit_events WHERE session_id=? AND seq > ? ORDER BY seq",
            (sid, -1 if after_seq is None else after_seq),
        )
        return [json.loads(r[0]) for r in rows]

    # -- writes -------------------------------------------------------------------
    def w_insert(self, sid, prep, parent, created_at, index):
        db = self._db
        content = prep.stored_json
        head, rest = content[: self._chunk], content[self._chunk :]
        nchunks = (len(rest) + self._chunk - 1) // self._chunk
        if parent is None:
            depth, pb, pt, pid = 0, prep.bytes, prep.tokens, None
        else:
            depth = parent.depth + 1
            pb = parent.path_bytes + prep.bytes
            pt = parent.path_tokens + prep.tokens
            pid = parent.id
        # A row follows its parent (branch 0) when the parent is the session's latest row.
        cur = db.execute(
            _INSERT + """VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,
                ?12 IS NOT NULL AND ?12 IS NOT (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?1),
                ?13)""",
            (sid, prep.id, pid, depth, prep.role, created_at, prep.bytes, prep.tokens, pb, pt, nchunks,
             None if parent is None else parent.seq, head),
        )
        if cur.rowcount == 0:
            return None
        seq = cur.lastrowid
        if nchunks:
            db.executemany(
                "INSERT INTO sessionkit_chunks VALUES (?,?,?)",
                [(seq, i, rest[i * self._chunk : (i + 1) * self._chunk]) for i in range(nchunks)],
            )
        if prep.blobs:
            self._put_blobs(seq, prep.blobs)
        if nchunks and self._flag_in_tx():  # the trigger skips rows whose JSON continues elsewhere
            db.execute("INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)", (seq, _search.index_text(prep.text)))
            if self._window()[0] is not None:
                db.execute(_COPY_TO_RECENT.format(seq="?1"), (seq,))
        return Node(seq, prep.id, pid, depth, prep.bytes, prep.tokens, pb, pt, created_at, prep.role)

    def _put_blobs(self, seq, blobs):
        db = self._db
        db.executemany(
            "INSERT OR IGNORE INTO sessionkit_blobs(sha256, size, data) VALUES (?,?,?)",
            [(sha, len(raw), raw) for sha, raw in blobs.items()],
        )
        db.executemany("INSERT OR IGNORE INTO sessionkit_blob_refs VALUES (?,?)", [(seq, sha) for sha in blobs])

    def _gc_blobs(self, seqs):
        """Drop the refs of ``seqs`` and any payload no longer referenced."""
        db = self._db
        if not seqs:
            return
        for part in _split(seqs, 500):
            marks = ",".join("?" * len(part))
            shas = [r[0] for r in db.execute(
                f"SELECT DISTINCT sha256 FROM sessionkit_blob_refs WHERE seq IN ({marks})", part)]
            if not shas:
                continue
            db.execute(f"DELETE FROM sessionkit_blob_refs WHERE seq IN ({marks})", part)
            db.executemany(
                """DELETE FROM sessionkit_blobs WHERE sha256 = ?
                   AND NOT EXISTS (SELECT 1 FROM sessionkit_blob_refs r WHERE r.sha256 = ?)""",
                [(s, s) for s in shas],
            )

    def w_update(self, sid, node, prep, index):
        db = self._db
        content = prep.stored_json
        head, rest = content[: self._chunk], content[self._chunk :]
        nchunks = (len(rest) + self._chunk - 1) // self._chunk
        db_ = prep.bytes - node.bytes
        dt = prep.tokens - node.tokens
        db.execute(
            """UPDATE sessionkit_messages SET role=?, bytes=?, tokens=?, path_bytes=path_bytes+?,
               path_tokens=path_tokens+?, chunks=?, content=? WHERE seq=?""",
            (prep.message["role"], prep.bytes, prep.tokens, db_, dt, nchunks, head, node.seq),
        )
        db.execute("DELETE FROM sessionkit_chunks WHERE seq=?", (node.seq,))
        if nchunks:
            db.executemany(
                "INSERT INTO sessionkit_chunks VALUES (?,?,?)",
                [(node.seq, i, rest[i * self._chunk : (i + 1) * self._chunk]) for i in range(nchunks)],
            )
        self._gc_blobs([node.seq])
        if prep.blobs:
            self._put_blobs(node.seq, prep.blobs)
        if db_ or dt:
            db.execute(
                _DESCENDANTS + """ UPDATE sessionkit_messages
                    SET path_bytes = path_bytes + :db, path_tokens = path_tokens + :dt
                    WHERE seq IN (SELECT seq FROM down WHERE seq <> :seq)""",
                {"sid": sid, "ids": json.dumps([node.id]), "seq": node.seq, "db": db_, "dt": dt},
            )
        if nchunks and self._flag_in_tx():  # as in w_insert; the trigger dropped the old text
            db.execute("DELETE FROM sessionkit_fts WHERE rowid=?", (node.seq,))
            db.execute("INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)",
                       (node.seq, _search.index_text(prep.text)))
            if self._window()[0] is not None:
                db.execute(_COPY_TO_RECENT.format(seq="?1"), (node.seq,))

    def w_descendants(self, sid, mids):
        rows = self._db.execute(
            _DESCENDANTS + f" SELECT {_NODE} FROM sessionkit_messages WHERE seq IN (SELECT seq FROM down) ORDER BY seq",
            {"sid": sid, "ids": json.dumps(mids)},
        ).fetchall()
        return [Node(*r) for r in rows]

    def w_delete(self, sid, nodes):
        db = self._db
        seqs = [n.seq for n in nodes]
        ids = [n.id for n in nodes]
        self._gc_blobs(seqs)
        for part in _split(seqs, 500):
            marks = ",".join("?" * len(part))
            db.execute(f"DELETE FROM sessionkit_chunks WHERE seq IN ({marks})", part)
            db.execute(f"DELETE FROM sessionkit_messages WHERE seq IN ({marks})", part)  # triggers drop index rows
        for part in _split(ids, 400):
            marks = ",".join("?" * len(part))
            db.execute(
                f"DELETE FROM sessionkit_compactions WHERE session_id=? AND (from_id IN ({marks}) OR to_id IN ({marks}))",
                [sid, *part, *part],
            )

    def w_clear(self, sid):
        db = self._db
        seqs = [r[0] for r in db.execute("SELECT seq FROM sessionkit_messages WHERE session_id=?", (sid,))]
        self._gc_blobs(seqs)
        for part in _split(seqs, 500):
            marks = ",".join("?" * len(part))
            db.execute(f"DELETE FROM sessionkit_chunks WHERE seq IN ({marks})", part)
        db.execute("DELETE FROM sessionkit_messages WHERE session_id=?", (sid,))  # triggers drop index rows
        db.execute("DELETE FROM sessionkit_compactions WHERE session_id=?", (sid,))

    def w_delete_session(self, sid):
        self.w_clear(sid)
        self._db.execute("DELETE FROM sessionkit_runs WHERE session_id=?", (sid,))
        self._db.execute("DELETE FROM sessionkit_events WHERE session_id=?", (sid,))
        self._db.execute("DELETE FROM sessionkit_records WHERE session_id=?", (sid,))

    def w_add_compaction(self, sid, comp):
        self._db.execute(
            """INSERT INTO sessionkit_compactions
               (session_id, id, from_id, to_id, summary, created_at, tokens_before, tokens_after)
               VALUES (?,?,?,?,?,?,?,?)""",
            (sid, comp.id, comp.from_id, comp.to_id, comp.summary, comp.created_at,
             comp.tokens_before, comp.tokens_after),
        )

    def w_build_index(self):
        db = self._db
        row = db.execute("SELECT value FROM sessionkit_meta WHERE key='index_built'").fetchone()
        if row is not None and row[0] == "1":
            self._index_on = True
            return
        db.execute("DELETE FROM sessionkit_fts")
        db.execute("DROP TABLE IF EXISTS sessionkit_fts_recent")
        db.execute("DELETE FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')")
        cur = db.execute("SELECT seq, content, chunks FROM sessionkit_messages")
        batch = []
        reader = self._db.cursor()
        for seq, content, chunks in cur:
            if chunks:
                content += "".join(r[0] for r in reader.execute(
                    "SELECT data FROM sessionkit_chunks WHERE seq=? ORDER BY n", (seq,)))
            text = _msg.message_text(json.loads(content))
            batch.append((seq, _search.index_text(text)))
            if len(batch) >= 1000:
                reader.executemany("INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)", batch)
                batch.clear()
        if batch:
            reader.executemany("INSERT INTO sessionkit_fts(rowid, body) VALUES (?, ?)", batch)
        for name in _FTS_NAMES:  # (a window's triggers, if any, went with its table)
            db.execute(f"DROP TRIGGER IF EXISTS {name}")
        for stmt in _FTS_TRIGGERS:
            db.execute(stmt)
        db.execute("INSERT OR REPLACE INTO sessionkit_meta VALUES ('index_built', '1')")
        self._index_on = True

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
                db = self._db
                new_lo = top - self.search_window + 1
                if lo is None:
                    db.execute(_RECENT_TABLE)
                    for name in _FTS_NAMES:
                        db.execute(f"DROP TRIGGER IF EXISTS {name}")
                    for stmt in _FTS_TRIGGERS_WINDOWED:
                        db.execute(stmt)
                elif hi < new_lo:  # nothing in it would stay: start afresh
                    db.execute("DROP TABLE sessionkit_fts_recent")
                    db.execute(_RECENT_TABLE)
                    lo = None
                if lo is None:
                    lo, hi = new_lo, new_lo - 1
                db.execute("INSERT INTO sessionkit_fts_recent(rowid, body) "
                           "SELECT rowid, body FROM sessionkit_fts WHERE rowid > ? AND rowid <= ?", (hi, top))
                if new_lo > lo:
                    db.execute("DELETE FROM sessionkit_fts_recent WHERE rowid < ?", (new_lo,))
                    lo = new_lo
                db.executemany("INSERT OR REPLACE INTO sessionkit_meta VALUES (?, ?)",
                               [("recent_lo", str(lo)), ("recent_hi", str(top))])
                return lo, top

    def _window_work(self) -> tuple[int | None, int | None, int | None]:
        """``(top, lo, hi)``: the newest seq and the window's range, with ``top`` None
        unless the window must be created or has rows to catch up on."""
        top = self._db.execute("SELECT max(seq) FROM sessionkit_messages").fetchone()[0]
        lo, hi = self._window()
        w = self.search_window
        due = top is not None and (top >= w + w // 4 if lo is None else top > hi)
        return (top if due else None), lo, hi

    def _window(self) -> tuple[int | None, int | None]:
        """``(recent_lo, recent_hi)``: the seq range the window holds, or Nones."""
        rows = dict(self._db.execute(
            "SELECT key, value FROM sessionkit_meta WHERE key IN ('recent_lo', 'recent_hi')").fetchall())
        if "recent_lo" not in rows:
            return None, None
        return int(rows["recent_lo"]), int(rows["recent_hi"])

    def w_index_on(self):
        return False  # triggers keep the index; see _FTS_TRIGGERS

    def _flag_in_tx(self) -> bool:
        row = self._db.execute("SELECT value FROM sessionkit_meta WHERE key='index_built'").fetchone()
        return row is not None and row[0] == "1"

    def append_simple(self, sid, prep, parent_id, created_at):
        if prep.blobs or len(prep.stored_json) > self._chunk:
            return NotImplemented
        # One statement (its own transaction): the parent's place is read and the row
        # written atomically, so this needs no BEGIN/COMMIT round trips.
        params = (sid, prep.id, prep.role, created_at, prep.bytes, prep.tokens, prep.stored_json)
        with self._lock:
            if parent_id is None:
                inserted = self._db.execute(_APPEND_ROOT, params).rowcount == 1
            elif isinstance(parent_id, str):
                inserted = self._db.execute(_APPEND_UNDER, params + (parent_id,)).rowcount == 1
            else:
                inserted = self._append_latest(sid, prep, params)
            if inserted:
                if parent_id is None or isinstance(parent_id, str):
                    self._tails.pop(sid, None)
                return "inserted"
            if self.node(sid, prep.id) is not None:
                return "exists"
            return "no-parent"

    def _append_latest(self, sid, prep, params) -> bool:
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
            row = cur.rowcount == 1 and db.execute(
                "SELECT seq, id, depth, path_bytes, path_tokens FROM sessionkit_messages WHERE seq = ?",
                (cur.lastrowid,)).fetchone()
        if not row:
            return False
        if len(self._tails) >= 4096:  # a bound: the sessions written most recently gain
            self._tails.clear()
        self._tails[sid] = tuple(row)
        return True

    def w_run_begin(self, sid, run_id, input, started_at):
        n = self._db.execute("SELECT coalesce(max(n), 0) + 1 FROM sessionkit_runs WHERE session_id=?",
                             (sid,)).fetchone()[0]
        self._db.execute(
            "INSERT INTO sessionkit_runs(run_id, session_id, status, input, started_at, n) VALUES (?,?,?,?,?,?)",
            (run_id, sid, "running", input, started_at, n),
        )

    def w_run_end(self, run_id, status, error, usage, ended_at):
        self._db.execute(
            "UPDATE sessionkit_runs SET status=?, error=?, usage=?, ended_at=? WHERE run_id=?",
            (status, error, None if usage is None else _msg.dumps(usage), ended_at, run_id),
        )

    def w_append_events(self, sid, events):
        start = self._db.execute("SELECT coalesce(max(seq), -1) + 1 FROM sessionkit_events WHERE session_id=?",
                                 (sid,)).fetchone()[0]
        out = []
        for i, ev in enumerate(events):
            ev["seq"] = start + i
            out.append(ev)
        self._db.executemany(
            "INSERT INTO sessionkit_events VALUES (?,?,?,?)",
            [(sid, ev["seq"], ev.get("run_id"), _msg.dumps(ev)) for ev in out],
        )
        return out


    def w_put_records(self, sid, kind, items):
        self._db.executemany(
            "INSERT OR REPLACE INTO sessionkit_records(session_id, kind, n, data) VALUES (?,?,?,?)",
            [(sid, kind, n, data) for n, data in items],
        )


def _split(items, size):
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
