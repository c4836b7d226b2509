"""Does a PostgreSQL schema already hold a sessionkit store? The meta table looked up in the
catalog, nothing created; where that cannot decide (the server does not answer, psycopg is
not installed) it answers True, leaving the verdict to opening, whose error names the problem."""

from __future__ import annotations

from typing import Any

from ..._sql_base import SQLBase
from .text import _parse_url

__all__ = ["holds_store"]

_META = "sessionkit_meta"


def holds_store(location: str, options: dict[str, Any]) -> bool:
    """Whether the schema of the URL ``location`` (or ``options["schema"]``) holds sessionkit's tables."""
    try:
        import psycopg
    except ImportError:
        return True  # opening names the missing extra
    quote = SQLBase.quote
    conninfo, schema = _parse_url(location)
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
