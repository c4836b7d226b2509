"""``sql_memory_limit``: the memory ceiling of ``store.sql``, on every engine (the analysis
cache's DuckDB database of a SQLite or PostgreSQL store, a DuckDB store's own database). A
query that needs more raises ``QueryMemoryExceeded`` at once (no spilling to disk), and the
store answers the next query right; a DuckDB store keeps appending under the limit."""

from __future__ import annotations

import pytest
from helpers import msg

import sessionkit as sk

VARIANTS = ["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"]

#: One string of about 200 MB built by an aggregate (whose state DuckDB cannot spill):
#: past a 64MB limit within its first blocks.
HUNGRY = "SELECT length(string_agg(range::VARCHAR, ',')) AS n FROM range(30000000)"


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_query_past_the_limit_fails_and_the_store_answers_the_next(new_store, variant):
    store = new_store(variant, sql_memory_limit="64MB")
    store.session("s").append_many([msg("m1"), msg("m2"), msg("m3", role="assistant")])
    with pytest.raises(sk.QueryMemoryExceeded, match="memory limit of 64MB"):
        store.sql(HUNGRY)
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 3
    # a query reading local files runs on a connection of its own, under the same limit
    with pytest.raises(sk.QueryMemoryExceeded):
        store.sql(HUNGRY, files=True)
    store.session("s").append(msg("m4"))
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 4


def test_a_duckdb_store_appends_and_reads_under_a_modest_limit(new_store):
    store = new_store("duckdb", sql_memory_limit="64MB")
    sess = store.session("s")
    sess.append_many([msg(f"m{i}", f"message {i} " + "word " * 50) for i in range(300)])
    with pytest.raises(sk.QueryMemoryExceeded):
        store.sql(HUNGRY)
    with store.transaction():
        sess.append(msg("m300", "inside a transaction"))
    assert [m["id"] for m in sess.history()][-2:] == ["m299", "m300"]
    assert [hit.id for hit in store.search("inside")] == ["m300"]
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 301


def test_without_the_option_a_small_query_is_unaffected(new_store):
    store = new_store("sqlite")
    store.session("s").append_many([msg("m1"), msg("m2")])
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 2
    assert store.sql("SELECT count(*) AS n FROM range(100000)")["n"][0] == 100000


@pytest.mark.parametrize(
    ("value", "match"),
    [("64", "a size with a unit"), (64_000_000, "a size with a unit"), ("lots", "a size with a unit"), ("1MB", "16MB")],
)
def test_a_bad_limit_is_refused_before_anything_is_created(tmp_path, value, match):
    path = tmp_path / "chats.db"
    with pytest.raises(ValueError, match=match):
        sk.open_store(str(path), sql_memory_limit=value)
    assert not path.exists()


def test_a_duckdb_store_refuses_two_limits_that_disagree(tmp_path):
    with pytest.raises(ValueError, match="disagrees"):
        sk.open_store(str(tmp_path / "x.duckdb"), sql_memory_limit="64MB", memory_limit="1GB")


def test_two_store_objects_on_one_sqlite_file_each_keep_their_limit(tmp_path):
    path = str(tmp_path / "chats.db")
    with sk.open_store(path) as first, sk.open_store(path, sql_memory_limit="64MB") as second:
        first.session("s").append(msg("m1"))
        assert first.sql("SELECT count(*) AS n FROM messages")["n"][0] == 1
        with pytest.raises(sk.QueryMemoryExceeded):
            second.sql(HUNGRY)
        assert second.sql("SELECT count(*) AS n FROM messages")["n"][0] == 1
