"""Does a DuckDB file already hold a sessionkit store? Read without writing (the file opened
read-only); where that cannot decide (not DuckDB, held by another process, duckdb not
installed) it answers True, leaving the verdict to opening, whose error names the problem."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["holds_store"]

_META = "sessionkit_meta"


def holds_store(location: str, options: dict[str, Any]) -> bool:
    """Whether the file ``location`` holds sessionkit's tables."""
    if os.path.getsize(location) == 0:
        return False
    try:
        import duckdb
    except ImportError:
        return True
    try:
        con = duckdb.connect(location, read_only=True)
    except Exception:  # not DuckDB, held by another process, opened here with other settings
        return True
    try:
        row = con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE schema_name = 'main' AND table_name = ?", [_META]
        ).fetchone()
        return bool(row[0])  # type: ignore[index]  # count(*) returns one row
    except Exception:
        return True
    finally:
        con.close()
