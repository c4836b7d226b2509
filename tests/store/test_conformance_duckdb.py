"""The store conformance suite on the DuckDB engine: a file store and an in-memory store."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("duckdb")

import sessionkit as sk  # noqa: E402
from sessionkit.testing.conformance import *  # noqa: E402,F401,F403


@pytest.fixture(params=["file", "memory"])
def make_store(request, tmp_path):
    counter = itertools.count()
    if request.param == "memory":
        return lambda **opts: sk.open_store("duckdb:///:memory:", **opts)
    return lambda **opts: sk.open_store(tmp_path / f"store{next(counter)}.duckdb", **opts)


@pytest.fixture
def raw_sql():
    def access(store, what):
        # the store's own connection, so in-memory stores can be inspected too
        con = store._engine._db
        if what == "tables":
            rows = con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database()"
            ).fetchall()
            return [r[0] for r in rows]
        if what == "version":
            return int(con.execute("SELECT value FROM sessionkit_meta WHERE key = 'schema_version'").fetchone()[0])
        if what in ("bump", "garbage"):
            value = "999" if what == "bump" else "not a number"
            con.execute("UPDATE sessionkit_meta SET value = ? WHERE key = 'schema_version'", [value])
            return True
        return None

    return access
