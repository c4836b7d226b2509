"""The store conformance suite on the SQLite engine: a file store, an in-memory store, and
a file store whose search window (a second index of the newest messages) is four
messages wide, so the suite's searches run with the window in place."""

from __future__ import annotations

import itertools
import pytest

import sessionkit as sk
from sessionkit.testing.conformance import *  # noqa: F401,F403


@pytest.fixture(params=["file", "memory", "window"])
def make_store(request, tmp_path):
    counter = itertools.count()
    if request.param == "memory":
        return lambda **opts: sk.open_store(":memory:", **opts)
    if request.param == "window":
        return lambda **opts: sk.open_store(tmp_path / f"store{next(counter)}.db", **{"search_window": 4, **opts})
    return lambda **opts: sk.open_store(tmp_path / f"store{next(counter)}.db", **opts)


@pytest.fixture
def raw_sql():
    def access(store, what):
        # the store's own connection, so in-memory stores can be inspected too
        con = store._engine._db
        if True:
            if what == "tables":
                rows = con.execute(
                    "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
                ).fetchall()
                # FTS5 shadow tables carry the prefix of their virtual table
                return [r[0] for r in rows]
            if what == "version":
                return int(con.execute("SELECT value FROM sessionkit_meta WHERE key='schema_version'").fetchone()[0])
            if what in ("bump", "garbage"):
                value = "999" if what == "bump" else "not a number"
                con.execute("UPDATE sessionkit_meta SET value=? WHERE key='schema_version'", (value,))
                return True

    return access
