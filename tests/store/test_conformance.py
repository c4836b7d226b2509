"""The store conformance suite on every store variant of the matrix (tests/conftest.py).

The whole suite runs on each engine's own variant: a SQLite file, a DuckDB file and
PostgreSQL in a schema of its own. The other variants run the same engine code as their
file variant, and the suite runs there only on what they change (``VARIANT_SCOPE``; the
root conftest deselects the rest):

- ``sqlite-window``, a SQLite file with a four-message search window, changes only how a
  search is answered: the search classes run there, so every search runs with the window
  in place;
- ``sqlite-memory`` and ``duckdb-memory`` change how the store is opened, closed, counted
  and kept (no file, no WAL, no fsync, nothing after close): the store lifecycle, writing,
  reading and transactions run there. Validation, compaction, search, the change feed, runs
  and the read models are the same statements on the same connection type as the file variant.
"""

from __future__ import annotations

import pytest

from sessionkit.testing.conformance import *  # noqa: F403

#: variant -> the suite's classes that run on it (a variant not named runs every class)
VARIANT_SCOPE = {
    "sqlite-window": {"TestSearch"},
    "sqlite-memory": {"TestStoresAndSessions", "TestWriting", "TestReading", "TestTransactions"},
    "duckdb-memory": {"TestStoresAndSessions", "TestWriting", "TestReading", "TestTransactions"},
}


@pytest.fixture
def make_store(store_variant, new_store):
    return lambda **opts: new_store(store_variant, **opts)


def _sqlite(store, what):
    con = store._engine._db  # the store's own connection, so in-memory stores can be inspected too
    if what == "tables":
        # FTS5 shadow tables carry the prefix of their virtual table
        rows = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall()
        return [r[0] for r in rows]
    if what == "version":
        return int(con.execute("SELECT value FROM sessionkit_meta WHERE key='schema_version'").fetchone()[0])
    if what in ("bump", "garbage"):
        value = "999" if what == "bump" else "not a number"
        con.execute("UPDATE sessionkit_meta SET value=? WHERE key='schema_version'", (value,))
        return True
    return None


def _duckdb(store, what):
    con = store._engine._db  # the store's own connection, so in-memory stores can be inspected too
    if what == "tables":
        rows = con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
        return [r[0] for r in rows]
    if what == "version":
        return int(con.execute("SELECT value FROM sessionkit_meta WHERE key = 'schema_version'").fetchone()[0])
    if what in ("bump", "garbage"):
        value = "999" if what == "bump" else "not a number"
        con.execute("UPDATE sessionkit_meta SET value = ? WHERE key = 'schema_version'", [value])
        return True
    return None


def _postgresql(store, what):
    eng = store._engine
    with eng._pool.connection() as conn:
        if what == "tables":
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (eng.schema,)
            ).fetchall()
            return [r[0] for r in rows]
        if what == "version":
            row = conn.execute(f"SELECT value FROM {eng.table('meta')} WHERE key = 'schema_version'").fetchone()
            return int(row[0])
        if what in ("bump", "garbage"):
            value = "999" if what == "bump" else "not a number"
            conn.execute(f"UPDATE {eng.table('meta')} SET value = %s WHERE key = 'schema_version'", (value,))
            return True
    return None


@pytest.fixture
def raw_sql():
    """Raw access to a store's schema, by its engine."""
    access = {"sqlite": _sqlite, "duckdb": _duckdb, "postgresql": _postgresql}
    return lambda store, what: access[store.settings.engine](store, what)
