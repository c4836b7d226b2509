"""PostgreSQL engine: psycopg 3, a connection pool, LISTEN/NOTIFY.

The engine for one store shared by many processes and machines. Tables and their
meaning follow SQLite's engine (``sessionkit_`` prefix, a schema-version row,
continuation rows, payloads by SHA-256 with references, cumulative path columns,
compactions, runs and events, internal records). What PostgreSQL changes:

* **Where.** ``postgresql://user@host/db`` opens the tables in the connection's
  current schema (normally ``public``); ``schema="name"`` or ``?schema=name`` in the
  URL puts them in a schema of their own (created when missing). ``store.path`` is
  the URL without its password (give the password in ``~/.pgpass`` or
  ``PGPASSWORD`` to reopen a store from ``store.path``).
* **Opening.** Creating the tables and migrating them run in one transaction
  under ``pg_advisory_xact_lock``, so any number of processes may open a new or
  old store at once; a store written by a newer schema raises ``SchemaVersionError``.
* **Write order.** ``seq`` is an identity column: a store-wide sequence. Appends
  to one session are serialized by a per-session advisory lock held to the end
  of the transaction, taken before the latest leaf is read, so two writers never
  pick the same parent and a session's ``seq`` order is its commit order.
  Idempotency is ``INSERT ... ON CONFLICT (session_id, id) DO NOTHING``.
* **Fast append.** A plain append (no out-of-row payload, one row) is one
  statement: a call of the PL/pgSQL function ``sessionkit_append`` (installed with
  the tables), which takes the session's lock, reads the latest leaf or the given
  parent and inserts with ``ON CONFLICT (session_id, id) DO NOTHING``, all in one
  round trip and one transaction.
* **Search.** The stems come from :mod:`sessionkit.store.search`, exactly as on
  SQLite, and reach PostgreSQL as ``tsvector``/``tsquery`` literals (lexemes and
  positions, no text search parser or dictionary involved), so stemming and word
  splitting are identical on every engine. A GIN-indexed table, kept current by every
  write of any process once built (``search.py``). PostgreSQL limits apply to
  extremely long messages: positions stop at 16,383 (a phrase further in is not
  found), at most 256 positions are kept per word, and at most about 1 MB of
  distinct words is indexed per message.
* **Change feed.** Every write also sends a ``NOTIFY`` (inside the append's own
  transaction on the fast path, after the commit otherwise), only while some
  process listens; ``store.subscribe`` starts a listener thread that reports the
  writes of *other* processes and machines (each engine tags its notifications
  with an origin id and skips its own). Notifications sent while the listener is
  reconnecting are lost; re-read the session to catch up.
* **Several servers.** For the HTTP server's worker processes the engine also
  offers store-wide *holds* (session-level advisory locks on one connection kept
  for them, so a process that dies gives its holds back), signals between
  processes on the same channel, and a signal after every run-event append, so a
  server process streams events that another one's run writes.
* **Durability.** ``durability="normal"`` keeps the server's
  ``synchronous_commit`` (``on`` unless a DBA changed it: a returned append is on
  the server's disk); ``"full"`` sets ``synchronous_commit = on`` on every
  connection whatever the server default.
* **Text.** PostgreSQL text cannot hold the NUL character: a session id,
  message id or role containing ``"\\x00"`` raises ``InvalidMessage``. (Message
  content is stored as JSON, where NUL is escaped, so it round-trips.)

Options: ``schema``, ``pool_size`` (connections per store, default 8),
``connect_timeout`` (seconds, default 10), ``chunk_chars`` (continuation row size).

The URL and search-literal helpers live in ``text.py``, the search index in ``search.py``, the
listener thread in ``listen.py``, the analysis cache's reads in ``analysis.py``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .... import messages as _msg
from ....errors import InvalidMessage, SessionKitError, StoreClosed, StoreCorrupt, StoreLocked, missing
from ..._schema import DIALECTS, PREPARED_COLUMNS, SCHEMA_VERSION, TABLES
from ..._sql import SQLEngine
from ..._values import Appended, Capabilities, ChangeEvent, Node, _Latest
from .listen import _Listener
from .search import TsvectorIndex
from .text import _parse_url, _shown_url, _split_utf8, _tsvector

if TYPE_CHECKING:
    from .analysis import PostgresSource

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as _exc:  # pragma: no cover - depends on the installation
    raise missing("postgres", "psycopg (with psycopg-pool)", _exc) from _exc

log = logging.getLogger("sessionkit")

__all__ = ["PostgresEngine", "SCHEMA_VERSION"]

#: A NOTIFY payload must stay under 8000 bytes; longer event documents go in pieces.
_NOTE_BYTES = 7800
#: Events whose message JSON is longer than this are sent without it; listeners read it back.
_NOTE_MESSAGE_CHARS = 64 * 1024
#: A listener that has not renewed its row for this long no longer makes writers notify.
_LISTENER_TTL = "5 minutes"


_LISTENING = f"EXISTS (SELECT 1 FROM {{listeners}} WHERE seen_at > now() - interval '{_LISTENER_TTL}')"

# The search index (a tsvector per message, GIN-indexed) and the processes listening
# for changes: PostgreSQL's own tables beside the shared ones.
_EXTRA_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS {search} (
        seq bigint PRIMARY KEY,
        session_id text NOT NULL,
        body tsvector NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS sessionkit_search_body ON {search} USING gin (body)",
    "CREATE INDEX IF NOT EXISTS sessionkit_search_session ON {search} (session_id, seq)",
    """CREATE TABLE IF NOT EXISTS {listeners} (
        origin text PRIMARY KEY,
        seen_at timestamptz NOT NULL DEFAULT now()
    )""",
)

# PostgreSQL's own statements (psycopg placeholders).
_PG_SQL = {
    "size": (
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind = 'r' AND starts_with(c.relname, 'sessionkit_')"
    ),
    "notify": (
        "SELECT count(*) FROM (SELECT pg_notify(%(ch)s, x) FROM unnest(%(notes)s::text[]) AS u(x)"
        " WHERE " + _LISTENING + ") AS n"
    ),
    "listener_register": (
        "INSERT INTO {listeners} (origin) VALUES (%s) ON CONFLICT (origin) DO UPDATE SET seen_at = now()"
    ),
    "listener_expire": "DELETE FROM {listeners} WHERE seen_at < now() - interval '1 hour'",
    "listener_drop": "DELETE FROM {listeners} WHERE origin = %s",
}

# The fast append: one statement, a call of this function, for a plain append. Each
# statement inside a (volatile) PL/pgSQL function reads what committed before it
# started, so once the session's advisory lock is granted, the read of the latest
# leaf sees the previous holder's append: two writers never pick the same parent.
# Returns the new seq; NULL when nothing was written (the id exists, or the named
# parent does not); -1 when the search index was built meanwhile (call again with
# the index entry).
# The prepared columns (_schema.PREPARED_COLUMNS) as the append function's last parameters,
# with their types from the table's declaration.
_PREPARED_TYPES = [(c.name, DIALECTS["postgresql"].types[c.type]) for c in TABLES["messages"].columns if c.prepared]
_P_PARAMS = ", ".join(f"p_{name} {kind}" for name, kind in _PREPARED_TYPES)
_P_COLUMNS = ", ".join(name for name, _ in _PREPARED_TYPES)
_P_VALUES = ", ".join(f"p_{name}" for name, _ in _PREPARED_TYPES)
_P_CALL = ", ".join(f"%({name})s::{kind}" for name, kind in _PREPARED_TYPES)

_APPEND_FUNCTION = (
    """CREATE OR REPLACE FUNCTION {fn_append}(
        p_sid text, p_id text, p_kind text, p_parent_id text, p_role text, p_created text,
        p_bytes bigint, p_tokens bigint, p_content text, p_index tsvector,
        p_index_key bigint, p_session_key bigint, p_channel text, p_notes text[], """
    + _P_PARAMS
    + """
    ) RETURNS bigint LANGUAGE plpgsql AS $sessionkit$
    DECLARE
        new_seq bigint;
        built boolean;
        listening boolean;
        parent text;
        parent_depth integer;
        parent_bytes bigint;
        parent_tokens bigint;
    BEGIN
        IF p_index IS NULL THEN  -- a first search waits for this append, or this append sees its flag
            PERFORM pg_catalog.pg_advisory_xact_lock_shared(p_index_key),
                    pg_catalog.pg_advisory_xact_lock(p_session_key);
        ELSE
            PERFORM pg_catalog.pg_advisory_xact_lock(p_session_key);
        END IF;
        SELECT (SELECT value = '1' FROM {meta} WHERE key = 'index_built'), """
    + _LISTENING
    + """
          INTO built, listening;
        IF built AND p_index IS NULL THEN
            RETURN -1;
        END IF;
        IF p_kind = 'latest' THEN
            SELECT id, depth, path_bytes, path_tokens INTO parent, parent_depth, parent_bytes, parent_tokens
              FROM {messages} WHERE session_id = p_sid ORDER BY seq DESC LIMIT 1;
        ELSIF p_kind = 'parent' THEN
            SELECT id, depth, path_bytes, path_tokens INTO parent, parent_depth, parent_bytes, parent_tokens
              FROM {messages} WHERE session_id = p_sid AND id = p_parent_id;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        INSERT INTO {messages} (session_id, id, parent_id, depth, role, created_at, bytes, tokens,
                                path_bytes, path_tokens, chunks, """
    + _P_COLUMNS
    + """, content)
        VALUES (p_sid, p_id, parent, coalesce(parent_depth + 1, 0), p_role, p_created, p_bytes, p_tokens,
                coalesce(parent_bytes, 0) + p_bytes, coalesce(parent_tokens, 0) + p_tokens, 0, """
    + _P_VALUES
    + """, p_content)
        ON CONFLICT (session_id, id) DO NOTHING
        RETURNING seq INTO new_seq;
        IF new_seq IS NULL THEN  -- the id exists (or, for a named parent, see above)
            RETURN NULL;
        END IF;
        IF p_index IS NOT NULL THEN
            INSERT INTO {search} (seq, session_id, body) VALUES (new_seq, p_sid, p_index);
        END IF;
        IF listening THEN
            PERFORM pg_catalog.pg_notify(p_channel, note) FROM unnest(p_notes) AS note;
        END IF;
        RETURN new_seq;
    END
    $sessionkit$"""
)

_APPEND_CALL = (
    "SELECT {fn_append}(%(sid)s::text, %(id)s::text, %(kind)s::text, %(pid)s::text, %(role)s::text,"
    " %(created)s::text, %(bytes)s::bigint, %(tokens)s::bigint, %(content)s::text, %(index)s::tsvector,"
    " %(index_key)s::bigint, %(session_key)s::bigint, %(ch)s::text, %(notes)s::text[], " + _P_CALL + ")"
)


# ---------------------------------------------------------------------------
# helpers


def _quiet_rollback(conn: psycopg.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection: the pool discards it


class _Tx:
    """The write transaction of one thread: its connection and the locks it holds."""

    __slots__ = ("conn", "depth", "locked", "events_locked", "index_shared", "index_checked")

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.depth = 1
        self.locked: set[str] = set()
        self.events_locked: set[str] = set()
        self.index_shared = False
        self.index_checked: bool | None = None


# ---------------------------------------------------------------------------


class PostgresEngine(SQLEngine):
    """Storage primitives on PostgreSQL (see the module docstring)."""

    kind = "postgresql"
    dialect = DIALECTS["postgresql"]
    driver_errors = (psycopg.Error,)
    capabilities = Capabilities(bulk_insert=False, coordination=True, shared_feed=True)
    EXTRA_SCHEMA = _EXTRA_SCHEMA
    INDEX = TsvectorIndex
    index: TsvectorIndex

    def __init__(
        self,
        url: str,
        *,
        schema: str | None = None,
        pool_size: int = 8,
        connect_timeout: float = 10.0,
        **options: Any,
    ) -> None:
        SQLEngine.__init__(self, **options)  # checks the options; statements follow the schema (_use_schema)
        conninfo, url_schema = _parse_url(url)
        if schema is not None and url_schema is not None and schema != url_schema:
            raise ValueError(f"schema={schema!r} disagrees with the URL's schema={url_schema!r}")
        if schema is None:
            schema = url_schema
        if schema is not None and (
            not isinstance(schema, str) or not schema or "\x00" in schema or len(schema.encode("utf-8")) > 63
        ):
            raise ValueError(f"schema must be a non-empty name of at most 63 bytes, got {schema!r}")
        if schema is not None and "$sessionkit$" in schema:
            raise ValueError(f"schema name {schema!r} may not contain '$sessionkit$'")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ValueError(f"pool_size must be a positive int, got {pool_size!r}")
        self.path = _shown_url(conninfo, schema)
        self._options = options
        self._conninfo = conninfo
        self._connect_timeout = float(connect_timeout)
        self._tls = threading.local()
        self._origin = uuid.uuid4().hex
        self._note_keys = itertools.count()
        self._closed = False
        self._listener: _Listener | None = None
        self._listener_lock = threading.Lock()
        self._signal_handlers: list[Any] = []
        self._holds: set[str] = set()
        self._holds_conn: psycopg.Connection | None = None
        self._holds_lock = threading.Lock()
        self._pool: ConnectionPool = None  # type: ignore[assignment]  # set once _setup has run; close() checks
        self.schema = self._setup(schema)
        self._pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(self._connect_timeout))},
            configure=self._configure,
            name=f"sessionkit-{self._origin[:8]}",
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=self._connect_timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise SessionKitError(f"cannot connect to PostgreSQL store {self.path}: {exc}") from exc

    # -- setup ----------------------------------------------------------------
    def _configure(self, conn: psycopg.Connection) -> None:
        if self.durability == "full":
            conn.execute("SET synchronous_commit = on")

    def _use_schema(self, schema: str) -> None:
        """Compile every statement for the tables in ``schema``."""
        self.schema = schema
        super().__init__(**self._options, table_prefix=self.quote(schema) + ".")
        qs = self.quote(schema) + "."
        self._fields.update(
            search=qs + self.quote("sessionkit_search"),
            listeners=qs + self.quote("sessionkit_listeners"),
            fn_append=qs + self.quote("sessionkit_append"),
        )
        fields = {name: self.table(name) for name in ("meta", "messages", "search", "listeners")}
        fields["fn_append"] = qs + self.quote("sessionkit_append")
        self._extra = {key: text.format(**fields) for key, text in _PG_SQL.items()}
        self._append_function = _APPEND_FUNCTION.format(**fields)
        self._append_call = _APPEND_CALL.format(**fields)
        self.index.compile(fields)
        name = "sessionkit:" + schema
        if len(name.encode("utf-8")) > 63:
            name = "sessionkit:" + hashlib.blake2b(schema.encode("utf-8"), digest_size=16).hexdigest()
        self._channel = name
        self._k_index = self._key("index")

    def _setup(self, schema: str | None) -> str:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=max(1, int(self._connect_timeout)))
        except psycopg.Error as exc:
            raise SessionKitError(f"cannot connect to PostgreSQL store {self.path}: {exc}") from exc
        try:
            with conn:
                if schema is None:
                    schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]  # one row
                    if schema is None:
                        raise ValueError(
                            f"PostgreSQL store {self.path}: the connection's search_path names no existing "
                            "schema; pass schema=... (or ?schema=... in the URL)"
                        )
                self._use_schema(schema)
                self._tls.setup = conn
                try:
                    version = self.schema_version()
                    if version is not None and version > SCHEMA_VERSION:
                        raise self.too_new(version)
                    if version != SCHEMA_VERSION:
                        # One process creates or migrates; the others wait for the lock, then find
                        # the work done. The lock is taken before the transaction begins, so the
                        # transaction reads the catalogs as the previous holder left them.
                        key = self._key("schema")
                        conn.execute("SELECT pg_advisory_lock(%s::bigint)", (key,))
                        try:
                            with conn.transaction():
                                if (
                                    conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
                                    is None
                                ):
                                    conn.execute("CREATE SCHEMA " + self.quote(schema))
                                self.create_or_migrate()
                        finally:
                            conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (key,))
                finally:
                    self._tls.setup = None
        except psycopg.Error as exc:
            raise self.translate(exc) from exc
        return schema

    def after_migrate(self) -> None:
        # The append function's parameters follow the prepared columns: a function of an
        # earlier signature goes (CREATE OR REPLACE would keep it beside the new one).
        for (args,) in self.fetch(
            "SELECT pg_get_function_identity_arguments(p.oid) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s AND p.proname = 'sessionkit_append'",
            (self.schema,),
        ):
            self.execute(f"DROP FUNCTION {self.table('fn_append')}({args})")
        self.execute(self._append_function)

    def table_exists(self, name: str) -> bool:
        return (
            self.fetch_one("SELECT to_regclass(%s)", (f"{self.quote(self.schema)}.{self.quote(name)}",))[0] is not None
        )

    def stored_text(self, text: str | None) -> str | None:
        # PostgreSQL text cannot hold NUL: the analysis column shows U+FFFD in its place
        # (like NUL, not a word character, so search tokens are the same); the message's
        # JSON keeps the NUL.
        return text.replace("\x00", "\ufffd") if text and "\x00" in text else text

    def translate(self, exc: BaseException) -> BaseException:
        text = str(exc).strip()
        if isinstance(exc, psycopg.DataError) and "NUL" in text:
            return InvalidMessage(
                "PostgreSQL cannot store the NUL character (\\x00) in a session id, message id, role "
                f"or other text column: {text}"
            )
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return StoreLocked(f"PostgreSQL store {self.path}: {text}")
        if isinstance(exc, (psycopg.errors.DataCorrupted, psycopg.errors.IndexCorrupted)):
            return StoreCorrupt(f"PostgreSQL store {self.path} is damaged: {text}")
        if isinstance(exc, psycopg.OperationalError):
            return SessionKitError(f"PostgreSQL store {self.path}: {text}")
        return SessionKitError(f"PostgreSQL store {self.path}: {type(exc).__name__}: {text}")

    def _key(self, kind: str, value: str = "") -> int:
        """A 64-bit advisory lock key for ``kind``/``value`` in this store's schema."""
        raw = f"sessionkit\x00{kind}\x00{self.schema}\x00{value}".encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big", signed=True)

    # -- lifecycle ------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_analysis()
        listener = self._listener
        if listener is not None:
            listener.stop()
        with self._holds_lock:
            if self._holds_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._holds_conn.close()  # gives back every hold
                self._holds_conn = None
            self._holds.clear()
        if self._pool is not None:
            self._pool.close()

    # -- connection model -----------------------------------------------------------
    def _cur_tx(self) -> _Tx | None:
        return getattr(self._tls, "tx", None)

    def _tx(self) -> _Tx:
        tx = self._cur_tx()
        if tx is None:
            raise RuntimeError("a w_* method was called outside engine.write()")
        return tx

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """The thread's transaction (or snapshot) connection, or one from the pool."""
        tx = self._cur_tx()
        if tx is not None:
            yield tx.conn
            return
        held = getattr(self._tls, "snap", None) or getattr(self._tls, "setup", None)
        if held is not None:
            yield held
            return
        if self._closed:
            raise StoreClosed("the store is closed")
        with self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[PostgresEngine]:
        tx = self._cur_tx()
        if tx is not None:
            tx.depth += 1
            try:
                yield self
            finally:
                tx.depth -= 1
            return
        if self._closed:
            raise StoreClosed("the store is closed")
        with self.guard():
            conn = self._pool.getconn()
        self._tls.tx = _Tx(conn)
        try:
            try:
                with self.guard():
                    conn.execute("BEGIN")
                yield self
            except BaseException:
                self._tls.tx = None
                _quiet_rollback(conn)
                raise
            self._tls.tx = None
            try:
                with self.guard():
                    conn.execute("COMMIT")
            except BaseException:
                _quiet_rollback(conn)
                raise
        finally:
            self._tls.tx = None
            self._pool.putconn(conn)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[PostgresEngine]:
        if self._cur_tx() is not None or getattr(self._tls, "snap", None) is not None:
            yield self
            return
        if self._closed:
            raise StoreClosed("the store is closed")
        with self.guard(), self._pool.connection() as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            self._tls.snap = conn
            try:
                yield self
            finally:
                self._tls.snap = None
                _quiet_rollback(conn)

    def in_write(self) -> bool:
        return self._cur_tx() is not None

    def visible_state(self) -> str:
        """What the current snapshot sees, as text (``pg_current_snapshot()``: the next
        transaction id and the transactions still running). Two snapshots with the same
        text see the same committed rows, so the analysis cache skips a refresh that would
        find nothing; any write, here or elsewhere on the server, changes it. Read inside
        :meth:`snapshot`."""
        return str(self.fetch_one("SELECT pg_current_snapshot()::text")[0])

    def analysis_source(self) -> PostgresSource:
        """The analysis cache reads this store through COPY, in memory (see ``analysis.py``)."""
        from .analysis import PostgresSource

        return PostgresSource(self)

    def copy_csv(self, sql: str) -> Generator[bytes, None, None]:
        """The rows of ``sql`` (a SELECT without parameters: COPY binds none) as CSV text,
        in chunks of bytes, through ``COPY (...) TO STDOUT``: one statement whose rows
        PostgreSQL writes as one stream, several times faster than fetching them as rows.
        Run on the connection of the current snapshot or transaction, like every read."""
        with self.guard(), self.connection() as conn, conn.cursor() as cur:
            with cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)") as copy:
                for chunk in copy:
                    yield bytes(chunk)

    def before_read(self, sid: str) -> None:
        tx = self._cur_tx()
        if tx is not None:
            self._lock_in(tx, sid)

    def lock_session(self, sid: str) -> None:
        self._lock_in(self._tx(), sid)

    def _lock_in(self, tx: _Tx, sid: str) -> None:
        """Serialize this session's writers until the transaction ends.

        The shared index lock always comes first (it is taken with the session lock),
        so a transaction never waits for it while holding a session lock.
        """
        if sid in tx.locked:
            return
        key = self._key("session", sid)
        with self.guard():
            if self.index.known or tx.index_shared:
                tx.conn.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (key,))
            else:
                tx.conn.execute(
                    "SELECT pg_advisory_xact_lock_shared(%s::bigint), pg_advisory_xact_lock(%s::bigint)",
                    (self._k_index, key),
                )
                tx.index_shared = True
        tx.locked.add(sid)

    def lock_events(self, sid: str) -> None:
        tx = self._tx()
        if sid not in tx.events_locked:
            self.execute("SELECT pg_advisory_xact_lock(%s::bigint)", (self._key("events", sid),))
            tx.events_locked.add(sid)

    def execute_many(self, sql: str, rows: list[Sequence[Any]]) -> None:
        if rows:
            with self.guard(), self.connection() as conn, conn.cursor() as cur:
                cur.executemany(sql, rows)

    # -- reads ------------------------------------------------------------------
    def size_bytes(self) -> int:
        return int(self.fetch_one(self._extra["size"], (self.schema,))[0])

    # -- writes -------------------------------------------------------------------
    def insert_row(
        self, sid: str, prep: _msg.Prepared, node: Node, parent: Node | None, head: str, nchunks: int, index: bool
    ) -> int | None:
        self.lock_session(sid)
        return super().insert_row(sid, prep, node, parent, head, nchunks, index)

    def append_fast(
        self, sid: str, preps: list[_msg.Prepared], parent_id: str | _Latest | None, stamps: list[str]
    ) -> Appended:
        """One plain message (no payloads, no continuation rows) in one statement; a
        chain takes the batch insert."""
        if len(preps) != 1:
            return Appended.UNSUPPORTED
        prep, created_at = preps[0], stamps[0]
        if prep.blobs or len(prep.stored_json) > self._chunk or self._cur_tx() is not None:
            return Appended.UNSUPPORTED
        kind = "root" if parent_id is None else ("parent" if isinstance(parent_id, str) else "latest")
        params = {
            "sid": sid,
            "id": prep.id,
            "kind": kind,
            "pid": parent_id if kind == "parent" else None,
            "role": prep.role,
            "created": created_at,
            "bytes": prep.bytes,
            "tokens": prep.tokens,
            "content": prep.stored_json,
            "index": None,
            "index_key": self._k_index,
            "session_key": self._key("session", sid),
            "ch": self._channel,
            "notes": self._notes(self._append_doc(sid, prep.id, prep.stored_json)),
            **dict(zip(PREPARED_COLUMNS, self.prepared_values(prep))),
        }
        seq = None
        for _ in range(2):
            if self.index.known:
                params["index"] = _tsvector(prep.text)
            seq = self.fetch_one(self._append_call, params)[0]  # one statement: its own transaction
            if seq != -1:
                break
            self.index.known = True  # another process built the search index meanwhile
        if seq is not None and seq > 0:
            self._tls.published = (sid, prep.id)
            return Appended.INSERTED
        if self.node(sid, prep.id) is not None:
            return Appended.EXISTS
        return Appended.NO_PARENT if kind == "parent" else Appended.UNSUPPORTED

    def w_append_events(self, sid: str, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = super().w_append_events(sid, events)
        if out:  # other processes' servers stream this session's events too (delivered at commit)
            self.execute(
                self._extra["notify"],
                {"ch": self._channel, "notes": self._notes(self._signal_doc(sid, "events", out[-1]["seq"]))},
            )
        return out

    # -- what several server processes on one store share ----------------------------
    #: Several processes may serve this store at once (the HTTP server coordinates them).
    shared = True

    def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` unless any process (this one too) has it.

        Holds are PostgreSQL session-level advisory locks on one connection kept for
        them, so a process that dies (or loses that connection) gives its holds back.
        """
        with self._holds_lock:
            if name in self._holds:
                return False  # not re-entrant: a hold excludes this process's other tasks too
            if self._closed:
                raise SessionKitError(f"store {self.path} is closed")
            try:
                conn = self._holds_conn
                if conn is None or conn.closed:
                    self._holds.clear()  # a new connection holds nothing yet
                    conn = self._holds_conn = psycopg.connect(
                        self._conninfo, autocommit=True, connect_timeout=max(1, int(self._connect_timeout))
                    )
                got = conn.execute(  # type: ignore[index]  # one row
                    "SELECT pg_try_advisory_lock(%s::bigint)", (self._key("hold", name),)
                ).fetchone()[0]
            except psycopg.Error as exc:
                self._drop_holds_conn()
                raise self.translate(exc) from exc
            if got:
                self._holds.add(name)
            return bool(got)

    def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now (read from ``pg_locks``, nothing taken)."""
        key = self._key("hold", name) & 0xFFFFFFFFFFFFFFFF
        row = self.fetch_one(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 1)",
            (key >> 32, key & 0xFFFFFFFF),
        )
        return bool(row[0])

    def release_hold(self, name: str) -> None:
        """Give back a hold taken with :meth:`try_hold` (nothing when not held)."""
        with self._holds_lock:
            if name not in self._holds:
                return
            self._holds.discard(name)
            conn = self._holds_conn
            if conn is None or conn.closed:
                return
            try:
                conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (self._key("hold", name),))
            except psycopg.Error as exc:  # the connection is gone, and its holds with it
                log.warning("sessionkit: could not give back hold %r on %s: %s", name, self.path, exc)
                self._drop_holds_conn()

    def _drop_holds_conn(self) -> None:
        conn, self._holds_conn = self._holds_conn, None
        self._holds.clear()
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    @staticmethod
    def _signal_doc(sid: str, kind: str, data: Any) -> str:
        return json.dumps({"t": "signal", "s": sid, "k": kind, "d": data})

    def signal(self, sid: str, kind: str, data: Any = None) -> None:
        """Tell other processes' ``on_signal`` handlers ``(sid, kind, data)`` (not this process's)."""
        if self._closed:
            return
        params = {"ch": self._channel, "notes": self._notes(self._signal_doc(sid, kind, data))}
        try:
            with self._pool.connection() as conn:
                conn.execute(self._extra["notify"], params)
        except psycopg.Error as exc:
            log.warning("sessionkit: could not signal %s for session %r to other processes: %s", kind, sid, exc)

    def on_signal(self, handler: Callable[[str, str, Any], Any]) -> None:
        """Call ``handler(sid, kind, data)`` (from the listener thread) for other processes' signals."""
        self._signal_handlers.append(handler)

    # -- change feed across processes ---------------------------------------------------
    def _notes(self, doc: str) -> list[str]:
        """NOTIFY payloads for one event document: ``origin|key|index|count|piece``."""
        key = next(self._note_keys)
        pieces = _split_utf8(doc, _NOTE_BYTES - 80)
        n = len(pieces)
        return [f"{self._origin}|{key}|{i}|{n}|{piece}" for i, piece in enumerate(pieces)]

    @staticmethod
    def _append_doc(sid: str, mid: str, stored_json: str) -> str:
        head = '{"t":"append","s":' + json.dumps(sid) + ',"i":[' + json.dumps(mid) + "]"
        if len(stored_json) > _NOTE_MESSAGE_CHARS:
            return head + ',"f":1,"m":null}'
        return head + ',"m":' + stored_json + "}"

    @staticmethod
    def _event_doc(event: ChangeEvent) -> str:
        doc: dict[str, Any] = {"t": event.type, "s": event.session_id, "i": list(event.message_ids)}
        message = event.message
        body = "null" if message is None else _msg.dumps(message)
        if len(body) > _NOTE_MESSAGE_CHARS:
            doc["f"] = 1  # too long to send: the listener reads it back
            body = _msg.dumps(dict(message, parts=[])) if event.type == "compact" and message is not None else "null"
        return json.dumps(doc)[:-1] + ',"m":' + body + "}"

    def publish(self, event: ChangeEvent) -> None:
        """Tell listening processes about a write of this process (called after it committed)."""
        mark = getattr(self._tls, "published", None)
        if mark is not None:
            self._tls.published = None
            if event.type == "append" and event.message_ids and mark == (event.session_id, event.message_ids[0]):
                return  # the fast append sent it inside its own transaction
        if self._closed:
            return
        params = {"ch": self._channel, "notes": self._notes(self._event_doc(event))}
        try:
            tx = self._cur_tx()
            if tx is not None:
                tx.conn.execute(self._extra["notify"], params)
                return
            with self._pool.connection() as conn:
                try:
                    with conn.pipeline():
                        conn.execute("BEGIN")
                        # a lost notification costs less than waiting for a disk flush
                        conn.execute("SET LOCAL synchronous_commit = off")
                        conn.execute(self._extra["notify"], params)
                        conn.execute("COMMIT")
                except BaseException:
                    _quiet_rollback(conn)
                    raise
        except psycopg.Error as exc:
            log.warning(
                "sessionkit: could not notify other processes of a %s in session %r: %s",
                event.type,
                event.session_id,
                exc,
            )

    def start_listener(self, callback: Callable[[ChangeEvent], Any]) -> None:
        """Report writes made by other processes to ``callback(ChangeEvent)`` (from a thread).

        Returns once the listener is connected (or after ``connect_timeout``, with a
        warning; it keeps trying in the background). Idempotent.
        """
        with self._listener_lock:
            if self._listener is not None or self._closed:
                return
            self._listener = listener = _Listener(self, callback)
            listener.start()
        if not listener.ready.wait(self._connect_timeout):
            log.warning("sessionkit: the change feed of %s is not connected yet; still trying", self.path)

    def _event_from(self, data: dict[str, Any]) -> ChangeEvent:
        kind, sid, ids, message = data["t"], data["s"], tuple(data["i"]), data.get("m")
        if data.get("f"):
            try:
                if kind in ("append", "update") and ids:
                    node = self.node(sid, ids[0])
                    raw = None if node is None else self.contents([node.seq])[0]  # (None: deleted meanwhile)
                    message = None if raw is None else _msg.restore(raw, self.blob)
                elif kind == "compact" and isinstance(message, dict):
                    cid = message["metadata"]["compaction"]["id"]
                    summary = next((c.summary for _, c in self.compactions(sid) if c.id == cid), "")
                    message["parts"] = [{"type": "text", "text": summary}]
            except (SessionKitError, LookupError, KeyError, TypeError):
                message = None
        return ChangeEvent(kind, sid, ids, message)
