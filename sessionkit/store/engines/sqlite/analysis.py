"""The SQLite engine's analysis source: how a :class:`~sessionkit.store.sql.cache.Cache`
reads a SQLite store's rows.

A file's cache is a DuckDB file beside it (``x.db-analysis.duckdb``), named after the name
the file is open by in this process (one file reached through two names, a hard link or a
bind mount, is opened through one: see ``_files``), so that its store objects share one
cache file under one name. Its rows are read through the ADBC SQLite driver when it is
installed (Arrow batches, read ahead by a thread while DuckDB writes), in one read
transaction of its own; else, and from inside a write transaction, through the engine.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...sql.cache import CACHE_SUFFIX, AnalysisSource, Cache, Reader, select_list
from ...sql.views import SOURCE_COLUMNS, SOURCE_TYPES, pyarrow_module

if TYPE_CHECKING:
    import pyarrow
    from adbc_driver_manager.dbapi import Cursor

    from .engine import SQLiteEngine

__all__ = ["SQLiteSource"]


class SQLiteSource(AnalysisSource):
    """A SQLite store's rows for its analysis cache: a cache file beside a file store (in
    memory for an in-memory store), read through the ADBC driver where it can be."""

    def __init__(self, engine: SQLiteEngine) -> None:
        name = engine._file or engine.path  # (the name the file is open by: see _files)
        super().__init__(engine, cache_file=None if name is None else name + CACHE_SUFFIX)
        adbc = None if name is None else _adbc_sqlite()
        if adbc is not None and name is not None:
            with contextlib.suppress(Exception):  # the driver cannot open it: read through the store
                self.direct = adbc.connect("file:" + name + "?mode=ro", autocommit=True)

    @contextlib.contextmanager
    def reading(self, cache: Cache, *, through_store: bool = False) -> Iterator[Reader]:
        if self.direct is None or through_store:
            with super().reading(cache, through_store=through_store) as rd:
                yield rd
            return
        with cache.lock:
            cur = self.direct.cursor()
            try:
                cur.execute("BEGIN")  # a read transaction: one state of the file until COMMIT
                try:
                    yield _AdbcReader(cache, cur)
                finally:
                    with contextlib.suppress(Exception):
                        cur.execute("COMMIT")
            finally:
                with contextlib.suppress(Exception):
                    cur.close()

    def close(self) -> None:
        if self.direct is not None:
            with contextlib.suppress(Exception):
                self.direct.close()
            self.direct = None


class _AdbcReader(Reader):
    """Reads for a refresh of a SQLite file through the ADBC SQLite driver, when it is
    installed: rows arrive as Arrow batches (no Python object per value), about four
    times faster than ``sqlite3`` rows. One read transaction: one state of the file."""

    def __init__(self, cache: Cache, cursor: Cursor) -> None:
        super().__init__(cache)
        self.cur = cursor

    def fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        self.cur.execute(sql, params or None)
        return [tuple(r) for r in self.cur.fetchall()]

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
        cols = cols or self.cache.columns(name)
        types = dict(zip(SOURCE_COLUMNS[name], SOURCE_TYPES[name]))
        # The driver types each column from its first rows: a first row with a value of the
        # right type in every column (and a marker -1 filtered out below) fixes them.
        first = {"BIGINT": "-1", "DOUBLE": "-1.0"}
        head = ", ".join(first.get(types[c], "''") + f" AS {c}" for c in cols)
        marker = _MARKER[name]
        sql = self.engine.compile(
            f"SELECT {head} UNION ALL SELECT {select_list(self.engine, name, cols)} FROM {{{name}}} {where}"
        )
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
    batches: queue.Queue[Any] = queue.Queue(depth)
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


#: The column of each table whose -1 marks _AdbcReader's typing row.
_MARKER = {
    "messages": "seq",
    "compactions": "seq",
    "runs": "n",
    "events": "seq",
    "labels": "seq",
    "embeddings": "seq",
    "datasets": "version",
    "dataset_items": "n",
}


def _adbc_sqlite() -> ModuleType | None:
    try:
        import adbc_driver_sqlite.dbapi as adbc  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        return None
    return adbc
