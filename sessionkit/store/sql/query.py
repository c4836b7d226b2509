"""Running one ``store.sql`` query: its views installed, its transaction, and stopping it.

``StoreClosed``; Ctrl-C in the main thread, ``store.interrupt_sql()`` or a cancelled
``sk.aio`` task with ``KeyboardInterrupt`` (DuckDB's ``interrupt()``); the connection
and the cache stay as they were. DuckDB, pyarrow (and pandas, above) come from the
``analysis`` extra and are imported on first use.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...errors import QueryMemoryExceeded, QueryTimeout, StoreClosed
from .sandbox import CheckedQuery, check_query
from .views import TREE_COLUMNS, VIEWS, do, duckdb_module, pyarrow_module, scoped, view_sql

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

__all__ = ["run_query", "install", "rollback", "new_connection", "memory_limit", "Runs", "QueryRun"]


def run_query(
    con: duckdb.DuckDBPyConnection,
    tables: dict[str, str],
    query: str | CheckedQuery,
    params: Any,
    state: dict[str, Any],
    names: set[str] | None = None,
    session_ids: list[str] | None = None,
    *,
    run: QueryRun | None = None,
    files: bool = False,
    in_transaction: bool = False,
    memory: str | None = None,
) -> pa.Table:
    """Run one checked SELECT on ``con`` (views over ``tables``) in a transaction that is
    rolled back; returns a ``pyarrow.Table``. ``query`` is checked here unless it was
    already (a :class:`CheckedQuery`, parsed once). ``state`` remembers which views are
    installed on ``con`` (only those a query names are made: defining the ones over the tree costs
    tens of milliseconds each); ``names`` are those the query uses, when already known;
    ``session_ids`` restricts the views to those sessions for this query (the tree
    columns are then computed for them only). ``run`` is the query's entry in the store's
    :class:`Runs` (it can be stopped through it); ``files`` lets the query read local files
    (on a connection of its own, see :func:`_with_files`). ``in_transaction``: ``con`` is
    inside a transaction that is not the query's (a DuckDB store's write transaction, or a
    cache refreshed with a transaction's writes): the query runs in it, and whatever it
    makes there goes with that transaction. ``memory``: the store's ``sql_memory_limit``
    (set on ``con``'s database already; named in the error, and set on a query's own
    connection with ``files``)."""
    duckdb = duckdb_module()
    pyarrow_module()
    checked = query if isinstance(query, CheckedQuery) else check_query(con, query, files=files)
    query = checked.text
    if names is None:
        names = set(checked.names)
    tree = "*" in names or bool(names & set(TREE_COLUMNS))
    wanted = set(VIEWS) if "@*" in names else {v for v in VIEWS if "@" + v in names}
    with contextlib.nullcontext(run) if run is not None else Runs().run() as run:
        run.use(con)
        try:
            if files:
                return _with_files(
                    con,
                    tables,
                    query,
                    params,
                    state,
                    names,
                    wanted,
                    session_ids,
                    run,
                    in_transaction=in_transaction,
                    memory=memory,
                )
            if in_transaction:
                try:
                    install(con, tables, state, tree, set(VIEWS), session_ids)
                    return _fetch(con, query, params, run)
                finally:
                    run.finish()
            install(con, tables, state, tree, wanted, session_ids)
            do(con, "BEGIN TRANSACTION")
            try:
                try:
                    return _fetch(con, query, params, run)
                except duckdb.CatalogException:
                    if state.get("views") == set(VIEWS) or run.reason:
                        raise
                    # a view reached in a way the parse tree does not show: every view, once more
                    do(con, "ROLLBACK")
                    install(con, tables, state, tree, set(VIEWS), session_ids)
                    do(con, "BEGIN TRANSACTION")
                    return _fetch(con, query, params, run)
            finally:
                run.finish()  # no interrupt reaches the connection from here on
                rollback(con)
        except duckdb.Error as exc:
            run.raise_if_stopped(exc)
            raise_if_out_of_memory(exc, memory)
            raise ValueError(f"store.sql: {exc}") from exc


def raise_if_out_of_memory(exc: BaseException, limit: str | None) -> None:
    """``QueryMemoryExceeded`` for DuckDB's out-of-memory error ``exc`` (``limit``: the
    store's ``sql_memory_limit``, or None for DuckDB's own)."""
    if not isinstance(exc, duckdb_module().OutOfMemoryException):
        return
    ceiling = (
        f"the store's memory limit of {limit} (sql_memory_limit)"
        if limit is not None
        else "DuckDB's memory limit (80% of RAM unless the store is opened with sql_memory_limit=...)"
    )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    raise QueryMemoryExceeded(
        f"store.sql: the query needed more memory than {ceiling} and was stopped ({first}); "
        "the store answers other queries as before"
    ) from exc


def rollback(con: duckdb.DuckDBPyConnection) -> None:
    duckdb = duckdb_module()
    for _ in range(2):  # (a second time: an interrupt that reached the first one)
        try:
            do(con, "ROLLBACK")
            return
        except duckdb.Error as exc:
            if "no transaction" in str(exc).lower():
                return


def _fetch(con: duckdb.DuckDBPyConnection, query: str, params: Any, run: QueryRun) -> pa.Table:
    """The query's result as a ``pyarrow.Table``; ``run`` stops it.

    In the main thread the query runs on a thread of its own while this one waits: DuckDB
    does not stop on Ctrl-C by itself (its Python client holds the signal back until the
    query ends), so the wait is where KeyboardInterrupt lands, and it stops DuckDB."""
    if threading.current_thread() is not threading.main_thread():
        return _fetch_now(con, query, params, run)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = _fetch_now(con, query, params, run)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            box["error"] = exc
        finally:
            done.set()

    # An Event, not Thread.join (a join that KeyboardInterrupt breaks may report the thread
    # ended while it still runs), waited on in slices: a signal that lands just before the
    # wait blocks leaves its handler pending until the wait wakes up.
    thread = threading.Thread(target=work, name="sessionkit-sql", daemon=True)
    try:
        thread.start()
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt:
        run.stop(_INTERRUPTED)
        while thread.ident is not None and not done.is_set():
            try:
                run.poke()
                done.wait(0.02)
            except KeyboardInterrupt:  # (pressed again: the query is stopping already)
                continue
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _fetch_now(con: duckdb.DuckDBPyConnection, query: str, params: Any, run: QueryRun) -> pa.Table:
    run.executing()
    rel = con.sql(query) if params is None else con.sql(query, params=params)
    if rel is None:  # (a SELECT always has a result; kept for the type checker)
        raise ValueError("store.sql: the query returned no result")
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow  # (DuckDB < 1.4)
    result = fetch()
    run.raise_if_stopped()
    return result


def _with_files(
    con: duckdb.DuckDBPyConnection,
    tables: dict[str, str],
    query: str,
    params: Any,
    state: dict[str, Any],
    names: set[str],
    wanted: set[str],
    session_ids: list[str] | None,
    run: QueryRun,
    *,
    in_transaction: bool = False,
    memory: str | None = None,
) -> pa.Table:
    """A query that may read local files: the views it names are read from ``con`` in one
    snapshot (as Arrow tables) into a new in-memory DuckDB connection that may read files
    and holds nothing else of the store (so the connection of the store or its cache is
    never opened up); the query runs there. ``in_transaction``: ``con`` is inside a
    transaction already (see :func:`run_query`), whose state the views are read in."""
    duckdb = duckdb_module()
    if "query_table" in names:  # (a view it names as a string: the parse tree does not say which)
        wanted = set(VIEWS)
    install(con, tables, state, True, wanted, session_ids)
    held = {}
    if not in_transaction:
        do(con, "BEGIN TRANSACTION")  # one snapshot for every view read
    try:
        for view in sorted(wanted):
            held[view] = _fetch(con, f"SELECT * FROM {view}", None, run)
    finally:
        if not in_transaction:
            rollback(con)
    files_con = duckdb.connect(":memory:", config=_config(memory))
    try:
        do(files_con, "SET TimeZone = 'UTC'")
        do(files_con, "SET lock_configuration = true")
        for view, table in held.items():
            files_con.register(view, table)
        run.use(files_con)
        do(files_con, "BEGIN TRANSACTION")
        return _fetch(files_con, query, params, run)
    finally:
        run.finish()
        with contextlib.suppress(duckdb.Error):
            files_con.close()


_INTERRUPTED = "interrupted"
_CLOSED = "closed"
_TIMEOUT = "timeout"


class QueryRun:
    """One query of :class:`Runs`: the connection it runs on (None until its DuckDB work
    begins: nothing of a cache's refresh is ever interrupted) and why it was asked to stop."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout
        self.con: Any = None
        self.reason: str | None = None
        self.running = False  # DuckDB is executing the query (see Runs.executing)
        self.finished = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    def use(self, con: duckdb.DuckDBPyConnection) -> None:
        """The query's DuckDB work runs on ``con`` from now on (unless it was stopped)."""
        with self.lock:
            self.raise_if_stopped()
            self.con = con

    def executing(self) -> None:
        self.raise_if_stopped()
        self.running = True

    def stop(self, reason: str) -> None:
        with self.lock:
            if self.reason is None:
                self.reason = reason
        self.poke()

    def poke(self) -> None:
        """DuckDB's interrupt, while the query is not finished (never the next one's)."""
        with self.lock:
            if not self.finished and self.con is not None:
                with contextlib.suppress(Exception):
                    self.con.interrupt()

    def finish(self) -> None:
        with self.lock:
            self.finished = True
            self.running = False

    def raise_if_stopped(self, cause: BaseException | None = None) -> None:
        if self.reason == _CLOSED:
            raise StoreClosed("the store was closed while the query ran") from cause
        if self.reason == _INTERRUPTED:
            raise KeyboardInterrupt("store.sql: the query was interrupted") from cause
        if self.reason == _TIMEOUT:
            raise QueryTimeout(f"store.sql: the query ran past its timeout of {self.timeout:g} s") from cause


class Runs:
    """The analysis queries running on one store (each from the start of its call, a
    cache's refresh included), so that they can be stopped.

    :meth:`close` (the store closes) stops every query running and refuses new ones
    (``StoreClosed``); :meth:`interrupt` stops those running now (``KeyboardInterrupt``).
    A query stops before its next DuckDB statement, or within one: DuckDB's ``interrupt()``
    of its connection, repeated until the query ends, since an interrupt that reaches
    DuckDB just before a statement starts is lost (DuckDB clears it as a statement begins)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[QueryRun] = set()
        self.closed = False

    @contextlib.contextmanager
    def run(self, timeout: float | None = None) -> Iterator[QueryRun]:
        """One query's entry; ``timeout`` (seconds from now) stops it with ``QueryTimeout``."""
        run = QueryRun(timeout)
        with self._lock:
            if self.closed:
                raise StoreClosed("the store is closed")
            self._running.add(run)
        if timeout is not None:
            threading.Thread(target=_time_out, args=(run, timeout), name="sessionkit-sql-timeout", daemon=True).start()
        try:
            yield run
        finally:
            run.finish()
            with self._lock:
                self._running.discard(run)
            run.done.set()

    def executing(self) -> int:
        """How many queries DuckDB is executing now (past their setup)."""
        with self._lock:
            return sum(1 for run in self._running if run.running)

    def interrupt(self) -> None:
        """Stop the queries running now (each raises ``KeyboardInterrupt``); returns at once."""
        with self._lock:
            runs = list(self._running)
        for run in runs:
            run.stop(_INTERRUPTED)
        if runs:
            threading.Thread(target=_until_done, args=(runs,), name="sessionkit-sql-interrupt", daemon=True).start()

    def close(self) -> None:
        """Refuse new queries and stop those running (``StoreClosed``); returns once those
        whose DuckDB work had begun have ended (the others stop before theirs begins)."""
        with self._lock:
            self.closed = True
            runs = list(self._running)
        for run in runs:
            run.stop(_CLOSED)
        _until_done([run for run in runs if run.con is not None])


def _time_out(run: QueryRun, timeout: float) -> None:
    """Stop ``run`` once ``timeout`` seconds have passed (unless it ended before). A
    thread of its own, waiting on the run's end: DuckDB has no statement timeout."""
    if not run.done.wait(timeout):
        run.stop(_TIMEOUT)
        _until_done([run])


def _until_done(runs: list[QueryRun]) -> None:
    for run in runs:
        while not run.done.wait(0.02):
            run.poke()


def install(
    con: duckdb.DuckDBPyConnection,
    tables: dict[str, str],
    state: dict[str, Any],
    tree: bool,
    wanted: set[str],
    session_ids: list[str] | None,
) -> None:
    """Define the views ``wanted`` on ``con`` (store-wide ones stay for the next query)."""
    if session_ids is not None:
        selects = view_sql(scoped(tables, session_ids), tree=tree)
        # the next query puts the store-wide views back (forgotten first: a query stopped
        # while these are made leaves no scoped view taken for a store-wide one)
        state.clear()
        state["views"] = set()
        for name in sorted(wanted):
            do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {selects[name]}")
        return
    have: set[str] = state.setdefault("views", set())
    if have and state.get("tree") != tree and "messages" in have:
        have.discard("messages")  # only messages differs between the two
    todo = wanted - have
    if not todo:
        state["tree"] = tree if "messages" in have else state.get("tree")
        return
    selects = view_sql(tables, tree=tree)
    for name in sorted(todo):
        do(con, f"CREATE OR REPLACE TEMP VIEW {name} AS {selects[name]}")
    have |= todo
    if "messages" in todo:
        state["tree"] = tree


#: The configuration of the analysis connections this module opens: no extension is
#: installed or loaded behind a query's back, no Python variable is read as a table.
_CONFIG = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "python_enable_replacements": False,
}


def _config(memory: str | None) -> dict[str, Any]:
    """:data:`_CONFIG` with the memory ceiling ``memory`` (None: DuckDB's default, 80% of RAM).

    A ceiling comes without spilling (``temp_directory`` empty): DuckDB would otherwise move
    what does not fit to a temporary folder (beside a cache file, or ``.tmp`` in the working
    directory for a cache in memory) up to 90% of the free disk, so a runaway query would
    fill the disk slowly instead of failing at once. A query that needs more fails with
    ``QueryMemoryExceeded``; a larger limit lets it finish. The default stays DuckDB's: a
    lower one would refuse large analyses that fit in memory today, and a store that must
    share its machine says so with ``sql_memory_limit``."""
    if memory is None:
        return _CONFIG
    return {**_CONFIG, "memory_limit": memory, "temp_directory": ""}


#: A DuckDB size: a number and a unit (DuckDB's own spellings, in any case).
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|bytes|kb|mb|gb|tb|kib|mib|gib|tib)\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})

#: The smallest ceiling: below it DuckDB cannot even make the cache's tables.
_MIN_MEMORY = 16 * 10**6


def memory_limit(value: Any) -> str | None:
    """``value`` checked as a ``sql_memory_limit`` (a DuckDB size such as ``"512MB"`` or
    ``"2GiB"``, at least 16MB), or None for none; ``ValueError`` naming what is wrong.
    Checked by hand, not by DuckDB: the option is checked as the store opens, before the
    optional DuckDB is imported (and a value DuckDB refuses later would leave the store
    without its analysis cache)."""
    if value is None:
        return None
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            f"sql_memory_limit must be a size with a unit such as '512MB' or '2GB' (B, KB, MB, GB, TB,"
            f" KiB, MiB, GiB, TiB), got {value!r}"
        )
    if float(match.group(1)) * _UNITS[match.group(2).lower()] < _MIN_MEMORY:
        raise ValueError(f"sql_memory_limit must be at least 16MB, got {value!r}")
    return value.strip()


def new_connection(
    source: duckdb.DuckDBPyConnection | None = None, path: str | None = None, memory: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for analysis: a cursor of ``source`` (a DuckDB store's own
    connection), the database file ``path`` or an in-memory database; times in UTC.

    A database of its own (a cache) is locked down: no file system access (its own file
    aside), no extension loaded, and its configuration locked, so that no query can change
    that (the settings hold for every connection to the database in this process).
    ``memory``: its memory ceiling (see :func:`_config`), set as the database opens; a
    file this process has open already with another ceiling raises DuckDB's
    ``ConnectionException``."""
    duckdb = duckdb_module()
    if source is not None:
        con = source.cursor()
        do(con, "SET TimeZone = 'UTC'")
        do(con, "SET enable_progress_bar = false")
        return con
    con = duckdb.connect(path or ":memory:", config=_config(memory))
    if not con.execute("SELECT current_setting('lock_configuration')").fetchall()[0][0]:
        do(con, "SET GLOBAL TimeZone = 'UTC'")
        do(con, "SET enable_progress_bar = false")
        do(con, "SET enable_external_access = false")
        do(con, "SET lock_configuration = true")
    return con
