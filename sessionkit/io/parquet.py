"""Parquet export: the analysis tables of a store, one file each, for pandas, Polars, DuckDB or Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import missing
from ._reading import as_path

__all__ = ["export_parquet"]


def export_parquet(store, folder: Any, *, session_ids=None) -> dict[str, Path]:
    """Write ``messages``, ``sessions``, ``compactions``, ``runs`` and ``events`` as Parquet files.

    ``folder`` is created when missing; existing files of those names are replaced.
    ``messages.parquet`` holds the columns of the ``messages`` view (docs/analysis.md) plus ``seq`` (write order),
    ``metadata`` and ``message`` (the whole message as JSON text, so the export
    loses nothing); the other files have the columns of the ``store.sql`` views
    (see :mod:`sessionkit.analysis`). ``session_ids`` limits the export to those
    sessions. Returns ``{table name: path}``. Needs pyarrow (the ``analysis`` extra).
    """
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    from ..analysis import TABLES, StoreData, arrow_table

    folder = as_path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{str(folder)!r} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    data = StoreData(store, session_ids)
    out = {}
    for name in TABLES:
        table = arrow_table(data, name, full_json=True) if name == "messages" else arrow_table(data, name)
        target = folder / f"{name}.parquet"
        pq.write_table(table, target)
        out[name] = target
    return out
