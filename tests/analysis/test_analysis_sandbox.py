"""``store.sql`` is a sandbox: a query reads the analysis views, its CTEs and a few table
functions, and nothing else of the machine -- no file, no environment, no table of the
store or of its cache, no catalog function, no statement that changes the sandbox. Every
refusal is a ``ValueError`` naming what was refused; ``files=True`` opens local files to a
query, and only then. On every engine (SQLite file and memory, DuckDB file and memory,
PostgreSQL)."""

from __future__ import annotations

import asyncio

import pytest
from helpers import msg

import sessionkit as sk

VARIANTS = ["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"]


@pytest.fixture(params=VARIANTS)
def store(request, new_store):
    """A store of each variant holding one session of two messages."""
    st = new_store(request.param)
    s = st.session("s")
    s.append(msg("u1", "hello"))
    s.append(msg("a1", "hi there", role="assistant"))
    return st


def _refused(store, query: str, params=None, *, names: str) -> None:
    with pytest.raises(ValueError, match="store.sql") as info:
        store.sql(query, params)
    assert names.lower() in str(info.value).lower(), str(info.value)
    # the store answers the next query as before
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 2


FILE_QUERIES = [
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv"),
    ("SELECT * FROM read_csv_auto('/etc/passwd')", "read_csv_auto"),
    ("SELECT * FROM glob('/etc/*')", "glob"),
    ("SELECT * FROM read_text('/proc/self/environ')", "read_text"),
    ("SELECT * FROM read_blob('/etc/hostname')", "read_blob"),
    ("SELECT * FROM read_parquet('/tmp/any.parquet')", "read_parquet"),
    ("SELECT * FROM read_json('/tmp/any.json')", "read_json"),
    ("SELECT * FROM '/etc/passwd'", "/etc/passwd"),
    ("SELECT count(*) FROM messages m JOIN read_csv('/etc/passwd') p ON true", "read_csv"),
    ("SELECT (SELECT count(*) FROM glob('/etc/*')) AS n", "glob"),
    ("WITH f AS (SELECT * FROM read_text('/proc/self/environ')) SELECT * FROM f", "read_text"),
]


def test_no_file_is_read(store, monkeypatch):
    monkeypatch.setenv("SESSIONKIT_TOKEN", "token-that-must-stay-here")
    for query, names in FILE_QUERIES:
        with pytest.raises(ValueError, match="files=True") as info:
            store.sql(query)
        assert names in str(info.value) and "token-that-must-stay-here" not in str(info.value)
        assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 2


CATALOG_QUERIES = [
    ("SELECT * FROM sessionkit_blobs", "sessionkit_blobs"),
    ("SELECT * FROM sessionkit_messages", "sessionkit_messages"),
    ("SELECT * FROM sessionkit_meta", "sessionkit_meta"),
    ("SELECT * FROM sessionkit_cache_meta", "sessionkit_cache_meta"),
    ("SELECT * FROM main.messages", "main.messages"),
    ("SELECT * FROM temp.main.sessionkit_messages", "sessionkit_messages"),
    # a CTE's own body, or a query outside its scope, does not see it: the store's table would be read
    ("WITH sessionkit_blobs AS (SELECT * FROM sessionkit_blobs) SELECT * FROM sessionkit_blobs", "sessionkit_blobs"),
    ("SELECT * FROM (WITH x AS (SELECT 1) SELECT * FROM x), sessionkit_messages", "sessionkit_messages"),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a", "'b'"),
    ("SELECT * FROM duckdb_tables()", "duckdb_tables"),
    ("SELECT * FROM duckdb_settings()", "duckdb_settings"),
    ("SELECT * FROM duckdb_extensions()", "duckdb_extensions"),
    ("SELECT * FROM pragma_database_list()", "pragma_database_list"),
    ("SELECT current_setting('memory_limit') AS v", "current_setting"),
    ("SELECT pg_get_viewdef(1) AS v", "pg_get_viewdef"),
    ("SELECT * FROM histogram(sessionkit_messages, seq)", "histogram"),
    ("SELECT * FROM query_table('sessionkit_messages')", "query_table"),
    ("SELECT * FROM query('SELECT * FROM sessionkit_blobs')", "query"),
    ("DESCRIBE sessionkit_messages", "DESCRIBE"),
    ("SHOW TABLES", "SHOW"),
    ("SUMMARIZE messages", "SUMMARIZE"),
]


def test_no_table_of_the_store_nor_the_catalog_is_read(store):
    for query, names in CATALOG_QUERIES:
        _refused(store, query, names=names)


STATEMENTS = [
    ("ATTACH '/tmp/other.duckdb' AS other", "ATTACH"),
    ("COPY (SELECT * FROM messages) TO '/tmp/out.csv'", "COPY"),
    ("INSTALL httpfs", "LOAD statement"),
    ("LOAD httpfs", "LOAD"),
    ("SET enable_external_access = true", "SET"),
    ("RESET lock_configuration", "SET"),
    ("PRAGMA enable_profiling", "PRAGMA"),
    ("CALL duckdb_tables()", "CALL"),
    ("EXPORT DATABASE '/tmp/dump'", "EXPORT"),
    ("SELECT 1; SELECT * FROM sessionkit_blobs", "2 statements"),
]


def test_no_statement_changes_the_sandbox(store):
    for query, names in STATEMENTS:
        _refused(store, query, names=names)


SURROGATES = [
    ("SELECT '\ud800' AS x", None, "the query"),
    ("SELECT ? AS x", ["ok", "\udfff"], "params[1]"),
    ("SELECT ? AS x", [["a", "\ud800"]], "params[0][1]"),
    ("SELECT $x AS x", {"x": "\ud800"}, "params['x']"),
    ("SELECT 1 AS x", {"\ud800": 1}, "a key of params"),
]


def test_a_lone_surrogate_in_the_query_or_its_parameters_is_a_value_error(store):
    for query, params, names in SURROGATES:
        with pytest.raises(ValueError, match="not valid Unicode") as info:
            store.sql(query, params)
        assert names in str(info.value)
    assert store.sql("SELECT ? AS x", ["\u00e9t\u00e9 \U0001f600"])["x"][0] == "\u00e9t\u00e9 \U0001f600"


def test_the_views_ctes_table_functions_and_parameters_still_work(store):
    assert store.sql("SELECT id FROM messages ORDER BY seq")["id"].tolist() == ["u1", "a1"]
    got = store.sql(
        "WITH r AS (SELECT role, count(*) AS n FROM messages GROUP BY role) "
        "SELECT r.role, r.n, s.message_count FROM r, sessions s ORDER BY r.role"
    )
    assert got.to_dict("records") == [
        {"role": "assistant", "n": 1, "message_count": 2},
        {"role": "user", "n": 1, "message_count": 2},
    ]
    assert (
        store.sql(
            "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT sum(n) AS s FROM t"
        )["s"][0]
        == 15
    )
    assert store.sql("SELECT sum(range) AS s FROM range(10)")["s"][0] == 45
    assert store.sql("SELECT count(*) AS n FROM generate_series(1, 4)")["n"][0] == 4
    assert store.sql("SELECT count(*) AS n FROM unnest([1, 2, 3])")["n"][0] == 3
    assert store.sql("SELECT count(*) AS n FROM messages WHERE role = ?", ["user"])["n"][0] == 1
    assert store.sql("SELECT count(*) AS n FROM messages WHERE id = $id", {"id": "a1"})["n"][0] == 1
    assert store.sql("SELECT session_id FROM query_table('sessions')")["session_id"].tolist() == ["s"]
    for view in ("compactions", "runs", "events"):
        assert len(store.sql(f"SELECT * FROM {view}")) == 0
    assert store.messages_df()["id"].tolist() == ["u1", "a1"]


@pytest.mark.slow
def test_files_true_joins_local_files_and_only_when_asked(store, tmp_path):
    scores = tmp_path / "scores.csv"
    scores.write_text("id,score\nu1,5\na1,7\n", encoding="utf-8")
    query = f"SELECT m.id, f.score FROM messages m JOIN read_csv('{scores}') f USING (id) ORDER BY m.seq"
    with pytest.raises(ValueError, match="files=True"):
        store.sql(query)
    assert store.sql(query, files=True).to_dict("records") == [{"id": "u1", "score": 5}, {"id": "a1", "score": 7}]
    assert store.sql(f"SELECT sum(score) AS s FROM '{scores}'", files=True)["s"][0] == 12
    assert (
        store.sql(
            "SELECT count(*) AS n FROM messages m JOIN sessions s USING (session_id) WHERE s.message_count = ?",
            [2],
            files=True,
        )["n"][0]
        == 2
    )
    assert store.sql("SELECT count(*) AS n FROM query_table('messages')", files=True)["n"][0] == 2
    table = store.sql_arrow(query, session_ids=["s"], files=True)
    assert table.column("score").to_pylist() == [5, 7]
    # still a sandbox for the rest: the store's tables, the catalog, other statements
    for refused in (
        "SELECT * FROM sessionkit_messages",
        "SELECT * FROM duckdb_tables()",
        f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'",
    ):
        with pytest.raises(ValueError, match="store.sql"):
            store.sql(refused, files=True)
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(TypeError, match="files"):
        store.sql("SELECT 1", files="yes")
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 2


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"])
def aio_target(request, tmp_path):
    """A store target of each variant for ``sk.aio.open_store``."""
    variant = request.param
    if variant == "postgresql":
        request.getfixturevalue("pg_url")  # fails under CI=true without a server
        from store.pg_cluster import new_store_url

        return new_store_url()
    return {
        "sqlite-file": tmp_path / "a.db",
        "sqlite-memory": ":memory:",
        "duckdb-file": tmp_path / "a.duckdb",
        "duckdb-memory": "duckdb:///:memory:",
    }[variant]


def test_files_true_through_sk_aio(aio_target, tmp_path):
    scores = tmp_path / "scores.csv"
    scores.write_text("id,score\nu1,5\n", encoding="utf-8")
    query = f"SELECT count(*) AS n FROM messages JOIN read_csv('{scores}') USING (id)"

    async def main():
        async with sk.aio.open_store(aio_target) as astore:
            await astore.session("s").append(msg("u1"))
            with pytest.raises(ValueError, match="files=True"):
                await astore.sql(query)
            assert (await astore.sql(query, files=True))["n"][0] == 1
            assert (await astore.sql_arrow(query, files=True)).column("n").to_pylist() == [1]

    asyncio.run(main())


@pytest.mark.slow
def test_the_cache_connection_is_locked_down_by_duckdb(new_store):
    """Beyond the parse-tree check, DuckDB itself refuses files, extensions and setting
    changes on a cache's connection (SQLite and PostgreSQL stores), and its own work goes on."""
    import duckdb

    for kind in ("sqlite-file", "sqlite-memory", "postgresql"):
        store = new_store(kind)
        store.session("s").append(msg("u1"))
        assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 1
        con = store._engine._analysis.con
        for statement in (
            "SELECT * FROM read_csv('/etc/passwd')",
            "ATTACH '/tmp/x.duckdb'",
            "COPY sessionkit_messages TO '/tmp/x.csv'",
            "LOAD httpfs",
            "SET enable_external_access = true",
            "SET lock_configuration = false",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(statement).fetchall()
        store.session("s").append(msg("u2"))
        assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 2
