"""The PostgreSQL engine's analysis source: how a :class:`~sessionkit.store.sql.cache.Cache`
reads a PostgreSQL store's rows.

The cache lives in memory. A table's rows come as the CSV of one ``COPY ... TO STDOUT``
(:meth:`PostgresEngine.copy_csv`) in the refresh's snapshot, parsed into Arrow batches by
pyarrow's CSV reader. Concurrent transactions commit in any order, so the source's rows
are not ``ordered``: each refresh also compares counts (see the cache).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...sql.cache import ARROW_TYPES, WHOLE_CONTENT_BYTES, AnalysisSource, Cache, Reader, select_list
from ...sql.views import SOURCE_COLUMNS, SOURCE_TYPES, pyarrow_csv_module, pyarrow_module

if TYPE_CHECKING:
    from .engine import PostgresEngine

__all__ = ["PostgresSource"]


class PostgresSource(AnalysisSource):
    """A PostgreSQL store's rows for its analysis cache (in memory), through COPY."""

    #: Concurrent transactions commit in any order: a row may appear below a seq already seen.
    ordered = False

    def reader(self, cache: Cache) -> Reader:
        return _CopyReader(cache)


class _CopyReader(Reader):
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
        params: tuple[Any, ...] = (),
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
        sql = self.engine.compile(f"SELECT {select_list(self.engine, name, cols)} FROM {{{name}}} {where}")
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
            WHOLE_CONTENT_BYTES if name == "messages" and c == "content" else f"coalesce(octet_length({c}), 0)"
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
                column_types={c: ARROW_TYPES[types[c]](pa) for c in cols},
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
