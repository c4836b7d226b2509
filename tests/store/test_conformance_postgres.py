"""The store conformance suite on the PostgreSQL engine, each store in a schema of its own.

The server is a throwaway cluster started for the test run (or ``SESSIONKIT_PG_URL``);
see ``tests/store/pg_cluster.py``. Without one the tests skip, except under ``CI=true``.
"""

from __future__ import annotations

import pytest

import sessionkit as sk
from sessionkit.testing.conformance import *  # noqa: F401,F403

from .pg_cluster import pg_store_url, pg_url  # noqa: F401  (fixtures)


@pytest.fixture
def make_store(pg_store_url):  # noqa: F811
    return lambda **opts: sk.open_store(pg_store_url(), **opts)


@pytest.fixture
def raw_sql():
    def access(store, what):
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

    return access


def test_random_operation_sequences_match_the_reference_model_on_postgres(pg_url, monkeypatch):  # noqa: F811
    """The hypothesis state machine of test_state_machine.py, on a fresh schema per example.

    ``SESSIONKIT_PG_HYPOTHESIS_EXAMPLES`` sets the number of examples (25 by default: each
    example opens a new store on the server, so this engine runs fewer than the others).
    """
    import os

    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from . import test_state_machine as sm
    from .pg_cluster import new_store_url

    original = sm.open_engine

    def open_engine(engine, folder):
        if engine == "postgres":
            return sk.open_store(new_store_url(), chunk_chars=sm.CHUNK_CHARS)
        return original(engine, folder)

    monkeypatch.setattr(sm, "open_engine", open_engine)
    machine = type("StoreMachine_postgres", (sm.StoreMachine,), {"ENGINE": "postgres"})
    examples = int(os.environ.get("SESSIONKIT_PG_HYPOTHESIS_EXAMPLES", 25))
    run_state_machine_as_test(machine, settings=settings(sm.SETTINGS, max_examples=examples))
