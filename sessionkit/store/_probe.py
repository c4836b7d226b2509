"""Does a target already hold a sessionkit store? (``open_store(..., create=False)``)

Opening a store creates its tables, so a reader that must not create anything
(the command line, a script inspecting a file it was handed) asks first. Each check
reads without writing: SQLite opens the file read-only, DuckDB read-only, PostgreSQL
looks the meta table up in the catalog. Where a check cannot decide (the file is not
a database at all, the server does not answer, another process holds the file), it
answers True and leaves the verdict to opening, whose error names the problem.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

__all__ = ["holds_store"]

_META = "sessionkit_meta"


def holds_store(engine: str, location: str, options: dict[str, Any]) -> bool:
    """Whether ``location`` (a file path, or a PostgreSQL URL) holds sessionkit's tables."""
    if engine == "sqlite":
        return _sqlite(location)
    if engine == "duckdb":
        return _duckdb(location)
    return _postgres(location, options)


def _sqlite(path: str) -> bool:
    import sqlite3

    if os.path.getsize(path) == 0:
        return False
    try:
        db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return True
    return any(name.startswith("sessionkit_") for (name,) in rows)


def _duckdb(path: str) -> bool:
    if os.path.getsize(path) == 0:
        return False
    try:
        import duckdb
    except ImportError:
        return True
    try:
        con = duckdb.connect(path, read_only=True)
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


def _postgres(url: str, options: dict[str, Any]) -> bool:
    try:
        import psycopg
    except ImportError:
        return True  # opening names the missing extra
    from .engines.postgresql.engine import PostgresEngine
    from .engines.postgresql.text import _parse_url

    quote = PostgresEngine.quote
    conninfo, schema = _parse_url(url)
    schema = options.get("schema") or schema
    timeout = max(1, int(options.get("connect_timeout", 10)))
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=timeout) as conn:
            if schema is None:
                schema = conn.execute("SELECT current_schema()").fetchone()[0]  # type: ignore[index]  # one row
                if schema is None:
                    return False
            name = f"{quote(schema)}.{quote(_META)}"
            found = conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0]  # type: ignore[index]  # one row
            return found is not None
    except psycopg.Error:
        return True
