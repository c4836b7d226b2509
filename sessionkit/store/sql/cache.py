"""The cache beside a SQLite or PostgreSQL store: the views' tables in DuckDB.

Two ways to have those tables, decided by the engine (each supplies its own: a DuckDB
engine runs the views on its own database, the others hand the cache an
:class:`AnalysisSource`, ``engine.analysis_source()``, that reads their rows):

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
  writes), from PostgreSQL as the CSV of one ``COPY ... TO STDOUT`` parsed by pyarrow
  (the engines' sources: ``engines/sqlite/analysis.py``, ``engines/postgresql/analysis.py``).

Only a single SELECT (or ``WITH ... SELECT``) is run; anything else raises
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .query import QueryRun, install, new_connection, raise_if_out_of_memory, rollback, run_query
from .sandbox import CheckedQuery, check_query
from .tree_views import needs_columns
from .views import (
    SOURCE_COLUMNS,
    SOURCE_TYPES,
    TREE_COLUMNS,
    VIEWS,
    do,
    duckdb_module,
    pyarrow_module,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow

    from .._sql import SQLEngine

__all__ = [
    "Cache",
    "AnalysisSource",
    "Reader",
    "select_list",
    "WHOLE_CONTENT",
    "WHOLE_CONTENT_BYTES",
    "CACHE_SUFFIX",
    "CACHE_FORMAT",
    "LAZY_COLUMNS",
    "ARROW_TYPES",
]


#: A message's whole stored JSON, as the analysis copy holds it in ``content``: a message
#: larger than a row holds continues in ``{chunks}`` rows (``chunks`` of them, in order of
#: ``n``), joined here so that the views parsing it (``tool_calls``) see all of it. SQLite
#: (3.40) has no ORDER BY inside an aggregate: the subquery reads the chunk rows through
#: their primary key (seq, n), in order of ``n``.
WHOLE_CONTENT = {
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
WHOLE_CONTENT_BYTES = (
    "coalesce(octet_length(content), 0) + coalesce((SELECT sum(octet_length(k.data))"
    " FROM {chunks} k WHERE k.seq = {messages}.seq), 0)"
)


def select_list(engine: SQLEngine, name: str, cols: tuple[str, ...]) -> str:
    """The SELECT list reading ``cols`` of ``name`` (a template: compiled with the statement),
    ``content`` whole (see :data:`WHOLE_CONTENT`), ``text`` as the dialect reads it
    (``Dialect.message_text``)."""
    if name != "messages":
        return ", ".join(cols)
    special = {"content": WHOLE_CONTENT.get(engine.dialect.name, "content"), "text": "{row_text} AS text"}
    return ", ".join(special.get(c, c) for c in cols)


class Reader:
    """Reads for a refresh through the store's own connection (inside its snapshot).

    An engine whose rows travel faster another way subclasses it (its ``load``), and its
    :class:`AnalysisSource` hands the subclass to the cache."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.engine = cache.engine

    def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.engine.fetch(sql, params)

    def load(
        self,
        name: str,
        where: str = "",
        params: tuple[Any, ...] = (),
        *,
        paged: bool = False,
        cols: tuple[str, ...] | None = None,
        target: str | None = None,
    ) -> int:
        """Copy ``cols`` (default: those the cache holds) of the rows of ``name`` matching
        ``where`` into the cache table (or ``target``); how many rows."""
        cols = cols or self.cache.columns(name)
        listed = select_list(self.engine, name, cols)
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


class AnalysisSource:
    """Where a :class:`Cache` reads a store's rows from: what an engine supplies
    (``engine.analysis_source()``), as it supplies its search index. This one reads
    through the engine's own connection, in its snapshot, and keeps the cache in memory.

    ``cache_file``: the DuckDB file the cache is kept in beside the store (None: in memory).
    ``ordered``: rows and log entries become visible in write-sequence order (one writer at
    a time); where they may not, each refresh also compares counts (see :class:`Cache`).
    ``direct``: a connection of the source's own that reads the store without the engine
    (SQLite's ADBC driver), or None."""

    ordered = True

    def __init__(self, engine: SQLEngine, *, cache_file: str | None = None) -> None:
        self.engine = engine
        self.cache_file = cache_file
        self.direct: Any = None

    @contextlib.contextmanager
    def reading(self, cache: Cache, *, through_store: bool = False) -> Iterator[Reader]:
        """A reader whose reads all see one state of the store, with the cache's lock held.

        The store's snapshot is taken before the lock: a thread inside a write transaction
        of a SQLite store holds the store's lock and then asks for the cache's, so a thread
        holding the cache's lock must never wait for the store's. ``through_store``: read
        through the store's own connection (inside a write transaction: its own writes)."""
        with self.engine.snapshot(), cache.lock:
            yield self.reader(cache)

    def reader(self, cache: Cache) -> Reader:
        """The reader of a refresh inside the engine's snapshot."""
        return Reader(cache)

    def close(self) -> None:
        """Release what the source holds of its own (called as the cache closes)."""


#: Wide message columns a cache reads only once a query names them.
LAZY_COLUMNS = ("text", "metadata", "content")

#: The cache file of a SQLite store ``x.db`` is ``x.db-analysis.duckdb``, beside it.
CACHE_SUFFIX = "-analysis.duckdb"

#: The tables of datasets (``_datasets``): small, read again whole when one changes.
DATASET_TABLES = ("datasets", "dataset_items")

#: The layout of a cache file (its tables and state); a file of another layout is made again.
CACHE_FORMAT = "5"

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


class Cache:
    """The analysis columns of a SQLite or PostgreSQL store in a DuckDB database (a file
    beside a SQLite file, else in memory), brought up to date before each query (see
    the module notes).

    ``source`` is what the store's engine supplies (:class:`AnalysisSource`): the cache
    reads through its readers, whose reads see one state of the store (the engine's
    snapshot, or for a SQLite file with the ADBC driver installed one read transaction of
    its own), so the rows and the change log it reads describe one state of the store.
    Where the source's rows are not ``ordered`` (PostgreSQL: concurrent transactions
    commit in any order), each refresh also compares the counts it holds with the
    store's and reads everything again when a late commit slipped below what it had seen.
    """

    TABLES = {name: "sessionkit_" + name for name in SOURCE_COLUMNS}

    #: What a refresh keeps between queries (and, in a cache file, between processes).
    STATE = ("hi", "last_n", "log_count", "loaded", "lazy", "store_id", "store_schema", "hi_key", "log_key")

    def __init__(self, source: AnalysisSource) -> None:
        self.source = source
        self.engine = source.engine
        self.ordered = source.ordered
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
        self.views: dict[str, Any] = {}
        self.reads = 0  # message rows read from the store (what refreshes cost)
        self.checked = False  # a file's state was checked against the store by this object
        #: What the store's snapshot saw at the last refresh (see ``_refresh``), or None.
        self.seen: str | None = None
        #: The cache file beside the store (None: in memory).
        self.file: str | None = source.cache_file
        #: The store's ``sql_memory_limit`` (the ceiling of the cache's database), or None.
        self.memory: str | None = getattr(self.engine, "sql_memory_limit", None)
        self.con: Any = None
        self.lock: Any = None
        if self.file is not None:
            self.lock = _file_lock(self.file)
            with self.lock:
                self.con = self._open_file()
        if self.con is None:
            self.file = None
            self.lock = threading.RLock()
            self.con = new_connection(memory=self.memory)
            self._create_tables()

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
                con = new_connection(path=self.file, memory=self.memory)
            except duckdb.Error as exc:
                if isinstance(exc, duckdb.ConnectionException) and "configuration" in str(exc).lower():
                    # open in this process by a store object with another sql_memory_limit (DuckDB
                    # sets a database's configuration once): this one's cache is in memory
                    return None
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

    def _fingerprints(self, rd: Reader) -> tuple[str, str]:
        """What identifies the rows held: the row at ``hi`` and the log entry ``last_n``."""
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT session_id, id FROM {messages} WHERE seq = ?"), (self.hi,))
        entry = rd.fetch(eng.compile("SELECT session_id, kind, seq FROM {changes} WHERE n = ?"), (self.last_n,))
        return (json.dumps(list(row[0])) if row else ""), (json.dumps(list(entry[0])) if entry else "")

    def _store_id(self, rd: Reader) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'store_id'"))
        return str(row[0][0]) if row else ""

    def _schema(self, rd: Reader) -> str:
        row = rd.fetch(self.engine.compile("SELECT value FROM {meta} WHERE key = 'schema_version'"))
        return str(row[0][0]) if row else ""

    def _check_file(self, rd: Reader) -> bool:
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

    def _count_matches(self, rd: Reader) -> bool:
        held = self.con.execute("SELECT count(*) FROM sessionkit_messages").fetchall()[0][0]
        return rd.fetch(self.engine.compile("SELECT count(*) FROM {messages}"))[0][0] == held

    @property
    def _adbc(self) -> Any:
        """The source's own connection to the store (None: reads go through the engine)."""
        return self.source.direct

    def close(self) -> None:
        with self.lock:
            self.con.close()
            self.source.close()

    # -- reading the store ----------------------------------------------------------
    def _reading(self, through_store: bool = False) -> contextlib.AbstractContextManager[Reader]:
        """A reader whose reads all see one state of the store, with the cache's lock held
        (see :meth:`AnalysisSource.reading`)."""
        return self.source.reading(self, through_store=through_store)

    def columns(self, name: str) -> tuple[str, ...]:
        """The columns of ``name`` the cache holds now (lazy ones once they were asked for)."""
        if name != "messages":
            return SOURCE_COLUMNS[name]
        return tuple(c for c in SOURCE_COLUMNS[name] if self.lazy.get(c, True))

    def put(self, name: str, rows: list[Any], cols: tuple[str, ...], target: str | None = None) -> None:
        """Python rows of ``name`` (``cols``) into the cache table (or ``target``), through Arrow."""
        if not rows:
            return
        pa = pyarrow_module()
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        arrays = [pa.array(list(values), type=ARROW_TYPES[types[c]](pa)) for values, c in zip(zip(*rows), cols)]
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

    def _fill(self, rd: Reader, column: str) -> None:
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
            except duckdb.Error as exc:
                # (the rows did not fit the store's sql_memory_limit: the file is sound)
                raise_if_out_of_memory(exc, self.memory)
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
            self.con = new_connection(memory=self.memory)
            self._create_tables()

    def _refresh_once(self, rd: Reader, need: list[str], keep: bool = True) -> None:
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

    def _refresh(self, rd: Reader) -> None:
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

    def _refresh_rows(self, rd: Reader) -> None:
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

    def _load_all(self, rd: Reader) -> None:
        eng = self.engine
        row = rd.fetch(eng.compile("SELECT coalesce(max(n), 0), count(*) FROM {changes}"))[0]
        self.last_n, self.log_count = row[0], row[1]
        self.reads += rd.load("messages", "WHERE seq > ?", (0,), paged=True)
        self.hi = self.con.execute("SELECT coalesce(max(seq), 0) FROM sessionkit_messages").fetchall()[0][0]
        for name in ("compactions", "runs", "events", "labels", "embeddings", *DATASET_TABLES):
            rd.load(name)
        self.loaded = True

    def _apply(self, rd: Reader, log: list[Any], top: int) -> None:
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
        datasets = False  # (a dataset belongs to no session: its tables are read again whole)
        for _, sid, kind, seq in log:
            if kind == "datasets":
                datasets = True
            elif kind == "delete":
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
        if datasets:
            for name in DATASET_TABLES:
                do(con, f"DELETE FROM {self.TABLES[name]}")
                rd.load(name)
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
            checked = check_query(self.con, query, files=files)
            names = set(checked.names)
            if files:  # (the views it names are read whole)
                names = names | {"*"}
        # (``content`` only for the views that parse it, never for a star)
        need = {c for c in LAZY_COLUMNS if c != "content" and (c in names or "*" in names)} | needs_columns(names)
        if self.engine.in_write():
            return self._query_in_write(checked, params, names, need, session_ids, run=run, files=files)
        self.refresh(need)
        with self.lock:
            return self._run_checked(checked, params, names, session_ids, run=run, files=files)

    def _run_checked(
        self,
        query: CheckedQuery,
        params: Any,
        names: set[str],
        session_ids: list[str] | None,
        *,
        run: QueryRun | None,
        files: bool,
        in_transaction: bool = False,
    ) -> pyarrow.Table:
        """Run a checked query over the cache's tables and views (under its lock)."""
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
            in_transaction=in_transaction,
            memory=self.memory,
        )

    def _query_in_write(
        self,
        query: CheckedQuery,
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
                try:
                    self._refresh_once(rd, sorted(need), keep=False)
                except duckdb_module().Error as exc:
                    raise_if_out_of_memory(exc, self.memory)
                    raise
                return self._run_checked(query, params, names, session_ids, run=run, files=files, in_transaction=True)
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

#: The Arrow type of each DuckDB type of the analysis columns (strings for JSON vectors).
ARROW_TYPES = {
    "BIGINT": lambda pa: pa.int64(),
    "VARCHAR": lambda pa: pa.string(),
    "FLOAT[]": lambda pa: pa.string(),
    "DOUBLE": lambda pa: pa.float64(),
}
