"""DuckDB engine: the same storage primitives as the SQLite engine, on a DuckDB file.

Layout and meaning follow ``sqlite.py`` table for table (``sessionkit_`` prefix,
a schema-version row, continuation rows, payloads by SHA-256 with reference
counting, cumulative path columns, compactions, runs and events). What differs:

* **Write sequence.** ``seq`` comes from the DuckDB SEQUENCE ``sessionkit_seq``;
  a sequence value is never handed out twice, even after a rollback or a delete.
* **Keys.** Each message row carries ``msg_key`` -- the session id
  length-prefixed and followed by the message id -- under a UNIQUE constraint.
  DuckDB answers point lookups from an index only for a single-column equality,
  so this one column gives both the idempotency guard and fast ``node()`` lookups.
  An insert writes the row only when the key is absent, in one statement; the
  UNIQUE constraint stays as the final guard.
* **Search.** DuckDB's ``fts`` extension needs a download and does not update
  incrementally, so this engine keeps its own inverted index:
  ``sessionkit_terms(term, seq, tf, pos)`` holds one row per stem per message
  with the stem's token positions, and the message row's ``index_len`` column
  its word count (NULL while it is not indexed; kept in the row so indexing an
  append costs one extra statement, not two). The index is built on the first
  search, kept current by every write afterwards, and ranked with BM25 in SQL.
  A phrase matches when its stems sit at consecutive positions, checked in the
  same SQL statement.
* **Locking.** A DuckDB file admits one process. Opening a file another process
  holds raises :class:`~sessionkit.errors.StoreLocked` naming that process at
  once (DuckDB does not wait for the lock). Within one process, every store on
  the same file shares one lock, so their transactions never conflict.
* **Durability.** DuckDB writes each commit to its write-ahead log and
  ``fdatasync``\\ s it before the commit returns, so ``durability="normal"``
  (DuckDB's own default) already survives a killed process or a power cut.
  ``durability="full"`` additionally sets DuckDB's ``fsync_mode`` to ``FULL``
  (``F_FULLFSYNC`` on macOS, where a plain fsync may stay in the drive's cache)
  and fsyncs the folder holding the database after each commit, so a freshly
  created database or WAL file is recorded in its directory too.
* **Speed.** DuckDB spends about a millisecond planning and running any
  statement, however small, so the engine keeps statements per operation low:
  a plain append is one INSERT (its parent comes from a cached session tail, see
  ``_Shared``), an indexed one adds one more inside a transaction. That still
  makes single appends one to two orders of magnitude slower than SQLite's (a
  few hundred per second against thousands), so SQLite stays the default.
  :meth:`DuckDBEngine.w_insert_many` writes a whole batch of messages (with
  their continuation rows, payloads and index entries) in a handful of
  statements, passing column lists as parameters and unnesting them in SQL;
  bulk imports should use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import weakref
from pathlib import Path

from .. import messages as _msg
from ..errors import (
    MessageNotFound,
    SchemaVersionError,
    SessionKitError,
    StoreClosed,
    StoreLocked,
    missing,
)
from . import search as _search
from ._core import LATEST, Capabilities, Compaction, Engine, Node, RunRecord, SessionInfo

try:
    import duckdb
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("duckdb", "duckdb", exc) from exc

__all__ = ["DuckDBEngine", "SCHEMA_VERSION", "DEFAULT_CHUNK_CHARS"]

SCHEMA_VERSION = 2

#: Stored JSON longer than this (characters) continues in sessionkit_chunks rows.
DEFAULT_CHUNK_CHARS = 1 << 20

#: BM25 parameters (the usual defaults, as in SQLite's FTS5).
BM25_K1 = 1.2
BM25_B = 0.75

# Rows per statement in bulk writes: large enough to amortise DuckDB's per-statement
# cost, small enough to keep the parameter lists' memory modest.
_BULK_ROWS = 10_000

# Up to this many messages, index rows are built in Python (see _put_terms).
_FEW_DOCS = 16

_COLS = ("seq", "id", "parent_id", "depth", "bytes", "tokens", "path_bytes", "path_tokens", "created_at", "role")
_NODE = ", ".join(_COLS)
_MNODE = ", ".join("m." + c for c in _COLS)

_RECORDS_TABLE = """CREATE TABLE IF NOT EXISTS sessionkit_records (
        session_id VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        n BIGINT NOT NULL,
        data VARCHAR NOT NULL,
        PRIMARY KEY (session_id, kind, n)
    )"""

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS sessionkit_meta (
        key VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    )""",
    "CREATE SEQUENCE IF NOT EXISTS sessionkit_seq START 1",
    """CREATE TABLE IF NOT EXISTS sessionkit_messages (
        seq BIGINT NOT NULL DEFAULT nextval('sessionkit_seq'),
        msg_key VARCHAR NOT NULL UNIQUE,
        session_id VARCHAR NOT NULL,
        id VARCHAR NOT NULL,
        parent_id VARCHAR,
        depth INTEGER NOT NULL,
        role VARCHAR NOT NULL,
        created_at VARCHAR NOT NULL,
        bytes BIGINT NOT NULL,
        tokens BIGINT NOT NULL,
        path_bytes BIGINT NOT NULL,
        path_tokens BIGINT NOT NULL,
        chunks INTEGER NOT NULL DEFAULT 0,
        content VARCHAR NOT NULL,
        index_len INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_chunks (
        seq BIGINT NOT NULL,
        n INTEGER NOT NULL,
        data VARCHAR NOT NULL,
        PRIMARY KEY (seq, n)
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blobs (
        sha256 VARCHAR PRIMARY KEY,
        size BIGINT NOT NULL,
        data BLOB NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_blob_refs (
        seq BIGINT NOT NULL,
        sha256 VARCHAR NOT NULL,
        PRIMARY KEY (seq, sha256)
    )""",
    "CREATE SEQUENCE IF NOT EXISTS sessionkit_compaction_seq START 1",
    """CREATE TABLE IF NOT EXISTS sessionkit_compactions (
        seq BIGINT NOT NULL DEFAULT nextval('sessionkit_compaction_seq'),
        session_id VARCHAR NOT NULL,
        id VARCHAR NOT NULL,
        from_id VARCHAR NOT NULL,
        to_id VARCHAR NOT NULL,
        summary VARCHAR NOT NULL,
        created_at VARCHAR NOT NULL,
        tokens_before BIGINT NOT NULL,
        tokens_after BIGINT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_terms (
        term VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        tf INTEGER NOT NULL,
        pos INTEGER[] NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_runs (
        run_id VARCHAR PRIMARY KEY,
        session_id VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        input VARCHAR,
        error VARCHAR,
        started_at VARCHAR NOT NULL,
        ended_at VARCHAR,
        usage VARCHAR,
        n INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS sessionkit_events (
        session_id VARCHAR NOT NULL,
        seq BIGINT NOT NULL,
        run_id VARCHAR,
        data VARCHAR NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    _RECORDS_TABLE,
]

# Upgrades from an older schema version to the next one: {from_version: [statements]}.
_MIGRATIONS: dict[int, list[str]] = {
    1: [
        # 2: internal records kept beside a session (the HTTP server's tables) ...
        _RECORDS_TABLE,
        # ... and word counts in the message row. Early version-1 files kept them in a
        # table of their own; the index is simply rebuilt by the next search.
        "ALTER TABLE sessionkit_messages ADD COLUMN IF NOT EXISTS index_len INTEGER",
        "DROP TABLE IF EXISTS sessionkit_docs",
        "DELETE FROM sessionkit_terms",
        "UPDATE sessionkit_messages SET index_len = NULL",
        "UPDATE sessionkit_meta SET value = '0' WHERE key = 'index_built'",
    ],
}

# "... Conflicting lock is held in /usr/bin/python3 (PID 1234) by user alice ..."
_LOCK_HOLDER = re.compile(r"Conflicting lock is held in (?P<exe>.*?) \(PID (?P<pid>\d+)\)(?: by user (?P<user>\S+))?")

# DuckDB's file header carries this magic at bytes 8..12.
_MAGIC = b"DUCK"


def _key(sid: str, mid: str) -> str:
    """The single-column key of a message: unambiguous thanks to the length prefix."""
    return f"{len(sid)}:{sid}{mid}"


class _Shared:
    """State shared by every engine of one database file in this process."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # Only this process can write the file (DuckDB's file lock) and every engine on
        # it shares this object, so what is cached here stays true until we change it.
        # None: not read yet.
        self.index_on: bool | None = None
        # Each session's newest message (its latest leaf), so an append needs no lookup
        # to find its parent: DuckDB spends about a millisecond on any statement.
        # Dropped for a session on update/delete/clear, and for all on a rollback.
        self.tails: dict[str, Node] = {}
        self.users = 0  # open engines on this file in this process

    def forget(self) -> None:
        """After a rollback: cached state may describe rows that were never committed."""
        self.index_on = None
        self.tails.clear()


_SHARED: "weakref.WeakValueDictionary[str, _Shared]" = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _shared_for(path: str | None) -> _Shared:
    if path is None:
        return _Shared()
    with _SHARED_LOCK:
        shared = _SHARED.get(path)
        if shared is None:
            shared = _SHARED[path] = _Shared()
        return shared


def _describe_holder(text: str) -> str:
    """Who holds a DuckDB file, from DuckDB's lock error: PID, command line, user."""
    m = _LOCK_HOLDER.search(text)
    if m is None:
        return "another process"
    pid = m.group("pid")
    who = f"PID {pid} ({m.group('exe')}"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        if cmd:
            who = f"PID {pid} ({cmd}"
    except OSError:  # not Linux, or the process is gone or not ours to read
        pass
    if m.group("user"):
        who += f", user {m.group('user')}"
    return who + ")"


def _body(text: str) -> tuple[int, str]:
    """Word count and indexed form (stems joined by single spaces) of a message's text."""
    body = _search.index_text(text)
    return (body.count(" ") + 1 if body else 0), body


class DuckDBEngine(Engine):
    """Storage primitives on DuckDB. Open through ``open_store("x.duckdb")``.

    Options: ``durability`` (``"normal"`` or ``"full"``, see the module notes),
    ``chunk_chars`` (stored JSON longer than this continues in extra rows),
    ``threads`` and ``memory_limit`` (DuckDB settings, e.g. ``"2GB"``).
    """

    kind = "duckdb"
    capabilities = Capabilities(bulk_insert=True)

    def __init__(
        self,
        location: str,
        *,
        durability: str = "normal",
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        threads: int | None = None,
        memory_limit: str | None = None,
    ):
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
        self._chunk = int(chunk_chars)
        if self._chunk < 1:
            raise ValueError("chunk_chars must be positive")
        self.path = None if location in ("", ":memory:") else str(Path(location).resolve())
        self._full = durability == "full"
        self._closed = False
        self._depth = 0
        self._shared = _shared_for(self.path)
        self._lock = self._shared.lock
        with self._lock:
            self._db = self._connect(location)
            if self._shared.users == 0:
                # No engine had the file open here, so another process may have written
                # it since: nothing cached from before still holds.
                self._shared.forget()
            self._shared.users += 1
        try:
            # A long index build must not draw DuckDB's progress bar into a notebook.
            self._db.execute("SET enable_progress_bar = false")
            # Applied as settings, not connect() config: a different config would stop
            # other code in this process from opening the same file with plain connect().
            if self._full:
                with contextlib.suppress(duckdb.CatalogException):  # older DuckDB lacks the setting
                    self._db.execute("SET fsync_mode = 'FULL'")  # F_FULLFSYNC on macOS
            if threads is not None:
                self._db.execute(f"SET threads = {int(threads)}")
            if memory_limit is not None:
                self._db.execute("SET memory_limit = ?", [str(memory_limit)])
            self._setup()
        except BaseException:
            self.close()
            raise

    # -- setup ----------------------------------------------------------------
    def _connect(self, location: str):
        if self.path is None:
            try:
                return duckdb.connect(":memory:")
            except duckdb.Error as exc:
                raise SessionKitError(f"cannot open an in-memory DuckDB store: {exc}") from exc
        path = Path(self.path)
        if not path.parent.is_dir():
            raise ValueError(f"cannot open store {location!r}: folder {str(path.parent)!r} does not exist")
        if path.is_dir():
            raise ValueError(f"cannot open store {location!r}: it is a folder")
        if path.exists():
            self._check_header(path)
        try:
            return duckdb.connect(self.path)
        except duckdb.IOException as exc:
            text = str(exc)
            if "Conflicting lock" in text or "Could not set lock" in text:
                raise StoreLocked(
                    f"DuckDB store {self.path} is held by {_describe_holder(text)}; a DuckDB file admits "
                    "one process at a time: close it there, or use SQLite or PostgreSQL to share a store "
                    "between processes"
                ) from exc
            if "not a valid DuckDB database" in text:
                raise ValueError(f"{self.path} is not a DuckDB database: {text}") from exc
            raise SessionKitError(f"cannot open DuckDB store {self.path}: {text}") from exc
        except duckdb.Error as exc:
            raise SessionKitError(f"cannot open DuckDB store {self.path}: {exc}") from exc

    def _check_header(self, path: Path) -> None:
        """Refuse foreign files before DuckDB sees them.

        DuckDB recognises a SQLite file and tries to install its sqlite extension,
        which needs the network; a clear error is better. An empty file (as left by
        ``tempfile.NamedTemporaryFile(suffix=".duckdb")``) holds nothing and is
        replaced by a new database.
        """
        try:
            with open(path, "rb") as fh:
                head = fh.read(16)
        except OSError as exc:
            raise ValueError(f"cannot read store file {str(path)!r}: {exc}") from exc
        if not head:
            os.remove(path)
            return
        if head[8:12] != _MAGIC:
            kind = "a SQLite database" if head.startswith(b"SQLite format 3") else "not a DuckDB database"
            raise ValueError(f"{path} is {kind}: open it with a .db/.sqlite path, or pick another file")

    def _setup(self) -> None:
        try:
            version = self._read_version()
            if version is not None and version > SCHEMA_VERSION:
                raise SchemaVersionError(
                    f"store {self.path or ':memory:'} has schema version {version}; this sessionkit "
                    f"reads up to {SCHEMA_VERSION}: upgrade sessionkit"
                )
            if version == SCHEMA_VERSION:
                return
            with self.write():
                db = self._db
                if version is None:
                    for stmt in _SCHEMA:
                        db.execute(stmt)
                    db.execute("INSERT INTO sessionkit_meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
                    db.execute("INSERT INTO sessionkit_meta VALUES ('index_built', '0')")
                else:
                    for v in range(version, SCHEMA_VERSION):
                        for stmt in _MIGRATIONS.get(v, []):
                            db.execute(stmt)
                    db.execute(
                        "UPDATE sessionkit_meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)]
                    )
        except duckdb.Error as exc:
            raise SessionKitError(f"cannot set up DuckDB store {self.path or ':memory:'}: {exc}") from exc

    def _read_version(self) -> int | None:
        row = self._db.execute(
            """SELECT count(*) FROM duckdb_tables()
               WHERE database_name = current_database() AND schema_name = 'main'
                 AND table_name = 'sessionkit_meta'"""
        ).fetchone()
        if not row[0]:
            return None
        row = self._db.execute("SELECT value FROM sessionkit_meta WHERE key = 'schema_version'").fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._shared.users -= 1
                self._db.close()

    # -- transactions and statement helpers -------------------------------------
    @contextlib.contextmanager
    def write(self):
        with self._lock:
            self._live()
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            self._run("BEGIN TRANSACTION")
            self._depth = 1
            try:
                yield self
            except BaseException:
                self._depth = 0
                self._shared.forget()
                with contextlib.suppress(duckdb.Error):
                    self._db.execute("ROLLBACK")
                raise
            self._depth = 0
            try:
                self._db.execute("COMMIT")
            except duckdb.Error as exc:
                self._shared.forget()
                with contextlib.suppress(duckdb.Error):
                    self._db.execute("ROLLBACK")
                raise SessionKitError(f"DuckDB store {self.path or ':memory:'}: commit failed: {exc}") from exc
            if self._full and self.path is not None:
                self._sync_folder()

    def _sync_folder(self) -> None:
        try:
            fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        except OSError:  # some platforms cannot open a folder; the WAL itself is synced
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    def _live(self) -> None:
        if self._closed:
            raise StoreClosed("the store is closed")

    def _run(self, sql: str, params=None):
        """Execute under the lock; DuckDB errors become SessionKitError (or ValueError)."""
        with self._lock:
            self._live()
            try:
                return self._db.execute(sql, params) if params is not None else self._db.execute(sql)
            except duckdb.InvalidInputException as exc:
                if "encode" in str(exc):  # e.g. a lone surrogate in a Python str
                    raise ValueError(f"value cannot be stored as UTF-8 text: {exc}") from exc
                raise SessionKitError(f"DuckDB store {self.path or ':memory:'}: {exc}") from exc
            except duckdb.Error as exc:
                raise SessionKitError(f"DuckDB store {self.path or ':memory:'}: {exc}") from exc

    def _q(self, sql: str, params=None) -> list:
        with self._lock:
            return self._run(sql, params).fetchall()

    def _one(self, sql: str, params=None):
        with self._lock:
            return self._run(sql, params).fetchone()

    # -- reads ------------------------------------------------------------------
    def node(self, sid, mid):
        row = self._one(f"SELECT {_NODE} FROM sessionkit_messages WHERE msg_key = ?", [_key(sid, mid)])
        return None if row is None else Node(*row)

    def _nodes_by_id(self, sid, mids) -> dict[str, Node]:
        if not mids:
            return {}
        rows = self._q(
            f"""SELECT {_NODE} FROM sessionkit_messages
                WHERE msg_key IN (SELECT unnest(?::VARCHAR[]))""",
            [[_key(sid, m) for m in mids]],
        )
        return {r[1]: Node(*r) for r in rows}

    def latest(self, sid):
        with self._lock:
            tail = self._shared.tails.get(sid)
            if tail is not None:
                return tail
            # max(seq) first, then the row: cheaper on DuckDB than ORDER BY seq DESC LIMIT 1
            row = self._one(
                f"""SELECT {_NODE} FROM sessionkit_messages WHERE session_id = ? AND seq =
                    (SELECT max(seq) FROM sessionkit_messages WHERE session_id = ?)""",
                [sid, sid],
            )
            if row is None:
                return None
            node = self._shared.tails[sid] = Node(*row)
            return node

    def children(self, sid, mid):
        rows = self._q(
            f"SELECT {_NODE} FROM sessionkit_messages WHERE session_id = ? AND parent_id = ? ORDER BY seq",
            [sid, mid],
        )
        return [Node(*r) for r in rows]

    def nodes(self, sid):
        rows = self._q(f"SELECT {_NODE} FROM sessionkit_messages WHERE session_id = ? ORDER BY seq", [sid])
        return [Node(*r) for r in rows]

    def ancestors(self, sid, seq, limit):
        if limit is not None and limit <= 0:
            return []
        # The step counter ``k`` stops the recursion after ``limit`` rows, so an early
        # stop reads no older rows. DuckDB gives a recursive CTE's rows in no set
        # order, hence the final ORDER BY depth.
        rows = self._q(
            f"""WITH RECURSIVE up AS (
                    SELECT {_NODE}, 1 AS k FROM sessionkit_messages WHERE seq = ?
                    UNION ALL
                    SELECT {_MNODE}, up.k + 1 FROM up JOIN sessionkit_messages m
                      ON m.session_id = ? AND m.id = up.parent_id
                    WHERE up.k < ?
                ) SELECT {_NODE} FROM up ORDER BY depth DESC""",
            [seq, sid, (1 << 62) if limit is None else int(limit)],
        )
        return [Node(*r) for r in rows]

    def window(self, sid, start_id, limit):
        """Nodes and stored JSON from ``start_id`` (None: the latest leaf) towards the root."""
        if limit is not None and limit <= 0:
            return []
        with self._lock:
            start = self.latest(sid) if start_id is None else None
            if start_id is None and start is None:
                return []
            # Seeded by seq (the cached tail) or by key: one statement either way.
            seed, value = ("seq = ?", start.seq) if start is not None else ("msg_key = ?", _key(sid, start_id))
            rows = self._q(
                f"""WITH RECURSIVE up AS (
                        SELECT {_NODE}, chunks, content, 1 AS k FROM sessionkit_messages WHERE {seed}
                        UNION ALL
                        SELECT {_MNODE}, m.chunks, m.content, up.k + 1 FROM up JOIN sessionkit_messages m
                          ON m.session_id = ? AND m.id = up.parent_id
                        WHERE up.k < ?
                    ) SELECT {_NODE}, chunks, content FROM up ORDER BY depth DESC""",
                [value, sid, (1 << 62) if limit is None else int(limit)],
            )
            long = [r[0] for r in rows if r[10]]
            full = dict(zip(long, self.contents(long))) if long else {}
            return [(Node(*r[:10]), full.get(r[0], r[11])) for r in rows]

    def path_skeleton(self, sid, seq):
        return self._q(
            """WITH RECURSIVE up AS (
                   SELECT seq, id, parent_id, tokens, depth FROM sessionkit_messages WHERE seq = ?
                   UNION ALL
                   SELECT m.seq, m.id, m.parent_id, m.tokens, m.depth FROM up JOIN sessionkit_messages m
                     ON m.session_id = ? AND m.id = up.parent_id
               ) SELECT seq, id, tokens FROM up ORDER BY depth DESC""",
            [seq, sid],
        )

    def contents(self, seqs):
        if not seqs:
            return []
        found: dict[int, str] = {}
        with self._lock:
            for part in _split(list(seqs), 1000):
                marks = ",".join("?" * len(part))
                rows = self._q(
                    f"SELECT seq, content, chunks FROM sessionkit_messages WHERE seq IN ({marks})", part
                )
                long = [seq for seq, _, chunks in rows if chunks]
                rest: dict[int, list[str]] = {}
                if long:
                    marks = ",".join("?" * len(long))
                    for seq, data in self._q(
                        f"SELECT seq, data FROM sessionkit_chunks WHERE seq IN ({marks}) ORDER BY seq, n", long
                    ):
                        rest.setdefault(seq, []).append(data)
                for seq, content, chunks in rows:
                    found[seq] = content + "".join(rest.get(seq, ())) if chunks else content
        return [found[s] for s in seqs]

    def blob(self, sha):
        row = self._one("SELECT data FROM sessionkit_blobs WHERE sha256 = ?", [sha])
        if row is None:
            raise SessionKitError(f"payload {sha} is missing from the store")
        return bytes(row[0])

    def count(self, sid):
        return self._one("SELECT count(*) FROM sessionkit_messages WHERE session_id = ?", [sid])[0]

    def list_sessions(self):
        rows = self._q(
            """SELECT session_id, count(*), min(created_at), max(created_at) FROM sessionkit_messages
               GROUP BY session_id ORDER BY max(seq) DESC"""
        )
        return [SessionInfo(*r) for r in rows]

    def session_exists(self, sid):
        for table in ("sessionkit_messages", "sessionkit_runs", "sessionkit_events", "sessionkit_compactions",
                      "sessionkit_records"):
            if self._one(f'SELECT 1 FROM "{table}" WHERE session_id = ? LIMIT 1', [sid]):
                return True
        return False

    def compactions(self, sid):
        rows = self._q(
            """SELECT seq, id, from_id, to_id, summary, created_at, tokens_before, tokens_after
               FROM sessionkit_compactions WHERE session_id = ? ORDER BY seq""",
            [sid],
        )
        return [(r[0], Compaction(*r[1:])) for r in rows]

    def stats(self):
        with self._lock:
            one = lambda sql: self._one(sql)  # noqa: E731
            sessions, messages = one("SELECT count(DISTINCT session_id), count(*) FROM sessionkit_messages")
            blobs, blob_bytes = one("SELECT count(*), coalesce(sum(size), 0) FROM sessionkit_blobs")
            size = 0
            if self.path is not None:
                for name in (self.path, self.path + ".wal"):
                    with contextlib.suppress(OSError):
                        size += os.path.getsize(name)
            return {
                "engine": self.kind,
                "schema_version": SCHEMA_VERSION,
                "sessions": sessions,
                "messages": messages,
                "compactions": one("SELECT count(*) FROM sessionkit_compactions")[0],
                "blobs": blobs,
                "blob_bytes": int(blob_bytes),
                "indexed_messages": one("SELECT count(index_len) FROM sessionkit_messages")[0],
                "runs": one("SELECT count(*) FROM sessionkit_runs")[0],
                "events": one("SELECT count(*) FROM sessionkit_events")[0],
                "bytes": size,
            }

    def index_built(self):
        with self._lock:
            if self._shared.index_on is None:
                row = self._one("SELECT value FROM sessionkit_meta WHERE key = 'index_built'")
                self._shared.index_on = row is not None and row[0] == "1"
            return self._shared.index_on

    def search(self, fts_query, terms, sid, limit):
        """BM25 over the inverted index; ``terms`` is the parsed query (search.Query).

        Every stem must occur in a hit; each phrase must occur as consecutive stems.
        Scores use the store-wide document count and average length, like FTS5.
        """
        query = terms
        stems: list[str] = list(dict.fromkeys([*query.terms, *(w for p in query.phrases for w in p)]))
        if not stems or limit <= 0:
            return []
        col = {st: f"p{i}" for i, st in enumerate(stems)}
        marks = ",".join("?" * len(stems))
        params: list = [*stems]
        # Position lists of phrase stems, one column each, gathered per document.
        phrase_stems = list(dict.fromkeys(w for p in query.phrases for w in p))
        pos_cols = "".join(f", any_value(h.pos) FILTER (WHERE h.term = ?) AS {col[w]}" for w in phrase_stems)
        params += phrase_stems
        where_sid = ""
        if sid is not None:
            where_sid = "WHERE m.session_id = ?"
            params.append(sid)
        conds = ["matched = ?"]
        params.append(len(stems))
        for phrase in query.phrases:
            first, rest = phrase[0], phrase[1:]
            tests = " AND ".join(f"list_contains({col[w]}, x + {i})" for i, w in enumerate(rest, start=1))
            conds.append(f"len([x for x in {col[first]} if {tests}]) > 0")
        params += [int(self.search_candidates), int(limit)]
        sql = f"""
            WITH hits AS (
                SELECT term, seq, tf, pos FROM sessionkit_terms WHERE term IN ({marks})
            ), df AS (
                SELECT term, count(*)::DOUBLE AS n FROM hits GROUP BY term
            ), corpus AS (
                SELECT count(index_len)::DOUBLE AS n, greatest(coalesce(avg(index_len), 0), 1)::DOUBLE AS avgdl
                FROM sessionkit_messages
            ), per_doc AS (
                SELECT h.seq, count(*) AS matched,
                       sum(ln(1 + (c.n - df.n + 0.5) / (df.n + 0.5))
                           * h.tf * ({BM25_K1} + 1)
                           / (h.tf + {BM25_K1} * (1 - {BM25_B} + {BM25_B} * m.index_len / c.avgdl))) AS score
                       {pos_cols}
                FROM hits h
                JOIN df ON df.term = h.term
                JOIN sessionkit_messages m ON m.seq = h.seq
                CROSS JOIN corpus c
                {where_sid}
                GROUP BY h.seq
            ), cand AS (  -- rank only the newest search_candidates matches, like the SQLite engine
                SELECT seq, score FROM per_doc WHERE {" AND ".join(conds)}
                ORDER BY seq DESC LIMIT ?
            )
            SELECT m.seq, m.session_id, m.id, m.role, cand.score
            FROM cand JOIN sessionkit_messages m ON m.seq = cand.seq
            ORDER BY cand.score DESC, m.seq DESC
            LIMIT ?"""
        return [tuple(r) for r in self._q(sql, params)]

    def runs(self, sid):
        rows = self._q(
            """SELECT run_id, session_id, status, error, started_at, ended_at, usage, input
               FROM sessionkit_runs WHERE session_id = ? ORDER BY n""",
            [sid],
        )
        return [RunRecord(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else None, r[7]) for r in rows]

    def records(self, sid, kind):
        return self._q(
            "SELECT n, data FROM sessionkit_records WHERE session_id = ? AND kind = ? ORDER BY n", [sid, kind]
        )

    def events(self, sid, after_seq):
        rows = self._q(
            "SELECT data FROM sessionkit_events WHERE session_id = ? AND seq > ? ORDER BY seq",
            [sid, -1 if after_seq is None else int(after_seq)],
        )
        return [json.loads(r[0]) for r in rows]

    # -- writes -------------------------------------------------------------------
    def _split_content(self, content: str) -> tuple[str, list[str]]:
        head, rest = content[: self._chunk], content[self._chunk :]
        return head, [rest[i : i + self._chunk] for i in range(0, len(rest), self._chunk)]

    def append_simple(self, sid, prep, parent_id, created_at):
        """One plain append, in as few statements as DuckDB allows.

        The parent comes from the cached session tail (``LATEST``) or one key lookup;
        without a search index the insert is a single autocommitted statement that
        also checks the key. Messages with payloads or continuation rows take the
        general path.
        """
        if prep.blobs or len(prep.stored_json) > self._chunk:
            return NotImplemented
        with self._lock:
            if parent_id is None:
                parent = None
            elif isinstance(parent_id, str):
                parent = self.node(sid, parent_id)
                if parent is None:
                    return "exists" if self.node(sid, prep.message["id"]) is not None else "no-parent"
            else:
                parent = self.latest(sid)
            if self.index_built() and _body(prep.text)[0]:
                with self.write():
                    node = self.w_insert(sid, prep, parent, created_at, True)
            else:
                try:
                    node = self.w_insert(sid, prep, parent, created_at, self.index_built())
                except BaseException:
                    self._shared.forget()
                    raise
                if node is not None and self._full and self.path is not None:
                    self._sync_folder()
            return "exists" if node is None else "inserted"

    def w_insert(self, sid, prep, parent, created_at, index):
        head, chunks = self._split_content(prep.stored_json)
        if parent is None:
            depth, pb, pt, pid = 0, prep.bytes, prep.tokens, None
        else:
            depth = parent.depth + 1
            pb = parent.path_bytes + prep.bytes
            pt = parent.path_tokens + prep.tokens
            pid = parent.id
        msg = prep.message
        key = _key(sid, msg["id"])
        length, body = _body(prep.text) if index else (None, "")
        # One statement that inserts only when the key is absent: on DuckDB 2.0 about
        # twice as fast as INSERT ... ON CONFLICT (msg_key) DO NOTHING, with the same
        # effect under the write lock; the UNIQUE constraint still guards the key.
        row = self._one(
            """INSERT INTO sessionkit_messages
               (msg_key, session_id, id, parent_id, depth, role, created_at, bytes, tokens,
                path_bytes, path_tokens, chunks, content, index_len)
               SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
               WHERE NOT EXISTS (SELECT 1 FROM sessionkit_messages WHERE msg_key = ?)
               RETURNING seq""",
            [key, sid, msg["id"], pid, depth, msg["role"], created_at, prep.bytes, prep.tokens,
             pb, pt, len(chunks), head, length, key],
        )
        if row is None:
            return None
        seq = row[0]
        if chunks:
            self._put_chunks([seq] * len(chunks), list(range(len(chunks))), chunks)
        if prep.blobs:
            self._put_blobs([(seq, sha, raw) for sha, raw in prep.blobs.items()])
        if body:
            self._put_terms([seq], [body])
        node = Node(seq, msg["id"], pid, depth, prep.bytes, prep.tokens, pb, pt, created_at, msg["role"])
        self._shared.tails[sid] = node
        return node

    def w_insert_many(self, sid, items, index):
        """Insert a batch of ``(prep, parent_id, created_at)`` with a few statements.

        Same meaning as calling :meth:`w_insert` for each item in order after the
        parent lookups ``Session._insert_one`` does: ``parent_id`` is a message id
        (in the store or earlier in the batch), ``None`` for a root, or ``LATEST``
        for the session's newest message at that point. An id already stored (or
        earlier in the batch) is left alone. An unknown parent raises
        MessageNotFound unless the message itself already exists. Returns
        ``(inserted, seq)`` per item, ``seq`` being the stored row's either way.
        """
        if not items:
            return []
        wanted = {prep.message["id"] for prep, _, _ in items}
        wanted.update(p for _, p, _ in items if isinstance(p, str))
        known = self._nodes_by_id(sid, sorted(wanted))
        latest: Node | None = None
        latest_read = False
        plan: list[tuple] = []  # (prep, new Node) for the rows to insert, in order
        result: list[tuple[bool, int | str]] = []
        for prep, parent_id, created_at in items:
            mid = prep.message["id"]
            if parent_id is LATEST:
                if not latest_read:
                    latest, latest_read = self.latest(sid), True
                parent = latest
            elif parent_id is None:
                parent = None
            else:
                parent = known.get(parent_id)
                if parent is None:
                    if mid in known:
                        result.append((False, mid))
                        continue
                    raise MessageNotFound(f"parent message {parent_id!r} is not in session {sid!r}")
            if mid in known:
                result.append((False, mid))
                continue
            if parent is None:
                depth, pb, pt, pid = 0, prep.bytes, prep.tokens, None
            else:
                depth = parent.depth + 1
                pb, pt, pid = parent.path_bytes + prep.bytes, parent.path_tokens + prep.tokens, parent.id
            # seq is filled in below; -1 marks "new in this batch" until then.
            node = Node(-1, mid, pid, depth, prep.bytes, prep.tokens, pb, pt, created_at, prep.message["role"])
            known[mid] = node
            latest, latest_read = node, True
            plan.append((prep, node))
            result.append((True, mid))
        if plan:
            seqs = sorted(r[0] for r in self._q("SELECT nextval('sessionkit_seq') FROM range(?)", [len(plan)]))
            for (prep, node), seq in zip(plan, seqs):
                known[node.id] = node._replace(seq=seq)
            self._bulk_rows(sid, plan, seqs, index)
            self._shared.tails[sid] = known[plan[-1][1].id]
        return [(ins, known[mid].seq) for ins, mid in result]

    def _bulk_rows(self, sid, plan, seqs, index) -> None:
        chunk_seq, chunk_n, chunk_data = [], [], []
        blobs = []
        for start in range(0, len(plan), _BULK_ROWS):
            cols: list[list] = [[] for _ in range(15)]
            t_seqs, t_bodies = [], []
            for (prep, node), seq in zip(plan[start : start + _BULK_ROWS], seqs[start : start + _BULK_ROWS]):
                head, chunks = self._split_content(prep.stored_json)
                for i, data in enumerate(chunks):
                    chunk_seq.append(seq)
                    chunk_n.append(i)
                    chunk_data.append(data)
                blobs += [(seq, sha, raw) for sha, raw in prep.blobs.items()]
                length = None
                if index:
                    length, body = _body(prep.text)
                    if body:
                        t_seqs.append(seq)
                        t_bodies.append(body)
                row = (seq, _key(sid, node.id), sid, node.id, node.parent_id, node.depth, node.role,
                       node.created_at, node.bytes, node.tokens, node.path_bytes, node.path_tokens,
                       len(chunks), head, length)
                for c, v in zip(cols, row):
                    c.append(v)
            self._run(
                """INSERT INTO sessionkit_messages
                   (seq, msg_key, session_id, id, parent_id, depth, role, created_at, bytes, tokens,
                    path_bytes, path_tokens, chunks, content, index_len)
                   SELECT unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
                          unnest(?::VARCHAR[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
                          unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::BIGINT[]),
                          unnest(?::INTEGER[]), unnest(?::VARCHAR[]), unnest(?::INTEGER[])""",
                cols,
            )
            self._put_terms(t_seqs, t_bodies)
        if chunk_seq:
            self._put_chunks(chunk_seq, chunk_n, chunk_data)
        if blobs:
            self._put_blobs(blobs)

    def _put_chunks(self, seqs, ns, datas) -> None:
        for start in range(0, len(seqs), 64):  # continuation rows are large: few per statement
            end = start + 64
            self._run(
                """INSERT INTO sessionkit_chunks
                   SELECT unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::VARCHAR[])""",
                [seqs[start:end], ns[start:end], datas[start:end]],
            )

    def _put_blobs(self, refs: list[tuple[int, str, bytes]]) -> None:
        """Store payloads once each (insert-or-ignore by SHA-256) and the rows' references."""
        payloads: dict[str, bytes] = {}
        for _, sha, raw in refs:
            payloads.setdefault(sha, raw)
        items = list(payloads.items())
        for start in range(0, len(items), 64):
            part = items[start : start + 64]
            self._run(
                """INSERT INTO sessionkit_blobs
                   SELECT * FROM (SELECT unnest(?::VARCHAR[]) AS sha256, unnest(?::BIGINT[]) AS size,
                                         unnest(?::BLOB[]) AS data) AS b
                   WHERE NOT EXISTS (SELECT 1 FROM sessionkit_blobs x WHERE x.sha256 = b.sha256)""",
                [[s for s, _ in part], [len(r) for _, r in part], [r for _, r in part]],
            )
        pairs = list(dict.fromkeys((seq, sha) for seq, sha, _ in refs))
        for start in range(0, len(pairs), _BULK_ROWS):
            part = pairs[start : start + _BULK_ROWS]
            self._run(
                "INSERT INTO sessionkit_blob_refs SELECT unnest(?::BIGINT[]), unnest(?::VARCHAR[])",
                [[p[0] for p in part], [p[1] for p in part]],
            )

    def _gc_blobs(self, seqs) -> None:
        """Drop the references of ``seqs`` and any payload no longer referenced."""
        if not seqs:
            return
        for part in _split(list(seqs), _BULK_ROWS):
            shas = [r[0] for r in self._q(
                "SELECT DISTINCT sha256 FROM sessionkit_blob_refs WHERE seq IN (SELECT unnest(?::BIGINT[]))", [part]
            )]
            if not shas:
                continue
            self._run("DELETE FROM sessionkit_blob_refs WHERE seq IN (SELECT unnest(?::BIGINT[]))", [part])
            self._run(
                """DELETE FROM sessionkit_blobs WHERE sha256 IN (SELECT unnest(?::VARCHAR[]))
                   AND sha256 NOT IN (SELECT sha256 FROM sessionkit_blob_refs)""",
                [shas],
            )

    def _put_terms(self, seqs: list[int], bodies: list[str], table: str = "sessionkit_terms") -> None:
        """Index ``bodies`` (stems joined by spaces) of the messages ``seqs``."""
        if len(seqs) <= _FEW_DOCS:
            # A few messages: postings built here make a simpler statement, which DuckDB
            # plans about twice as fast as the grouping one below.
            terms, doc_seqs, tfs, positions = [], [], [], []
            for seq, body in zip(seqs, bodies):
                where: dict[str, list[int]] = {}
                for i, word in enumerate(body.split()):
                    where.setdefault(word, []).append(i)
                terms += where
                doc_seqs += [seq] * len(where)
                tfs += [len(p) for p in where.values()]
                positions += where.values()
            if terms:
                self._run(
                    f"""INSERT INTO "{table}" SELECT unnest(?::VARCHAR[]), unnest(?::BIGINT[]),
                        unnest(?::INTEGER[]), unnest(?::INTEGER[][])""",
                    [terms, doc_seqs, tfs, positions],
                )
            return
        # Many messages: one string per message, split and grouped in SQL, is far
        # cheaper than handing DuckDB a Python list per stem.
        for start in range(0, len(seqs), _BULK_ROWS):
            self._run(
                f"""INSERT INTO "{table}"
                    SELECT term, seq, count(*), list(pos ORDER BY pos) FROM (
                        SELECT seq, unnest(words) AS term, unnest(range(len(words)))::INTEGER AS pos
                        FROM (SELECT unnest(?::BIGINT[]) AS seq, string_split(unnest(?::VARCHAR[]), ' ') AS words)
                        WHERE words <> ['']
                    ) GROUP BY term, seq""",
                [seqs[start : start + _BULK_ROWS], bodies[start : start + _BULK_ROWS]],
            )

    def _unindex(self, seqs) -> None:
        for part in _split(list(seqs), _BULK_ROWS):
            self._run("DELETE FROM sessionkit_terms WHERE seq IN (SELECT unnest(?::BIGINT[]))", [part])

    def w_update(self, sid, node, prep, index):
        self._shared.tails.pop(sid, None)  # path totals below this message change
        head, chunks = self._split_content(prep.stored_json)
        d_bytes = prep.bytes - node.bytes
        d_tokens = prep.tokens - node.tokens
        length, body = _body(prep.text) if index else (None, "")
        self._run(
            """UPDATE sessionkit_messages SET role = ?, bytes = ?, tokens = ?, path_bytes = path_bytes + ?,
               path_tokens = path_tokens + ?, chunks = ?, content = ?, index_len = ? WHERE seq = ?""",
            [prep.message["role"], prep.bytes, prep.tokens, d_bytes, d_tokens, len(chunks), head, length,
             node.seq],
        )
        self._run("DELETE FROM sessionkit_chunks WHERE seq = ?", [node.seq])
        if chunks:
            self._put_chunks([node.seq] * len(chunks), list(range(len(chunks))), chunks)
        self._gc_blobs([node.seq])
        if prep.blobs:
            self._put_blobs([(node.seq, sha, raw) for sha, raw in prep.blobs.items()])
        if d_bytes or d_tokens:
            self._run(
                """UPDATE sessionkit_messages SET path_bytes = path_bytes + ?, path_tokens = path_tokens + ?
                   WHERE session_id = ? AND id IN (
                       WITH RECURSIVE down(id) AS (
                           SELECT id FROM sessionkit_messages WHERE session_id = ? AND parent_id = ?
                           UNION ALL
                           SELECT m.id FROM down JOIN sessionkit_messages m
                             ON m.session_id = ? AND m.parent_id = down.id
                       ) SELECT id FROM down)""",
                [d_bytes, d_tokens, sid, sid, node.id, sid],
            )
        if index:
            self._unindex([node.seq])
            if body:
                self._put_terms([node.seq], [body])

    def w_descendants(self, sid, mids):
        rows = self._q(
            f"""WITH RECURSIVE down(id) AS (
                    SELECT unnest(?::VARCHAR[])
                    UNION
                    SELECT m.id FROM down JOIN sessionkit_messages m ON m.session_id = ? AND m.parent_id = down.id
                ) SELECT {_NODE} FROM sessionkit_messages
                  WHERE session_id = ? AND id IN (SELECT id FROM down) ORDER BY seq""",
            [list(mids), sid, sid],
        )
        return [Node(*r) for r in rows]

    def w_delete(self, sid, nodes):
        self._shared.tails.pop(sid, None)
        seqs = [n.seq for n in nodes]
        ids = [n.id for n in nodes]
        self._gc_blobs(seqs)
        self._unindex(seqs)
        for part in _split(seqs, _BULK_ROWS):
            self._run("DELETE FROM sessionkit_chunks WHERE seq IN (SELECT unnest(?::BIGINT[]))", [part])
            self._run("DELETE FROM sessionkit_messages WHERE seq IN (SELECT unnest(?::BIGINT[]))", [part])
        for part in _split(ids, _BULK_ROWS):
            self._run(
                """DELETE FROM sessionkit_compactions WHERE session_id = ?
                   AND (from_id IN (SELECT unnest(?::VARCHAR[])) OR to_id IN (SELECT unnest(?::VARCHAR[])))""",
                [sid, part, part],
            )

    def w_clear(self, sid):
        self._shared.tails.pop(sid, None)
        seqs = [r[0] for r in self._q("SELECT seq FROM sessionkit_messages WHERE session_id = ?", [sid])]
        self._gc_blobs(seqs)
        for table in ("sessionkit_chunks", "sessionkit_terms"):
            self._run(
                f"""DELETE FROM "{table}" WHERE seq IN
                    (SELECT seq FROM sessionkit_messages WHERE session_id = ?)""",
                [sid],
            )
        self._run("DELETE FROM sessionkit_messages WHERE session_id = ?", [sid])
        self._run("DELETE FROM sessionkit_compactions WHERE session_id = ?", [sid])

    def w_delete_session(self, sid):
        self.w_clear(sid)
        self._run("DELETE FROM sessionkit_runs WHERE session_id = ?", [sid])
        self._run("DELETE FROM sessionkit_events WHERE session_id = ?", [sid])
        self._run("DELETE FROM sessionkit_records WHERE session_id = ?", [sid])

    def w_add_compaction(self, sid, comp):
        self._run(
            """INSERT INTO sessionkit_compactions
               (session_id, id, from_id, to_id, summary, created_at, tokens_before, tokens_after)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
            [sid, comp.id, comp.from_id, comp.to_id, comp.summary, comp.created_at,
             comp.tokens_before, comp.tokens_after],
        )

    def w_build_index(self):
        row = self._one("SELECT value FROM sessionkit_meta WHERE key = 'index_built'")
        if row is not None and row[0] == "1":
            self._shared.index_on = True
            return
        # Postings go to a staging table batch by batch, then into the index sorted by
        # term: DuckDB's per-block min/max statistics then let a search skip almost
        # every block that holds none of its stems.
        self._run("DELETE FROM sessionkit_terms")
        self._run("CREATE OR REPLACE TEMP TABLE sessionkit_terms_staging AS SELECT * FROM sessionkit_terms LIMIT 0")
        self._run("CREATE OR REPLACE TEMP TABLE sessionkit_lengths_staging (seq BIGINT, len INTEGER)")
        last = -1
        while True:
            rows = self._q(
                """SELECT seq, content, chunks FROM sessionkit_messages
                   WHERE seq > ? ORDER BY seq LIMIT ?""",
                [last, 2000],
            )
            if not rows:
                break
            last = rows[-1][0]
            long = [seq for seq, _, chunks in rows if chunks]
            full = dict(zip(long, self.contents(long))) if long else {}
            seqs, bodies, lengths = [], [], []
            for seq, content, _ in rows:
                length, body = _body(_msg.message_text(json.loads(full.get(seq, content))))
                seqs.append(seq)
                bodies.append(body)
                lengths.append(length)
            self._put_terms(seqs, bodies, "sessionkit_terms_staging")
            self._run(
                "INSERT INTO sessionkit_lengths_staging SELECT unnest(?::BIGINT[]), unnest(?::INTEGER[])",
                [seqs, lengths],
            )
        self._run("INSERT INTO sessionkit_terms SELECT * FROM sessionkit_terms_staging ORDER BY term, seq")
        self._run(
            """UPDATE sessionkit_messages SET index_len = l.len FROM sessionkit_lengths_staging AS l
               WHERE sessionkit_messages.seq = l.seq"""
        )
        self._run("DROP TABLE sessionkit_terms_staging")
        self._run("DROP TABLE sessionkit_lengths_staging")
        self._run("INSERT OR REPLACE INTO sessionkit_meta VALUES ('index_built', '1')")
        self._shared.index_on = True

    def w_run_begin(self, sid, run_id, input, started_at):
        n = self._one("SELECT coalesce(max(n), 0) + 1 FROM sessionkit_runs WHERE session_id = ?", [sid])[0]
        self._run(
            "INSERT INTO sessionkit_runs (run_id, session_id, status, input, started_at, n) VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, sid, "running", input, started_at, n],
        )

    def w_run_end(self, run_id, status, error, usage, ended_at):
        self._run(
            "UPDATE sessionkit_runs SET status = ?, error = ?, usage = ?, ended_at = ? WHERE run_id = ?",
            [status, error, None if usage is None else _msg.dumps(usage), ended_at, run_id],
        )

    def w_append_events(self, sid, events):
        start = self._one(
            "SELECT coalesce(max(seq), -1) + 1 FROM sessionkit_events WHERE session_id = ?", [sid]
        )[0]
        out = []
        for i, ev in enumerate(events):
            ev["seq"] = start + i
            out.append(ev)
        if out:
            self._run(
                """INSERT INTO sessionkit_events
                   SELECT ?, unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[])""",
                [sid, [ev["seq"] for ev in out], [ev.get("run_id") for ev in out], [_msg.dumps(ev) for ev in out]],
            )
        return out


    def w_put_records(self, sid, kind, items):
        latest = dict(items)  # the last value for a number wins, as with one statement per item
        if latest:
            self._run(
                "INSERT OR REPLACE INTO sessionkit_records SELECT ?, ?, unnest(?::BIGINT[]), unnest(?::VARCHAR[])",
                [sid, kind, list(latest), list(latest.values())],
            )


def _split(items, size):
    for i in range(0, len(items), size):
        yield list(items[i : i + size])
