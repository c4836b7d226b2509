"""The ground floor of the engine base: statements compiled per dialect, the boundary every
statement crosses (driver errors mapped there), and the schema: creating the tables or
bringing an older store up to :data:`~._schema.SCHEMA_VERSION`. :class:`~._sql.SQLEngine`
builds the storage operations on it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .. import messages as _msg
from ..errors import InvalidMessage, SchemaVersionError, SessionKitError, StoreCorrupt
from ._engine import Engine
from ._index import SearchIndex
from ._labels import LabelSQL
from ._schema import (
    DEFAULT_CHUNK_CHARS,
    INSERT_COLUMNS,
    MIGRATIONS,
    NODE_COLUMNS,
    PREPARED_COLUMNS,
    SCHEMA_VERSION,
    TABLES,
    Dialect,
    Index,
    Table,
)

__all__ = ["SQLBase", "STATEMENTS", "Params"]

#: Parameters of a statement: positional, or named (``%(name)s`` on PostgreSQL).
Params = Sequence[Any] | Mapping[str, Any]

#: Rows a fetch_columns call takes from its cursor at a time.
_COLUMN_ROWS = 256


# ---------------------------------------------------------------------------
# Statements shared by every engine (an engine overrides one by defining it in its
# own ``STATEMENTS``).

STATEMENTS: dict[str, str] = {
    "node": "SELECT {node} FROM {messages} WHERE session_id = ? AND id = ?",
    "node_at": "SELECT {node} FROM {messages} WHERE seq = ?",
    "latest": "SELECT {node} FROM {messages} WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
    "children": "SELECT {node} FROM {messages} WHERE session_id = ? AND parent_id = ? ORDER BY seq",
    "nodes": "SELECT {node} FROM {messages} WHERE session_id = ? ORDER BY seq",
    "nodes_by_id": "SELECT {node} FROM {messages} WHERE session_id = ? AND id {in_ids}",
    # The rows of one session from a seq down, newest first (a path's contiguous runs).
    "scan_down": "SELECT {node} FROM {messages} WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT ?",
    "scan_down_content": (
        "SELECT {node}, chunks, {row_content} FROM {messages}"
        " WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT ?"
    ),
    "scan_down_lean": (
        "SELECT seq, id, parent_id, chunks, {row_content}, created_at FROM {messages}"
        " WHERE session_id = ? AND seq <= ? ORDER BY seq DESC LIMIT ?"
    ),
    # A run of a path (every row of the session between two seqs), oldest first.
    "rows_between": (
        "SELECT seq, depth, chunks, {row_content}, created_at FROM {messages}"
        " WHERE session_id = ? AND seq >= ? AND seq <= ? ORDER BY seq LIMIT ?"
    ),
    "newest_lean": (
        "SELECT seq, id, parent_id, bytes, depth, path_bytes, chunks, {row_content}, created_at FROM {messages}"
        " WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?"
    ),
    "contents": "SELECT seq, chunks, {row_content}, created_at FROM {messages} WHERE seq {in_seqs}",
    "chunks_of": "SELECT seq, data FROM {chunks} WHERE seq {in_seqs} ORDER BY seq, n",
    "blob": "SELECT data FROM {blobs} WHERE sha256 = ?",
    "count": "SELECT count(*) FROM {messages} WHERE session_id = ?",
    "sessions_holding": "SELECT DISTINCT session_id FROM {messages} WHERE session_id {in_ids}",
    "list_sessions": (
        "SELECT session_id, count(*), min(created_at), max(created_at) FROM {messages}"
        " GROUP BY session_id ORDER BY max(seq) DESC"
    ),
    "session_exists": (
        "SELECT EXISTS (SELECT 1 FROM {messages} WHERE session_id = ?)"
        " OR EXISTS (SELECT 1 FROM {runs} WHERE session_id = ?)"
        " OR EXISTS (SELECT 1 FROM {events} WHERE session_id = ?)"
        " OR EXISTS (SELECT 1 FROM {compactions} WHERE session_id = ?)"
        " OR EXISTS (SELECT 1 FROM {records} WHERE session_id = ?)"
    ),
    "compactions": (
        "SELECT seq, id, from_id, to_id, summary, created_at, tokens_before, tokens_after"
        " FROM {compactions} WHERE session_id = ? ORDER BY seq"
    ),
    "has_compactions": "SELECT 1 FROM {compactions} WHERE session_id = ? LIMIT 1",
    "counts": (
        "SELECT (SELECT count(DISTINCT session_id) FROM {messages}), (SELECT count(*) FROM {messages}),"
        " (SELECT count(*) FROM {compactions}), (SELECT count(*) FROM {blobs}),"
        " (SELECT coalesce(sum(size), 0) FROM {blobs}), (SELECT count(*) FROM {runs}),"
        " (SELECT count(*) FROM {events})"
    ),
    "runs": (
        "SELECT run_id, session_id, status, error, started_at, ended_at, usage, input, meta"
        " FROM {runs} WHERE session_id = ? ORDER BY n"
    ),
    "events": "SELECT data FROM {events} WHERE session_id = ? AND seq > ? ORDER BY seq",
    "records": "SELECT n, data FROM {records} WHERE session_id = ? AND kind = ? ORDER BY n",
    "meta_get": "SELECT value FROM {meta} WHERE key = ?",
    "meta_put": "INSERT INTO {meta} (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    "ledger_put": (
        "INSERT INTO {migrations} (version, note, applied_at) VALUES (?, ?, ?) ON CONFLICT (version) DO NOTHING"
    ),
    "ledger": "SELECT version, note, applied_at FROM {migrations} ORDER BY version",
    # writes
    "insert": (
        "INSERT INTO {messages} (" + ", ".join(INSERT_COLUMNS) + ")"
        " VALUES (" + ", ".join("?" * len(INSERT_COLUMNS)) + ")"
        " ON CONFLICT (session_id, id) DO NOTHING RETURNING seq"
    ),
    "delete_chunks": "DELETE FROM {chunks} WHERE seq {in_seqs}",
    "blobs_present": "SELECT sha256 FROM {blobs} WHERE sha256 {in_shas} ORDER BY sha256{lock_share}",
    "blob_refs_of": "SELECT DISTINCT sha256 FROM {blob_refs} WHERE seq {in_seqs} ORDER BY sha256",
    "blob_refs_drop": "DELETE FROM {blob_refs} WHERE seq {in_seqs}",
    "blobs_lock": "SELECT sha256 FROM {blobs} WHERE sha256 {in_shas} ORDER BY sha256{lock_update}",
    "blobs_gc": (
        "DELETE FROM {blobs} WHERE sha256 {in_shas}"
        " AND NOT EXISTS (SELECT 1 FROM {blob_refs} r WHERE r.sha256 = {blobs}.sha256)"
    ),
    "update": (
        "UPDATE {messages} SET role = ?, bytes = ?, tokens = ?, path_bytes = path_bytes + ?,"
        " path_tokens = path_tokens + ?, chunks = ?, "
        + "".join(f"{c} = ?, " for c in PREPARED_COLUMNS)
        + "content = ? WHERE seq = ?"
    ),
    "fill_source": "SELECT seq, chunks, {row_content} FROM {messages} WHERE seq > ? ORDER BY seq LIMIT ?",
    "fill_analysis": "UPDATE {messages} SET text = ?, n_parts = ?, tool_names = ?, metadata = ? WHERE seq = ?",
    "log_change": "INSERT INTO {changes} (session_id, kind, seq) VALUES (?, ?, ?)",
    "run_session": "SELECT session_id FROM {runs} WHERE run_id = ?",
    "shift_paths": (
        "UPDATE {messages} SET path_bytes = path_bytes + ?, path_tokens = path_tokens + ? WHERE seq {in_seqs}"
    ),
    "descendants": (
        "WITH RECURSIVE down(id) AS ("
        " {texts_rows}"
        " UNION"
        " SELECT m.id FROM down JOIN {messages} m ON m.session_id = ? AND m.parent_id = down.id"
        ") SELECT {node} FROM {messages} WHERE session_id = ? AND id IN (SELECT id FROM down) ORDER BY seq"
    ),
    "delete_messages": "DELETE FROM {messages} WHERE seq {in_seqs}",
    "delete_embeddings_of": "DELETE FROM {embeddings} WHERE seq {in_seqs}",
    "delete_compactions_of": (
        "DELETE FROM {compactions} WHERE session_id = ? AND (from_id {in_ids} OR to_id {in_ids})"
    ),
    "session_seqs": "SELECT seq FROM {messages} WHERE session_id = ?",
    "clear_messages": "DELETE FROM {messages} WHERE session_id = ?",
    "clear_embeddings": "DELETE FROM {embeddings} WHERE session_id = ?",
    "clear_compactions": "DELETE FROM {compactions} WHERE session_id = ?",
    "clear_runs": "DELETE FROM {runs} WHERE session_id = ?",
    "clear_events": "DELETE FROM {events} WHERE session_id = ?",
    "clear_records": "DELETE FROM {records} WHERE session_id = ?",
    "delete_labels_of": "DELETE FROM {labels} WHERE session_id = ? AND message_id {in_ids}",
    "clear_labels": "DELETE FROM {labels} WHERE session_id = ?",
    "add_compaction": (
        "INSERT INTO {compactions} (session_id, id, from_id, to_id, summary, created_at,"
        " tokens_before, tokens_after) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    ),
    "run_begin": (
        "INSERT INTO {runs} (run_id, session_id, status, input, started_at, meta, n)"
        " SELECT ?, ?, 'running', ?, ?, ?, coalesce(max(n), 0) + 1 FROM {runs} WHERE session_id = ?"
    ),
    "run_end": "UPDATE {runs} SET status = ?, error = ?, usage = ?, ended_at = ? WHERE run_id = ?",
    "events_next": "SELECT coalesce(max(seq), -1) + 1 FROM {events} WHERE session_id = ?",
    "index_source": "SELECT seq, session_id, {row_text} FROM {messages} WHERE seq > ? ORDER BY seq LIMIT ?",
    # store-wide scans, a page at a time (keyset: after the last row of the page before)
    "scan_sessions": "SELECT session_id FROM {messages} GROUP BY session_id ORDER BY max(seq) DESC",
    "scan_side_sessions": (
        "SELECT session_id FROM {runs} UNION SELECT session_id FROM {events}"
        " UNION SELECT session_id FROM {compactions} UNION SELECT session_id FROM {records}"
        " ORDER BY 1"
    ),
    "scan_nodes": "SELECT session_id, {node} FROM {messages} WHERE seq > ? ORDER BY seq LIMIT ?",
    "scan_compactions": (
        "SELECT session_id, seq, id, from_id, to_id, summary, created_at, tokens_before,"
        " tokens_after FROM {compactions} WHERE seq > ? ORDER BY seq LIMIT ?"
    ),
    "scan_runs": (
        "SELECT run_id, session_id, status, error, started_at, ended_at, usage, input, n, meta FROM {runs}"
        " WHERE session_id > ? OR (session_id = ? AND n > ?) ORDER BY session_id, n LIMIT ?"
    ),
    "scan_events": (
        "SELECT session_id, seq, data FROM {events}"
        " WHERE session_id > ? OR (session_id = ? AND seq > ?) ORDER BY session_id, seq LIMIT ?"
    ),
}

_FIELD = re.compile(r"\{(\w+)\}")


class _Statements(dict[str, str]):
    """Compiled statements by name; a missing one is a bug, reported as such."""

    def __missing__(self, key: str) -> str:
        raise KeyError(f"no SQL statement named {key!r}")


# ---------------------------------------------------------------------------


class SQLBase(LabelSQL, Engine):
    """Statements, the boundary and the schema of an engine over a DB-API driver (see
    :class:`~._sql.SQLEngine`, which the engines subclass)."""

    dialect: Dialect
    #: The driver's exception types; each is mapped by :meth:`translate` where it is raised.
    driver_errors: tuple[type[BaseException], ...] = ()
    #: Engine-specific statements (overriding or adding to :data:`STATEMENTS`).
    STATEMENTS: dict[str, str] = {}
    #: Statements the engine's schema adds after the shared tables (search index, functions).
    EXTRA_SCHEMA: tuple[str, ...] = ()
    #: Whether one call of the driver's execute() may carry several statements (without
    #: parameters): :meth:`execute_script` then sends a script in one call.
    SCRIPTS = False
    #: The engine's search index (made with the engine, as :attr:`index`).
    INDEX: type[SearchIndex] = SearchIndex

    def __init__(
        self,
        *,
        durability: str = "normal",
        chunk_chars: int | None = None,
        table_prefix: str = "",
        sql_memory_limit: str | None = None,
    ):
        from .sql.query import memory_limit  # (no DuckDB import: that comes with the first query)

        #: The memory ceiling of ``store.sql`` (a DuckDB size, e.g. ``"1GB"``), or None: DuckDB's own.
        self.sql_memory_limit = memory_limit(sql_memory_limit)
        if durability not in ("normal", "full"):
            raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
        self.durability = durability
        chunk = DEFAULT_CHUNK_CHARS if chunk_chars is None else chunk_chars
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
            raise ValueError(f"chunk_chars must be a positive int, got {chunk_chars!r}")
        self._chunk = chunk
        self._fields = {name: table_prefix + self.quote("sessionkit_" + name) for name in TABLES}
        self.sql = self.compile_all()
        self.index: SearchIndex = self.INDEX(self)
        self._inserts: dict[tuple[str, str], str] = {}
        self._analysis: Any = None
        self._analysis_setup = threading.Lock()
        from .sql.query import Runs  # (no DuckDB import: that comes with the first query)

        self._analysis_runs = Runs()

    # -- SQL text ---------------------------------------------------------------
    @staticmethod
    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def template_fields(self) -> dict[str, str]:
        d = self.dialect
        fields = dict(self._fields)
        fields.update(
            node=", ".join(NODE_COLUMNS),
            m_node=", ".join("m." + c for c in NODE_COLUMNS),
            in_seqs=d.in_ints,
            in_ids=d.in_texts,
            in_shas=d.in_texts,
            lock_share=d.lock_share,
            lock_update=d.lock_update,
            ints_rows=d.ints_rows,
            texts_rows=d.texts_rows,
            t_text=d.types["text"],
            m_text=d.message_text.format(t="m"),
            row_text=d.message_text.format(t=fields["messages"]),
            row_content=d.message_content.format(t=fields["messages"]),
            t_int=d.types["int"],
        )
        return fields

    def compile_all(self) -> _Statements:
        fields = self.template_fields()
        out = _Statements()
        for name, text in {**STATEMENTS, **self.STATEMENTS}.items():
            out[name] = self.dialect.compile(text, fields)
        return out

    def compile(self, template: str) -> str:
        """One statement written like :data:`STATEMENTS`, compiled for this engine."""
        return self.dialect.compile(template, self.template_fields())

    def listed(self, values: Iterable[Any]) -> Any:
        """The parameter for an ``{in_seqs}``/``{in_ids}`` fragment."""
        return list(values)

    def table(self, name: str) -> str:
        """A table's name as statements must write it."""
        return self._fields[name]

    # -- connection model (engine) ------------------------------------------------
    def connection(self) -> contextlib.AbstractContextManager[Any]:
        """The connection statements run on now: the write transaction's, when this
        thread is inside :meth:`write`, else one for this read."""
        raise NotImplementedError

    def snapshot(self) -> contextlib.AbstractContextManager[Any]:
        """Reads inside see one state of the store (several statements, one answer)."""
        return contextlib.nullcontext()

    def in_write(self) -> bool:
        """Whether this thread is inside a write transaction of this engine (its reads
        then see writes that may still be rolled back)."""
        return False

    def visible_state(self) -> str | None:
        """Text naming what the current snapshot sees (equal texts: the same committed rows),
        or None where the engine cannot say (then the analysis cache checks for changes)."""
        return None

    def translate(self, exc: BaseException) -> BaseException:
        """A driver error as a sessionkit error (raised ``from`` the original)."""
        return SessionKitError(f"{self.kind} store {self.path or ':memory:'}: {exc}")

    def table_exists(self, name: str) -> bool:
        raise NotImplementedError

    # -- the boundary: every statement runs through these ----------------------------
    def guard(self) -> contextlib.AbstractContextManager[None]:
        """Map the driver's errors to sessionkit's at the boundary (one place per driver)."""
        return _Guard(self)

    def fetch(self, sql: str, params: Params = ()) -> list[Any]:
        with self.guard(), self.connection() as conn:
            return conn.execute(sql, params).fetchall()

    def fetch_columns(self, sql: str, params: Params = (), width: int = 0) -> list[list[Any]]:
        """The statement's rows as a list per column (``width`` columns), read a few hundred
        rows at a time. A read of many rows then keeps no tuple per row alive: tuples held
        past the collector's next pass are moved to its older generations, and a process
        holding many objects pays a full collection more often for them."""
        with self.guard(), self.connection() as conn:
            cursor = conn.execute(sql, params)
            columns: list[list[Any]] = [[] for _ in range(width)]
            while rows := cursor.fetchmany(_COLUMN_ROWS):
                for column, values in zip(columns, zip(*rows)):
                    column += values
            return columns

    def fetch_one(self, sql: str, params: Params = ()) -> Any:
        with self.guard(), self.connection() as conn:
            return conn.execute(sql, params).fetchone()

    def execute(self, sql: str, params: Params = ()) -> None:
        with self.guard(), self.connection() as conn:
            conn.execute(sql, params)

    def execute_many(self, sql: str, rows: list[Sequence[Any]]) -> None:
        if not rows:
            return
        with self.guard(), self.connection() as conn:
            conn.executemany(sql, rows)

    def insert_rows(self, table: str, rows: Sequence[Sequence[Any]], conflict: str = "") -> None:
        """Insert whole rows (every column of ``table``, in :data:`TABLES` order), with
        an optional ``ON CONFLICT`` clause."""
        if not rows:
            return
        key = (table, conflict)
        sql = self._inserts.get(key)
        if sql is None:
            cols = TABLES[table].column_names(self.dialect.name)
            sql = self._inserts[key] = self.compile(
                f"INSERT INTO {{{table}}} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) {conflict}"
            )
        self.execute_many(sql, rows if isinstance(rows, list) else list(rows))

    def insert_columns(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert rows of the named ``columns`` of ``table`` (the others take their defaults):
        one statement per row here; an engine may batch them (DuckDB does)."""
        if not rows:
            return
        key = (table, "(" + ", ".join(columns) + ")")
        sql = self._inserts.get(key)
        if sql is None:
            sql = self._inserts[key] = self.compile(
                f"INSERT INTO {{{table}}} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
            )
        self.execute_many(sql, rows if isinstance(rows, list) else list(rows))

    # -- schema and the ledger ----------------------------------------------------
    def execute_script(self, statements: Sequence[str]) -> None:
        """Run statements without parameters, in order: in one call where the engine takes
        several at once (:attr:`SCRIPTS`). A new store is some forty statements, and DuckDB
        spends about a millisecond on each call, PostgreSQL a round trip."""
        if self.SCRIPTS:
            if statements:
                self.execute(";\n".join(statements))
            return
        for stmt in statements:
            self.execute(stmt)

    def insert_values(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows`` of the named ``columns`` as one statement of many ``VALUES``
        (a prepared statement a row costs DuckDB about a millisecond each)."""
        if not rows:
            return
        one = "(" + ", ".join("?" * len(columns)) + ")"
        self.execute(
            self.compile(f"INSERT INTO {{{table}}} ({', '.join(columns)}) VALUES {', '.join([one] * len(rows))}"),
            [value for row in rows for value in row],
        )

    def table_statements(self, table: Table) -> list[str]:
        """What creates ``table`` with its indexes on this engine (nothing where it has no such table)."""
        if self.dialect.name not in table.only:
            return []
        out = [self.compile(stmt) for stmt in self.dialect.before_table.get(table.name, ())]
        out.append(self.dialect.table_sql(table, self.table(table.name)))
        out += [self.index_sql(index, table) for index in table.indexes if self.dialect.name in index.only]
        return out

    def create_table(self, table: Table) -> None:
        self.execute_script(self.table_statements(table))

    def index_sql(self, index: Index, table: Table) -> str:
        unique = "UNIQUE " if index.unique else ""
        where = f" WHERE {index.where}" if index.where else ""
        return (
            f"CREATE {unique}INDEX IF NOT EXISTS {self.quote(index.name)} ON {self.table(table.name)}"
            f" ({index.columns}){where}"
        )

    def schema_version(self) -> int | None:
        """The stored schema version; None when no store is there yet."""
        if not self.table_exists("sessionkit_meta"):
            return None
        row = self.fetch_one(self.sql["meta_get"], ("schema_version",))
        if row is None:
            raise StoreCorrupt(f"store {self.path or ':memory:'}: sessionkit_meta has no schema_version row")
        try:
            version = int(row[0])
        except (TypeError, ValueError):
            raise StoreCorrupt(
                f"store {self.path or ':memory:'}: the schema version {row[0]!r} is not a number"
            ) from None
        if version < 1:
            raise StoreCorrupt(f"store {self.path or ':memory:'}: the schema version {version} is not valid")
        return version

    def too_new(self, version: int) -> SchemaVersionError:
        return SchemaVersionError(
            f"store {self.path or ':memory:'} has schema version {version}; this sessionkit reads up to "
            f"{SCHEMA_VERSION}: upgrade sessionkit"
        )

    def create_or_migrate(self) -> None:
        """Create the tables, or bring an older store up to :data:`SCHEMA_VERSION`.

        Runs inside the engine's opening transaction (and its lock, where several
        processes may open a store at once)."""
        version = self.schema_version()
        if version == SCHEMA_VERSION:
            return
        if version is not None and version > SCHEMA_VERSION:
            raise self.too_new(version)
        now = _msg.now_iso()
        if version is None:
            statements = [stmt for table in TABLES.values() for stmt in self.table_statements(table)]
            self.execute_script(statements + [self.compile(stmt) for stmt in self.EXTRA_SCHEMA])
            # Who this store is (store_id): a store made again in the same place (same path,
            # same ids) is another store, and what was derived from the old one (the analysis
            # cache file beside it) must not be believed for it.
            meta = [("schema_version", str(SCHEMA_VERSION)), ("index_built", "0"), ("store_id", uuid.uuid4().hex)]
            self.insert_values("meta", ("key", "value"), meta)
            ledger = [(1, "tables created", now), *((m.version, m.note, now) for m in MIGRATIONS)]
            self.insert_values("migrations", ("version", "note", "applied_at"), ledger)
        else:
            for m in MIGRATIONS:
                if m.version <= version:
                    continue
                for step in m.steps_for(self.dialect.name):
                    if isinstance(step, str):
                        self.execute(self.compile(step))
                    else:
                        step(self)
                if m.version >= 5:  # the ledger exists from version 5 on
                    self.execute(self.sql["ledger_put"], (m.version, m.note, now))
            self.execute(self.sql["meta_put"], ("schema_version", str(SCHEMA_VERSION)))
        self.after_migrate()

    def after_migrate(self) -> None:
        """Engine work after the tables were created or upgraded (e.g. stored functions)."""

    def upgrade_to_3(self) -> None:  # SQLite only (see engines/sqlite/engine.py)
        raise NotImplementedError

    def ledger(self) -> list[tuple[int, str, str]]:
        """``(version, note, applied_at)`` of every migration recorded in this store."""
        return [tuple(r) for r in self.fetch(self.sql["ledger"])]

    def meta(self, key: str) -> str | None:
        row = self.fetch_one(self.sql["meta_get"], (key,))
        return None if row is None else row[0]


class _Guard(contextlib.AbstractContextManager[None]):
    """:meth:`SQLBase.guard`, written out as a class: every statement passes through it,
    and a generator's context manager costs it about 1.4 us more (a tenth of a search
    that finds nothing)."""

    __slots__ = ("engine",)

    def __init__(self, engine: SQLBase):
        self.engine = engine

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        if isinstance(exc, self.engine.driver_errors):
            raise self.engine.translate(exc) from exc
        if isinstance(exc, UnicodeError):  # a driver encoding a lone surrogate (validation names fields first)
            raise InvalidMessage(f"a value is not valid Unicode text (it holds a lone surrogate): {exc}") from exc
