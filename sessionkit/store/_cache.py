"""The cache beside a SQLite or PostgreSQL store: the views' tables in DuckDB.

Two ways to have those tables, decided by the engine:

* **DuckDB store**: the views are defined, as temporary views of a second connection
  to the same database, over the store's own tables. A query runs in a read
  transaction on that connection (one consistent snapshot, never blocking the
  store's writers) and is rolled back: nothing is copied, nothing can be written.
* **SQLite and PostgreSQL stores**: :class:`Cache`, a DuckDB database beside the store
  holding the analysis columns of its messages, compactions, runs and events: a file
  beside a SQLite file (``x.db-analysis.duckdb``, kept from one store object and
  process to the next), in memory for PostgreSQL (and for a SQLite file whose cache
  file another process holds). It is filled once, then brought up to date before each
  query from what changed: rows above the last write sequence it saw (appends and
  imports), and the store's change log (``sessionkit_changes``: updates, deletes,
  clears, compactions, runs, events), read in the same snapshot as the rows. A query
  after N new messages reads N rows from the store, not the whole store. A cache file
  saves, in the same DuckDB transaction as its rows, the state that says what they are
  and what identifies it in the store; a file that does not match the store beside it
  (damaged, of another layout, another store's, a store restored from an older copy)
  is made again. Rows travel as Arrow batches, never as a Python object per value: from
  a SQLite file through the ADBC SQLite driver (read ahead by a thread while DuckDB
  writes), from PostgreSQL as the CSV of one ``COPY ... TO STDOUT`` parsed by pyarrow.

Only a single SELECT (or ``WITH ... SELECT``) is run; anything else raises
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ._analysis import (
    SOURCE_COLUMNS,
    SOURCE_TYPES,
    TREE_COLUMNS,
    VIEWS,
    do,
    duckdb_module,
    pyarrow_csv_module,
    pyarrow_module,
)
from ._query import QueryRun, install, new_connection, rollback, run_query
from ._sandbox import check_query, names_used
from ._tree_views import needs_columns

if TYPE_CHECKING:
    import duckdb
    import pyarrow
    from adbc_driver_manager.dbapi import Cursor

    from ._sql import SQLEngine
    from .postgres import PostgresEngine

__all__ = ["Cache", "CACHE_SUFFIX", "CACHE_FORMAT", "LAZY_COLUMNS"]


#: A message's whole stored JSON, as the analysis copy holds it in ``content``: a message
#: larger than a row holds continues in ``{chunks}`` rows (``chunks`` of them, in order of
#: ``n``), joined here so that the views parsing it (``tool_calls``) see all of it. SQLite
#: (3.40) has no ORDER BY inside an aggregate: the subquery reads the chunk rows through
#: their primary key (seq, n), in order of ``n``.
_WHOLE_CONTENT = {
    "sqlite": (
        "CASE WHEN chunks > 0 THEN content || coalesce((SELECT group_concat(c.data, '')"
        " FROM (SELECT data FROM {chunks} k WHERE k.seq = {messages}.seq ORDER BY k.n) c), '')"
        " ELSE content END AS content"
    ),
    "postgresql": (
        "CASE WHEN chunks > 0 THEN content || coalesce((SELECT string_agg(k.data, '' ORDER BY k.n)"
        " FROM {chunks} k WHERE k.seq = {messages}.seq), '') ELSE content END AS content"
    ),
}
#: The bytes of that whole JSON (for the CSV block of a PostgreSQL copy).
_WHOLE_CONTENT_BYTES = (
    "coalesce(octet_length(content), 0) + coalesce((SELECT sum(octet_length(k.data))"
    " FROM {chunks} k WHERE k.seq = {messages}.seq), 0)"
)


def _select_list(engine: SQLEngine, name: str, cols: tuple[str, ...]) -> str:
    """The SELECT list reading ``cols`` of ``name`` (a template: compiled with the statement),
    ``content`` whole (see :data:`_WHOLE_CONTENT`)."""
    if name != "messages" or "content" not in cols:
        return ", ".join(cols)
    whole = _WHOLE_CONTENT[engine.dialect.name]
    return ", ".join(whole if c == "content" else c for c in cols)


class _EngineReader:
    """Reads for a refresh through the store's own connection (inside its snapshot)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.engine = cache.engine

    def fetch(self, sql: str, params: tuple = ()) -> list:
        return self.engine.fetch(sql, params)

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        """Copy ``cols`` (default: those the cache holds) of the rows of ``name`` matching
        ``where`` into the cache table (or ``target``); how many rows."""
        cols = cols or self.cache.columns(name)
        listed = _select_list(self.engine, name, cols)
        if not paged:
            rows = self.fetch(self.engine.compile(f"SELECT {listed} FROM {{{name}}} {where}"), params)
            self.cache.put(name, rows, cols, target)
            return len(rows)
        # pages by seq (``where`` ends with "seq > ?", the last parameter; seq comes first):
        # the Python rows held at once stay within a page
        sql = self.engine.compile(f"SELECT {listed} FROM {{{name}}} {where} ORDER BY seq LIMIT ?")
        last, total = params[-1], 0
        while True:
            rows = self.fetch(sql, (*params[:-1], last, _PAGE))
            if not rows:
                return total
            self.cache.put(name, rows, cols, target)
            total += len(rows)
            last = rows[-1][0]


class _CopyReader(_EngineReader):
    """Reads for a refresh of a PostgreSQL store: a table's rows come as CSV from one
    ``COPY ... TO STDOUT`` (``PostgresEngine.copy_csv``) in the refresh's snapshot, parsed
    into Arrow batches by pyarrow's CSV reader (no Python object per value) and written
    into the cache by DuckDB. Reads whose parameters are not whole numbers (lists of
    sessions or rows) go through the store's rows as on any engine."""

    engine: PostgresEngine

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        if any(type(p) is not int for p in params) or where.count("?") != len(params):
            return super().load(name, where, params, paged=paged, cols=cols, target=target)
        cols = cols or self.cache.columns(name)
        for value in params:  # COPY binds no parameters: whole numbers are written in
            where = where.replace("?", str(value), 1)
        sql = self.engine.compile(f"SELECT {_select_list(self.engine, name, cols)} FROM {{{name}}} {where}")
        block = self._block_size(name, cols, where)
        # closed here even when DuckDB stops early: the COPY ends before the snapshot does
        with contextlib.closing(self.engine.copy_csv(sql)) as chunks:
            return self._load_csv(name, cols, target, chunks, block)

    def _block_size(self, name: str, cols: tuple[str, ...], where: str) -> int:
        """A CSV block of pyarrow's reader that holds the widest row read: a row may not
        straddle two blocks, and a message's text can be any size. From the texts' sizes
        as stored (PostgreSQL knows a text's size without reading it), doubled for the
        quotes CSV doubles, plus room for the other columns."""
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        wide = [c for c in cols if types[c] in ("VARCHAR", "FLOAT[]")]
        if not wide:
            return _BLOCK
        size = " + ".join(
            _WHOLE_CONTENT_BYTES if name == "messages" and c == "content" else f"coalesce(octet_length({c}), 0)"
            for c in wide
        )
        row = self.fetch(self.engine.compile(f"SELECT coalesce(max({size}), 0) FROM {{{name}}} {where}"))
        widest = int(row[0][0] or 0) if row else 0
        return min(max(_BLOCK, 2 * widest + (1 << 20)), (1 << 31) - 1)

    def _load_csv(
        self, name: str, cols: tuple[str, ...], target: str | None, chunks: Iterator[bytes], block: int = 0
    ) -> int:
        first = next(chunks, b"")
        if not first:
            return 0
        pa, csv = pyarrow_module(), pyarrow_csv_module()
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        reader = csv.open_csv(
            _ChunkFile(first, chunks),
            read_options=csv.ReadOptions(column_names=list(cols), block_size=block or _BLOCK),
            # PostgreSQL's CSV: NULL is an empty field, an empty text is "" (kept), and
            # quoted fields may hold line breaks
            parse_options=csv.ParseOptions(newlines_in_values=True),
            convert_options=csv.ConvertOptions(
                column_types={c: _ARROW[types[c]](pa) for c in cols},
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
        return self.cache.insert_arrow(target or self.cache.TABLES[name], cols, reader)


#: pyarrow's CSV block when every row is narrower than a quarter of it.
_BLOCK = 4 << 20


class _ChunkFile(io.RawIOBase):
    """A readable file over an iterator of byte chunks (what pyarrow's CSV reader reads).
    COPY hands out a chunk per row: a read gathers chunks up to the size asked for."""

    def __init__(self, first: bytes, rest: Iterator[bytes]) -> None:
        super().__init__()
        self._held = first
        self._rest = rest

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        parts, have = [self._held], len(self._held)
        while size < 0 or have < size:
            chunk = next(self._rest, None)
            if chunk is None:
                break
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        if 0 <= size < len(data):
            data, self._held = data[:size], data[size:]
        else:
            self._held = b""
        return data

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]  # (io hands a bytearray or memoryview)
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


class _AdbcReader(_EngineReader):
    """Reads for a refresh of a SQLite file through the ADBC SQLite driver, when it is
    installed: rows arrive as Arrow batches (no Python object per value), about four
    times faster than ``sqlite3`` rows. One read transaction: one state of the file."""

    def __init__(self, cache: Cache, cursor: Cursor) -> None:
        super().__init__(cache)
        self.cur = cursor

    def fetch(self, sql: str, params: tuple = ()) -> list:
        self.cur.execute(sql, params or None)
        return [tuple(r) for r in self.cur.fetchall()]

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        cols = cols or self.cache.columns(name)
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        # The driver types each column from its first rows: a first row with a value of the
        # right type in every column (and a marker -1 filtered out below) fixes them.
        first = {"BIGINT": "-1", "DOUBLE": "-1.0"}
        head = ", ".join(first.get(types[c], "''") + f" AS {c}" for c in cols)
        marker = _MARKER[name]
        sql = self.engine.compile(f"SELECT {head} UNION ALL SELECT {', '.join(cols)} FROM {{{name}}} {where}")
        self.cur.execute(sql, params or None)
        with _read_ahead(self.cur.fetch_record_batch()) as reader:
            return self.cache.insert_arrow(target or self.cache.TABLES[name], cols, reader, f"WHERE {marker} <> -1")


@contextlib.contextmanager
def _read_ahead(reader: pyarrow.RecordBatchReader, depth: int = 4) -> Iterator[pyarrow.RecordBatchReader]:
    """``reader`` (Arrow record batches from the SQLite driver) read by a thread of its
    own, up to ``depth`` batches ahead: the driver steps SQLite (without the GIL) while
    DuckDB writes the batches before, so a first load costs about the longer of the two
    instead of their sum. An error of the driver reaches the reader's consumer; a
    consumer that stops early stops the thread. (Arrow has no read-ahead reader of its
    own for a stream, so this is written here.)"""
    pa = pyarrow_module()
    batches: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def hand_over(item: Any) -> bool:
        """Queue ``item`` unless the consumer stopped (then False)."""
        while not stop.is_set():
            try:
                batches.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        item: Any = end
        try:
            for batch in reader:
                if not hand_over(batch):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            item = exc
        hand_over(item)

    def consume() -> Iterator[pyarrow.RecordBatch]:
        while True:
            item = batches.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    thread = threading.Thread(target=produce, name="sessionkit-cache-read", daemon=True)
    thread.start()
    try:
        yield pa.RecordBatchReader.from_batches(reader.schema, consume())
    finally:
        stop.set()
        thread.join()


#: Wide message columns a cache reads only once a query names them.
LAZY_COLUMNS = ("text", "metadata", "content")

#: The column of each table whose -1 marks _AdbcReader's typing row.
_MARKER = {"messages": "seq", "compactions": "seq", "runs": "n", "events": "seq", "labels": "seq", "embeddings": "seq"}


#: The cache file of a SQLite store ``x.db`` is ``x.db-analysis.duckdb``, beside it.
CACHE_SUFFIX = "-analysis.duckdb"

#: The layout of a cache file (its tables and state); a file of another layout is made again.
CACHE_FORMAT = "4"

_file_locks: dict[str, threading.RLock] = {}
_file_locks_guard = threading.Lock()


def _file_lock(path: str) -> threading.RLock:
    """One lock per cache file in this process: store objects on the same file share its
    database (DuckDB opens a file once per process) and refresh it one at a time."""
    with _file_locks_guard:
        return _file_locks.setdefault(path, threading.RLock())


def _remove_file(path: str) -> None:
    for name in (path, path + ".wal"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)


def _adbc_sqlite() -> ModuleType | None:
    try:
        import adbc_driver_sqlite.dbapi as adbc  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    return adbc


class Cache:
    """The analysis columns of a SQLite or PostgreSQL store in a DuckDB database (a file
    beside a SQLite file, else in memory), brought up to date before each query (see
    the module notes).

    ``engine`` is the store's :class:`~sessionkit.store._sql.SQLEngine`; the cache reads it
    through :meth:`SQLEngine.fetch` inside :meth:`SQLEngine.snapshot` (or, for a SQLite
    file with the ADBC driver installed, in one read transaction of its own), so the
    rows and the change log it reads describe one state of the store. ``ordered`` says
    that rows and log entries become visible in write-sequence order (one writer at a
    time, as on SQLite); where they may not (PostgreSQL: concurrent transactions commit
    in any order), each refresh also compares the counts it holds with the store's and
    reads everything again when a late commit slipped below what it had seen.
    """

    TABLES = {name: "sessionkit_" + name for name in SOURCE_COLUMNS}

    #: What a refresh keeps between queries (and, in a cache file, between processes).
    STATE = ("hi", "last_n", "log_count", "loaded", "lazy", "store_id", "store_schema", "hi_key", "log_key")

    def __init__(self, engine: SQLEngine, *, ordered: bool) -> None:
        self.engine = engine
        self.ordered = ordered
        self.hi = 0  # the highest message seq held
        self.last_n = 0  # the last change log entry applied
        self.log_count = 0  # entries up to last_n (PostgreSQL: a late entry changes it)
        self.loaded = False
        #: The wide message columns held (read only once a query names them, or ``*``).
        self.lazy: dict[str, bool] = {c: False for c in LAZY_COLUMNS}
        #: The store the rows describe (its ``store_id``, written when it was created):
        #: checked on every refresh, so a store made again in the same place (a notebook
        #: that deletes its store and builds it anew) is never answered from the old one's rows.
        self.store_id = ""
        # what a cache file's rows describe: the store's schema, the row at seq ``hi``
        # and the change log entry ``last_n`` (checked against the store it is beside)
        self.store_schema = ""
        self.hi_key = ""
        self.log_key = ""
        self.views: dict = {}
        self.reads = 0  # message rows read from the store (what refreshes cost)
        self.checked = False  # a file's state was checked against the store by this object
        #: What the store's snapshot saw at the last refresh (see ``_refresh``), or None.
        self.seen: str | None = None
        self._adbc: Any = None
        #: The cache file beside a SQLite file store (None: in memory).
        self.file: str | None = None
        self.con: Any = None
        self.lock: Any = None
        # The name the store's file is open by in this process (one file reached through
        # two names, a hard link or a bind mount, is opened through one: see _files), so
        # that its store objects share one cache file under one name.
        name = getattr(engine, "_file", None) or engine.path
        if engine.kind == "sqlite" and name:
            self.file = name + CACHE_SUFFIX
            self.lock = _file_lock(self.file)
            with self.lock:
                self.con = self._open_file()
        if self.con is None:
            self.file = None
            self.lock = threading.RLock()
            self.con = new_connection()
            self._create_tables()
        adbc = _adbc_sqlite() if engine.kind == "sqlite" and engine.path else None
        if adbc is not None and name:  # (name is set whenever engine.path is)
            with contextlib.suppress(Exception):  # the driver cannot open it: read through the store
                uri = "file:" + name + "?mode=ro"
                self._adbc = adbc.connect(uri, autocommit=True)

    def _create_tables(self) -> None:
        for name, cols in SOURCE_COLUMNS.items():
            types = SOURCE_TYPES[name]
            do(
                self.con,
                f"CREATE TABLE IF NOT EXISTS {self.TABLES[name]} ("
                + ", ".join(f"{c} {ty}" for c, ty in zip(cols, types))
                + ")",
            )
        do(self.con, "CREATE TABLE IF NOT EXISTS sessionkit_cache_meta (key VARCHAR PRIMARY KEY, value VARCHAR)")

    # -- the cache file ---------------------------------------------------------------
    def _open_file(self) -> duckdb.DuckDBPyConnection | None:
        """A connection to the cache file, created or made again as needed; None when it
        cannot be had (another process holds it, the folder is read-only...): the cache
        then lives in memory for this store object."""
        duckdb = duckdb_module()
        assert self.file is not None
        for attempt in range(2):
            try:
                con = new_connection(path=self.file)
            except duckdb.Error as exc:
                if "lock" in str(exc).lower() or attempt:  # held by another process, or unusable
                    return None
                _remove_file(self.file)  # not a DuckDB file (damaged): made again
                continue
            try:
                self.con = con
                self._create_tables()
                if self._meta().get("format") != CACHE_FORMAT:  # new, or of another layout
                    self._drop_tables()
                    self._create_tables()
                    do(con, "INSERT INTO sessionkit_cache_meta VALUES ('format', ?)", [CACHE_FORMAT])
                return con
            except duckdb.Error:
                self.con = None
                with contextlib.suppress(duckdb.Error):
                    con.close()
                if attempt:
                    return None
                _remove_file(self.file)
        return None

    def _drop_tables(self) -> None:
        for table in (*self.TABLES.values(), "sessionkit_cache_meta"):
            do(self.con, f"DROP TABLE IF EXISTS {table}")

    def _meta(self) -> dict[str, str]:
        return dict(self.con.execute("SELECT key, value FROM sessionkit_cache_meta").fetchall())

    def _state(self) -> dict[str, Any]:
        return {k: (dict(self.lazy) if k == "lazy" else getattr(self, k)) for k in self.STATE}

    def _set_state(self, state: dict[str, Any]) -> None:
        for k in self.STATE:
            v = state[k]
            setattr(self, k, dict(v) if k == "lazy" else v)

    def _load_state(self) -> None:
        """The state the cache file holds (another store object or process may have moved it)."""
        saved = self._meta().get("state")
        self._set_state(_EMPTY if saved is None else json.loads(saved))

    def _save_state(self) -> None:
        do(self.con, "INSERT OR REPLACE INTO sessionkit_cache_meta VALUES ('state', ?)", [json.dumps(self._state())])

    def _fingerprints(self, rd: _EngineReader) -> tuple[str, str]:
        """What identifies the rows held: the row at ``hi`` and the log entry ``last_n``."""
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT session_id, id FROM {messages} WHERE seq = ?"), (self.hi,))
        entry = rd.fetch(eng.compile("SELECT session_id, kind, seq FROM {changes} WHERE n = ?"), (self.last_n,))
        return (json.dumps(list(row[0])) if row else ""), (json.dumps(list(entry[0])) if entry else "")

    def _store_id(self, rd: _EngineReader) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'store_id'"))
        return str(row[0][0]) if row else ""

    def _schema(self, rd: _EngineReader) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'schema_version'"))
        return str(row[0][0]) if row else ""

    def _check_file(self, rd: _EngineReader) -> bool:
        """Whether the state read from the file describes the store it is beside (same
        schema, its log entry and newest row still there): else it is read again."""
        if self._schema(rd) != self.store_schema:
            return False
        hi_key, log_key = self._fingerprints(rd)
        if log_key != self.log_key:
            return False
        if hi_key != self.hi_key:  # the row at hi went: only a delete logged since explains it
            deletes = rd.fetch(
                self.engine.compile("SELECT count(*) FROM {changes} WHERE n > ? AND kind = 'delete'"), (self.last_n,)
            )
            return bool(deletes[0][0])
        return True

    def _count_matches(self, rd: _EngineReader) -> bool:
        held = self.con.execute("SELECT count(*) FROM sessionkit_messages").fetchall()[0][0]
        return rd.fetch(self.engine.compile("SELECT count(*) FROM {messages}"))[0][0] == held

    def close(self) -> None:
        with self.lock:
            self.con.close()
            if self._adbc is not None:
                with contextlib.suppress(Exception):
                    self._adbc.close()
                self._adbc = None

    # -- reading the store ----------------------------------------------------------
    @contextlib.contextmanager
    def _reading(self, through_store: bool = False) -> Iterator[_EngineReader]:
        """A reader whose reads all see one state of the store, with the cache's lock held.

        The store's snapshot is taken before the lock: a thread inside a write transaction
        of a SQLite store holds the store's lock and then asks for the cache's, so a thread
        holding the cache's lock must never wait for the store's. ``through_store``: read
        through the store's own connection (inside a write transaction: its own writes)."""
        if self._adbc is None or through_store:
            with self.engine.snapshot(), self.lock:
                yield _CopyReader(self) if hasattr(self.engine, "copy_csv") else _EngineReader(self)
            return
        with self.lock:
            with self._adbc_reading() as rd:
                yield rd

    @contextlib.contextmanager
    def _adbc_reading(self) -> Iterator[_AdbcReader]:
        cur = self._adbc.cursor()
        try:
            cur.execute("BEGIN")  # a read transaction: one state of the file until COMMIT
            try:
                yield _AdbcReader(self, cur)
            finally:
                with contextlib.suppress(Exception):
                    cur.execute("COMMIT")
        finally:
            with contextlib.suppress(Exception):
                cur.close()

    def columns(self, name: str) -> tuple[str, ...]:
        """The columns of ``name`` the cache holds now (lazy ones once they were asked for)."""
        if name != "messages":
            return SOURCE_COLUMNS[name]
        return tuple(c for c in SOURCE_COLUMNS[name] if self.lazy.get(c, True))

    def put(self, name: str, rows: list, cols: tuple[str, ...], target: str | None = None) -> None:
        """Python rows of ``name`` (``cols``) into the cache table (or ``target``), through Arrow."""
        if not rows:
            return
        pa = pyarrow_module()
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        arrays = [pa.array(list(values), type=_ARROW[types[c]](pa)) for values, c in zip(zip(*rows), cols)]
        self.insert_arrow(target or self.TABLES[name], cols, pa.Table.from_arrays(arrays, names=list(cols)))

    def insert_arrow(
        self, table: str, cols: tuple[str, ...], source: pyarrow.Table | pyarrow.RecordBatchReader, where: str = ""
    ) -> int:
        """Rows of ``source`` (an Arrow table or record batch reader of ``cols``, those
        matching ``where``) into ``table``; how many."""
        con = self.con
        con.register("sessionkit_batch", source)
        try:  # DuckDB's INSERT answers with the number of rows it wrote
            return con.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM sessionkit_batch {where}"
            ).fetchall()[0][0]
        finally:
            con.unregister("sessionkit_batch")

    def _fill(self, rd: _EngineReader, column: str) -> None:
        """Read a lazy column of every message held (same snapshot as the refresh)."""
        types = dict(zip(SOURCE_COLUMNS["messages"], SOURCE_TYPES["messages"]))
        do(self.con, f"CREATE OR REPLACE TEMP TABLE sessionkit_fill (seq BIGINT, {column} {types[column]})")
        try:
            rd.load("messages", "WHERE seq > ?", (0,), paged=True, cols=("seq", column), target="sessionkit_fill")
            do(
                self.con,
                f"UPDATE sessionkit_messages SET {column} = f.{column} FROM sessionkit_fill f"
                " WHERE sessionkit_messages.seq = f.seq",
            )
        finally:
            do(self.con, "DROP TABLE sessionkit_fill")
        self.lazy[column] = True

    def refresh(self, need: Iterable[str] = ()) -> None:
        """Bring the cache up to the store's current (committed) state, with the lazy
        columns ``need``.

        One DuckDB transaction: the rows held and the state saying what they are change
        together or not at all (a process killed mid-way leaves a cache file as it was).
        A cache file that fails (damaged since it was opened) is made again from the store."""
        duckdb = duckdb_module()
        wanted = sorted(need)
        with self._reading() as rd:
            try:
                self._refresh_once(rd, wanted)
            except duckdb.Error:
                if self.file is None:
                    raise
                self._rebuild_file()
                self._refresh_once(rd, wanted)

    def _rebuild_file(self) -> None:
        duckdb = duckdb_module()
        with contextlib.suppress(duckdb.Error):
            self.con.close()
        assert self.file is not None
        _remove_file(self.file)
        self.views = {}
        self.checked = False
        self._set_state(_EMPTY)
        self.con = self._open_file()
        if self.con is None:  # (it cannot be made: in memory from now on)
            self.file = None
            self.con = new_connection()
            self._create_tables()

    def _refresh_once(self, rd: _EngineReader, need: list[str], keep: bool = True) -> None:
        """One refresh through ``rd``, in a DuckDB transaction that commits (``keep``) or is
        left open for the caller to run a query in and roll back (``keep=False``: what is
        read may be rolled back in the store, so the cache must not keep it)."""
        before, seen = self._state(), self.seen
        do(self.con, "BEGIN TRANSACTION")
        try:
            if self.file is not None:
                self._load_state()
                if not self.checked and self.loaded and not self._check_file(rd):
                    self._reset()
            if not keep:
                self.seen = None  # the store's snapshot text does not show this thread's writes
            self._refresh(rd)
            if self.file is not None and not self.checked and not self._count_matches(rd):
                self._reset()  # rows held that the checks above could not tell apart
                self._load_all(rd)
            for column in need:
                if not self.lazy.get(column, True):
                    self._fill(rd, column)
            if not keep:
                return
            if self.file is not None:
                self.store_schema = self._schema(rd)
                self.hi_key, self.log_key = self._fingerprints(rd)
                self._save_state()
            do(self.con, "COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                do(self.con, "ROLLBACK")
            self._set_state(before)
            self.seen = seen
            raise
        self.checked = True

    def _refresh(self, rd: _EngineReader) -> None:
        # Where the store can say what its snapshot sees (PostgreSQL), a refresh that sees
        # what the last one saw has nothing to read: no checks, no counts.
        state = self.engine.visible_state()
        if self.loaded and state is not None and state == self.seen:
            return
        self.seen = None  # until this refresh is through
        store_id = self._store_id(rd)
        if self.loaded and store_id != self.store_id:  # another store in the same place
            self._reset()
        self.store_id = store_id
        self._refresh_rows(rd)
        self.seen = state

    def _refresh_rows(self, rd: _EngineReader) -> None:
        eng = self.engine
        if not self.loaded:
            self._load_all(rd)
            return
        log = rd.fetch(
            eng.compile("SELECT n, session_id, kind, seq FROM {changes} WHERE n > ? ORDER BY n"), (self.last_n,)
        )
        if not self.ordered:
            seen = rd.fetch(eng.compile("SELECT count(*) FROM {changes} WHERE n <= ?"), (self.last_n,))[0][0]
            if seen != self.log_count:  # an entry committed late, below what was read: start afresh
                self._reset()
                self._load_all(rd)
                return
        top = rd.fetch(eng.compile("SELECT coalesce(max(seq), 0) FROM {messages}"))[0][0]
        if not log and top == self.hi and self.ordered:
            return
        self._apply(rd, log, top)
        if not self.ordered:
            count = rd.fetch(eng.compile("SELECT count(*) FROM {messages}"))[0][0]
            held = self.con.execute("SELECT count(*) FROM sessionkit_messages").fetchall()[0][0]
            if count != held:  # a message committed late, below the highest seq held
                self._reset()
                self._load_all(rd)

    def _reset(self) -> None:
        for table in self.TABLES.values():
            do(self.con, f"DELETE FROM {table}")
        self.loaded = False

    def _load_all(self, rd: _EngineReader) -> None:
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT coalesce(max(n), 0), count(*) FROM {changes}"))[0]
        self.last_n, self.log_count = row[0], row[1]
        self.reads += rd.load("messages", "WHERE seq > ?", (0,), paged=True)
        self.hi = self.con.execute("SELECT coalesce(max(seq), 0) FROM sessionkit_messages").fetchall()[0][0]
        for name in ("compactions", "runs", "events", "labels", "embeddings"):
            rd.load(name)
        self.loaded = True

    def _apply(self, rd: _EngineReader, log: list, top: int) -> None:
        eng = self.engine
        gone: set[str] = set()  # sessions whose messages are read again
        updated: set[int] = set()
        side: dict[str, set[str]] = {
            "compactions": set(),
            "runs": set(),
            "events": set(),
            "labels": set(),
            "embeddings": set(),
        }
        low = None
        for _, sid, kind, seq in log:
            if kind == "delete":
                gone.add(sid)
                side["compactions"].add(sid)
                side["labels"].add(sid)
                side["embeddings"].add(sid)
                if seq is not None:
                    low = seq if low is None else min(low, seq)
            elif kind == "update":
                updated.add(seq)
                side["embeddings"].add(sid)
            elif kind in side:
                side[kind].add(sid)
        hi = self.hi if low is None else min(self.hi, low - 1)
        con = self.con
        gone_ids = sorted(gone)
        if gone:
            do(con, "DELETE FROM sessionkit_messages WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [gone_ids])
        if updated:
            do(con, "DELETE FROM sessionkit_messages WHERE seq IN (SELECT unnest(?::BIGINT[]))", [sorted(updated)])
        do(con, "DELETE FROM sessionkit_messages WHERE seq > ?", [hi])
        # rows above hi (appends and imports), then the sessions read again, then updated
        # rows: disjoint reads, so nothing is copied twice
        self.reads += rd.load("messages", "WHERE seq > ?", (hi,), paged=True)
        for start in range(0, len(gone_ids), 1000):
            part = gone_ids[start : start + 1000]
            self.reads += rd.load("messages", "WHERE session_id {in_ids} AND seq <= ?", (eng.listed(part), hi))
        wanted = [s for s in sorted(updated) if s <= hi]
        for start in range(0, len(wanted), 1000):
            seqs = wanted[start : start + 1000]
            self.reads += rd.load(
                "messages",
                "WHERE seq {in_seqs} AND NOT (session_id {in_ids})",
                (eng.listed(seqs), eng.listed(gone_ids)),
            )
        for name, sids in side.items():
            if not sids:
                continue
            sids_sorted = sorted(sids)
            do(con, f"DELETE FROM {self.TABLES[name]} WHERE session_id IN (SELECT unnest(?::VARCHAR[]))", [sids_sorted])
            for start in range(0, len(sids_sorted), 1000):
                chunk = sids_sorted[start : start + 1000]
                rd.load(name, "WHERE session_id {in_ids}", (eng.listed(chunk),))
        self.hi = max(top, hi)
        if log:
            self.last_n = log[-1][0]
            self.log_count += len(log)

    # -- queries ------------------------------------------------------------------------
    def query(
        self,
        query: str,
        params: Any = None,
        session_ids: list[str] | None = None,
        *,
        run: QueryRun | None = None,
        files: bool = False,
    ) -> pyarrow.Table:
        with self.lock:
            if run is not None:  # (stopped, or the store closed, while this waited for the cache)
                run.raise_if_stopped()
            check_query(self.con, query, files=files)
            names = names_used(self.con, query)
            if files:  # (the views it names are read whole)
                names = names | {"*"}
        # (``content`` only for the views that parse it, never for a star)
        need = {c for c in LAZY_COLUMNS if c != "content" and (c in names or "*" in names)} | needs_columns(names)
        if self.engine.in_write():
            return self._query_in_write(query, params, names, need, session_ids, run=run, files=files)
        self.refresh(need)
        with self.lock:
            return run_query(self.con, self.TABLES, query, params, self.views, names, session_ids, run=run, files=files)

    def _query_in_write(
        self,
        query: str,
        params: Any,
        names: set[str],
        need: set[str],
        session_ids: list[str] | None,
        *,
        run: QueryRun | None,
        files: bool,
    ) -> pyarrow.Table:
        """A query from inside a write transaction of the store: it sees the transaction's
        own writes, and the cache keeps none of them (the transaction may still roll
        back). The refresh and the query share one DuckDB transaction, rolled back."""
        tree = "*" in names or bool(names & set(TREE_COLUMNS))
        with self._reading(through_store=True) as rd:
            before, seen, checked = self._state(), self.seen, self.checked
            # views first: they are made outside the transaction that is rolled back
            install(self.con, self.TABLES, self.views, tree, set(VIEWS), session_ids)
            try:
                self._refresh_once(rd, sorted(need), keep=False)
                return run_query(
                    self.con,
                    self.TABLES,
                    query,
                    params,
                    self.views,
                    names,
                    session_ids,
                    run=run,
                    files=files,
                    in_transaction=True,
                )
            finally:
                rollback(self.con)
                self._set_state(before)
                self.seen, self.checked = seen, checked


#: The state of an empty cache.
_EMPTY: dict[str, Any] = {
    "hi": 0,
    "last_n": 0,
    "log_count": 0,
    "loaded": False,
    "lazy": {c: False for c in LAZY_COLUMNS},
    "store_id": "",
    "store_schema": "",
    "hi_key": "",
    "log_key": "",
}

#: Message rows a refresh holds as Python rows at once (without ADBC).
_PAGE = 20_000

_ARROW = {
    "BIGINT": lambda pa: pa.int64(),
    "VARCHAR": lambda pa: pa.string(),
    "FLOAT[]": lambda pa: pa.string(),
    "DOUBLE": lambda pa: pa.float64(),
}
