"""A store migrated from any earlier schema version has the schema of a store created at the
current one, on every engine: the same tables, columns (type, nullability, default), keys,
indexes, triggers, sequences and stored functions, and the same ledger and meta keys.

Each engine's oldest layout is the one its first files were written in (kept here as the
DDL of that release); every later version is that layout brought up to the version by the
ledger's own steps (the ledger cut at that version), then closed and opened by the current
code. Column order is not compared: a column added by a migration comes last in its table,
and nothing reads columns by position. Two differences of form are not differences of
schema: SQLite's NOT NULL on a primary key that is not an INTEGER (the first files left it
implicit; a key is never written NULL), and uniqueness declared as a UNIQUE constraint (first
files) or a unique index (since): on DuckDB the columns held unique are compared, on
PostgreSQL the unique indexes (a UNIQUE constraint makes one).
The ledger holds a row for every step from version 5 on (where it begins).
"""

from __future__ import annotations

import contextlib
import sqlite3
from urllib.parse import parse_qs, urlsplit

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.store import _schema, _sql, _sql_base
from sessionkit.store.engines.duckdb import engine as duckdb
from sessionkit.store.engines.postgresql import engine as postgres
from sessionkit.store.engines.sqlite import engine as sqlite

from .test_duckdb_specific import V1_SCHEMA as DUCKDB_V1
from .test_sqlite_specific import V2_FTS_TRIGGERS, V2_RECORDS, V2_SCHEMA

CURRENT = _schema.SCHEMA_VERSION


def test_the_version_is_the_ledgers_last_step():
    assert CURRENT == _schema.MIGRATIONS[-1].version
    assert [m.version for m in _schema.MIGRATIONS] == list(range(2, CURRENT + 1))
    assert sqlite.SCHEMA_VERSION == duckdb.SCHEMA_VERSION == postgres.SCHEMA_VERSION == CURRENT


@contextlib.contextmanager
def ledger_cut_at(version: int):
    """The code as it was at ``version``: the ledger up to it, and that version written."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_sql_base, "MIGRATIONS", tuple(m for m in _schema.MIGRATIONS if m.version <= version))
        for module in (_sql, _sql_base, sqlite, duckdb, postgres):
            mp.setattr(module, "SCHEMA_VERSION", version)
        yield


def ledger_and_meta(store) -> tuple[list[int], list[str], int]:
    eng = store._engine
    versions = [r[0] for r in eng.fetch(eng.compile("SELECT version FROM {migrations} ORDER BY version"))]
    keys = sorted(r[0] for r in eng.fetch(eng.compile("SELECT key FROM {meta}")))
    return versions, keys, store.stats()["schema_version"]


# ---------------------------------------------------------------------------
# Catalogs, read with each engine's own driver


def sqlite_catalog(path: str) -> dict:
    con = sqlite3.connect(path)
    out: dict = {}
    for kind, name, table, sql in con.execute(
        "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    ):
        if kind == "table":
            cols = con.execute(f"PRAGMA table_xinfo('{name}')").fetchall()
            out[kind, name] = (
                sorted((c[1], c[2].upper(), "key" if c[5] else c[3], c[4], c[5], c[6]) for c in cols),
                "WITHOUT ROWID" in sql.upper(),
                "AUTOINCREMENT" in sql.upper(),
                sql.upper().startswith("CREATE VIRTUAL TABLE"),
            )
        elif kind == "index":
            info = con.execute(f"PRAGMA index_xinfo('{name}')").fetchall()
            unique = [r[2] for r in con.execute(f"PRAGMA index_list('{table}')") if r[1] == name]
            where = sql.upper().partition(" WHERE ")[2].strip()
            out[kind, name] = (table, unique, [(r[2], r[3], r[5]) for r in info], where)
        else:
            out[kind, name] = (table, " ".join(sql.split()))
    con.close()
    return out


def duckdb_catalog(path: str) -> dict:
    import duckdb as ddb

    con = ddb.connect(path, read_only=True)
    q = lambda sql: sorted(con.execute(sql).fetchall(), key=repr)  # noqa: E731
    out = {
        "columns": q(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM duckdb_columns()"
            " WHERE NOT internal AND schema_name = 'main'"
        ),
        "constraints": q(
            "SELECT table_name, constraint_type, constraint_column_names FROM duckdb_constraints()"
            " WHERE schema_name = 'main' AND constraint_type NOT IN ('NOT NULL', 'UNIQUE')"
        ),
        "unique": q(
            "SELECT table_name, constraint_column_names::VARCHAR FROM duckdb_constraints()"
            " WHERE schema_name = 'main' AND constraint_type = 'UNIQUE'"
            " UNION SELECT table_name, list_transform(string_split(trim(expressions, '[]'), ', '),"
            " lambda x: trim(x, '\"'))::VARCHAR"
            " FROM duckdb_indexes() WHERE schema_name = 'main' AND is_unique"
        ),
        "indexes": q(
            "SELECT index_name, table_name, sql FROM duckdb_indexes() WHERE schema_name = 'main' AND NOT is_unique"
        ),
        "sequences": q("SELECT sequence_name FROM duckdb_sequences() WHERE schema_name = 'main'"),
        "views": q("SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'"),
    }
    con.close()
    return out


def pg_catalog(url: str) -> dict:
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    base = url.split("?")[0]
    with psycopg.connect(base) as conn:
        q = lambda sql: sorted(conn.execute(sql, (schema,)).fetchall(), key=repr)  # noqa: E731
        out = {
            "columns": q(
                "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity,"
                " identity_generation FROM information_schema.columns WHERE table_schema = %s"
            ),
            "constraints": q(
                "SELECT c.conrelid::regclass::text, c.contype, pg_get_constraintdef(c.oid) FROM pg_constraint c"
                " JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = %s AND c.contype <> 'u'"
            ),
            "indexes": q("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %s"),
            "functions": q(
                "SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid)"
                " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %s"
            ),
        }
    return {k: [tuple(str(x).replace(schema, "<schema>") for x in row) for row in v] for k, v in out.items()}


# ---------------------------------------------------------------------------
# SQLite: its first layout (version 1, and 2 with the records table), then every later version


def sqlite_layout(path: str, version: int) -> None:
    con = sqlite3.connect(path, isolation_level=None)
    for stmt in V2_SCHEMA:
        if version >= 2 or stmt is not V2_RECORDS:
            con.execute(stmt)
    for stmt in V2_FTS_TRIGGERS:
        con.execute(stmt)
    con.execute("INSERT INTO sessionkit_meta VALUES ('schema_version', ?), ('index_built', '0')", (str(version),))
    con.close()


@pytest.mark.parametrize("start", range(1, CURRENT))
def test_sqlite_store_migrated_from_every_version_has_the_current_schema(tmp_path, start):
    fresh = str(tmp_path / "fresh.db")
    with sk.open_store(fresh) as store:
        store.session("s").append(msg("a", "kiwi"))
        store.search("kiwi")  # (the search index is built in both)
        fresh_ledger = ledger_and_meta(store)
    old = str(tmp_path / "old.db")
    sqlite_layout(old, min(start, 2))
    if start > 2:
        with ledger_cut_at(start), sk.open_store(old) as store:
            assert store.stats()["schema_version"] == start
    with sk.open_store(old) as store:
        store.session("s").append(msg("a", "kiwi"))
        versions, keys, version = ledger_and_meta(store)
        assert [h.id for h in store.search("kiwi")] == ["a"]
    assert sqlite_catalog(old) == sqlite_catalog(fresh)
    assert version == fresh_ledger[2] == CURRENT
    assert keys == fresh_ledger[1]
    assert versions == [v for v in fresh_ledger[0] if v >= 5]


# ---------------------------------------------------------------------------
# DuckDB: its first layout (version 1)


def duckdb_layout(path: str) -> None:
    import duckdb as ddb

    con = ddb.connect(path)
    for stmt in DUCKDB_V1:
        con.execute(stmt)
    con.close()


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize("start", range(1, CURRENT))
def test_duckdb_store_migrated_from_every_version_has_the_current_schema(tmp_path, start):
    fresh = str(tmp_path / "fresh.duckdb")
    with sk.open_store(fresh) as store:
        store.session("s").append(msg("b", "kiwi"))
        store.search("kiwi")  # (the search index is built in both)
        fresh_ledger = ledger_and_meta(store)
    old = str(tmp_path / "old.duckdb")
    duckdb_layout(old)
    if start > 1:
        with ledger_cut_at(start), sk.open_store(old) as store:
            assert store.stats()["schema_version"] == start
    with sk.open_store(old) as store:
        store.session("").append(msg("b", "kiwi"))  # the first layout's message is in session ""
        versions, keys, version = ledger_and_meta(store)
        assert {h.id for h in store.search("kiwi")} == {"a", "b"}
    assert duckdb_catalog(old) == duckdb_catalog(fresh)
    assert version == fresh_ledger[2] == CURRENT
    assert keys == fresh_ledger[1]
    assert versions == [v for v in fresh_ledger[0] if v >= 5]


# ---------------------------------------------------------------------------
# PostgreSQL: its first released layout (written as version 2, the ledger's version 4)

PG_V4 = [
    "CREATE TABLE {meta} (key text PRIMARY KEY, value text NOT NULL)",
    """CREATE TABLE {messages} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id text NOT NULL, id text NOT NULL,
        parent_id text, depth integer NOT NULL, role text NOT NULL, created_at text NOT NULL,
        bytes bigint NOT NULL, tokens bigint NOT NULL, path_bytes bigint NOT NULL, path_tokens bigint NOT NULL,
        chunks integer NOT NULL DEFAULT 0, content text NOT NULL,
        CONSTRAINT sessionkit_messages_key UNIQUE (session_id, id))""",
    "CREATE INDEX sessionkit_messages_children ON {messages} (session_id, parent_id)",
    "CREATE INDEX sessionkit_messages_order ON {messages} (session_id, seq)",
    "CREATE TABLE {chunks} (seq bigint NOT NULL, n integer NOT NULL, data text NOT NULL, PRIMARY KEY (seq, n))",
    "CREATE TABLE {blobs} (sha256 text PRIMARY KEY, size bigint NOT NULL, data bytea NOT NULL)",
    "CREATE TABLE {blob_refs} (seq bigint NOT NULL, sha256 text NOT NULL, PRIMARY KEY (seq, sha256))",
    "CREATE INDEX sessionkit_blob_refs_sha ON {blob_refs} (sha256)",
    """CREATE TABLE {compactions} (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, session_id text NOT NULL, id text NOT NULL,
        from_id text NOT NULL, to_id text NOT NULL, summary text NOT NULL, created_at text NOT NULL,
        tokens_before bigint NOT NULL, tokens_after bigint NOT NULL)""",
    "CREATE INDEX sessionkit_compactions_session ON {compactions} (session_id, seq)",
    "CREATE TABLE {search} (seq bigint PRIMARY KEY, session_id text NOT NULL, body tsvector NOT NULL)",
    "CREATE INDEX sessionkit_search_body ON {search} USING gin (body)",
    "CREATE INDEX sessionkit_search_session ON {search} (session_id, seq)",
    """CREATE TABLE {runs} (
        run_id text PRIMARY KEY, session_id text NOT NULL, status text NOT NULL, input text, error text,
        started_at text NOT NULL, ended_at text, usage text, n integer NOT NULL)""",
    "CREATE INDEX sessionkit_runs_session ON {runs} (session_id, n)",
    """CREATE TABLE {events} (
        session_id text NOT NULL, seq bigint NOT NULL, run_id text, data text NOT NULL,
        PRIMARY KEY (session_id, seq))""",
    """CREATE TABLE {records} (
        session_id text NOT NULL, kind text NOT NULL, n bigint NOT NULL, data text NOT NULL,
        PRIMARY KEY (session_id, kind, n))""",
    "CREATE TABLE {listeners} (origin text PRIMARY KEY, seen_at timestamptz NOT NULL DEFAULT now())",
    # the append function of that release (its signature; migration 6 drops it)
    """CREATE FUNCTION {fn_append}(
        p_sid text, p_id text, p_kind text, p_parent_id text, p_role text, p_created text,
        p_bytes bigint, p_tokens bigint, p_content text, p_index tsvector,
        p_index_key bigint, p_session_key bigint, p_channel text, p_notes text[]
    ) RETURNS bigint LANGUAGE plpgsql AS $f$ BEGIN RETURN NULL; END $f$""",
    "INSERT INTO {meta} (key, value) VALUES ('schema_version', '2'), ('index_built', '0')",
    """INSERT INTO {messages} (session_id, id, parent_id, depth, role, created_at, bytes, tokens, path_bytes,
        path_tokens, content) VALUES ('s', 'a', NULL, 0, 'user', '2026-01-01T00:00:00.000Z', 10, 5, 10, 5,
        '{{"id":"a","role":"user","parts":[{{"type":"text","text":"old kiwi"}}],"createdAt":"2026-01-01T00:00:00.000Z"}}')""",  # noqa: E501
]


def pg_layout(url: str) -> None:
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    q = '"' + schema.replace('"', '""') + '"'
    names = {
        t: f"{q}.sessionkit_{t}"
        for t in ("meta", "messages", "chunks", "blobs", "blob_refs", "compactions", "search", "runs", "events")
    }
    names.update(records=f"{q}.sessionkit_records", listeners=f"{q}.sessionkit_listeners")
    names["fn_append"] = f"{q}.sessionkit_append"
    with psycopg.connect(url.split("?")[0]) as conn:
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
        for stmt in PG_V4:
            conn.execute(stmt.format(**names))


@pytest.mark.postgres
@pytest.mark.parametrize("start", range(4, CURRENT))
def test_postgres_store_migrated_from_every_version_has_the_current_schema(pg_store_url, start):
    fresh = pg_store_url()
    with sk.open_store(fresh) as store:
        store.session("s").append(msg("b", "kiwi"))
        store.search("kiwi")  # (the search index is built in both)
        fresh_ledger = ledger_and_meta(store)
    old = pg_store_url()
    pg_layout(old)
    if start > 4:
        with ledger_cut_at(start), sk.open_store(old) as store:
            assert store.stats()["schema_version"] == start
    with sk.open_store(old) as store:
        store.session("s").append(msg("b", "kiwi"))
        versions, keys, version = ledger_and_meta(store)
        assert {h.id for h in store.search("kiwi")} == {"a", "b"}
        assert store.session("s").get("a")["parts"][0]["text"] == "old kiwi"
    assert pg_catalog(old) == pg_catalog(fresh)
    assert version == fresh_ledger[2] == CURRENT
    assert keys == fresh_ledger[1]
    assert versions == [v for v in fresh_ledger[0] if v >= 5]
