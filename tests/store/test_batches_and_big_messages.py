"""Writes whose cost once grew with the wrong thing: a chain appended in one call takes a
number of statements that does not grow with its length (DuckDB); many one-message
sessions and a message of megabytes are stored and read back whole (every engine)."""

from __future__ import annotations

import random

import pytest
from helpers import msg

import sessionkit as sk


class _Counting:
    """A DuckDB connection that counts the statements run on it."""

    def __init__(self, con) -> None:
        self.con = con
        self.statements = 0

    def execute(self, *args, **kwargs):
        self.statements += 1
        return self.con.execute(*args, **kwargs)

    def executemany(self, *args, **kwargs):
        self.statements += 1
        return self.con.executemany(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.con, name)


def _chain_statements(new_store, n: int, *, indexed: bool, memory: bool) -> int:
    st = new_store("duckdb", memory=memory)
    s = st.session("s")
    s.append(msg("first", "before the chain"))
    if indexed:
        st.search("chain")  # builds the index
    counting = _Counting(st._engine._db)
    st._engine._db = counting
    try:
        results = s.append_many([msg(f"m{i}", f"chain message {i}") for i in range(n)])
    finally:
        st._engine._db = counting.con
    assert [r.inserted for r in results] == [True] * n
    assert [m["id"] for m in s.get_history()] == ["first", *(f"m{i}" for i in range(n))]
    return counting.statements


@pytest.mark.parametrize("memory", [False, True], ids=["file", "memory"])
@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
def test_a_chain_takes_the_same_statements_at_any_length(new_store, indexed, memory):
    pytest.importorskip("duckdb")
    few = _chain_statements(new_store, 5, indexed=indexed, memory=memory)
    many = _chain_statements(new_store, 300, indexed=indexed, memory=memory)
    assert many == few
    assert few <= 10


@pytest.mark.parametrize(
    "store", ["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"], indirect=True
)
def test_a_chain_with_stored_and_repeated_ids_keeps_each_once(store):
    s = store.session("s")
    s.append(msg("a", "one"))
    s.append(msg("b", "two"))
    results = s.append_many([msg("b", "again"), msg("c", "three"), msg("c", "twice"), msg("d", "four")], parent_id="a")
    assert [r.inserted for r in results] == [False, True, False, True]
    assert results[0].message["parts"][0]["text"] == "two"  # the stored message, not the new one
    assert results[2].message["parts"][0]["text"] == "three"
    assert [m["id"] for m in s.get_history()] == ["a", "b", "c", "d"]
    assert s.get("d")["parts"][0]["text"] == "four"
    with pytest.raises(sk.MessageNotFound):
        s.append_many([msg("e", "x"), msg("f", "y")], parent_id="nowhere")
    assert [m["id"] for m in s.get_history()] == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "store", ["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"], indirect=True
)
def test_many_one_message_sessions(store):
    n = 600
    for i in range(n):
        assert store.session(f"s{i}").append(msg(f"m{i}", f"text {i}")).inserted
    assert not store.session("s7").append(msg("m7", "again")).inserted
    assert store.session("s8").append(msg("m7", "another session")).inserted  # ids are per session
    assert store.stats()["sessions"] == n and store.stats()["messages"] == n + 1
    assert [m["id"] for m in store.session("s599").get_history()] == ["m599"]


@pytest.mark.parametrize("indexed", [False, True], ids=["plain", "indexed"])
# (the in-memory variants write through the same statements as the file ones)
@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize("store", ["sqlite-file", "duckdb-file", "postgresql"], indirect=True)
def test_a_message_of_megabytes_is_stored_whole(store, indexed):
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "needle"]
    text = " ".join(rng.choice(words[:-1]) for _ in range(300_000)) + " zeta needle"  # ~1.7 MB
    s = store.session("s")
    s.append(msg("small", "hello world"))
    if indexed:
        assert [h.id for h in store.search("hello")] == ["small"]
    s.append(msg("big", text))
    s.append(msg("after", "after the big one"))
    assert s.get("big")["parts"][0]["text"] == text
    assert [m["id"] for m in s.get_history()] == ["small", "big", "after"]
    assert [h.id for h in store.search("needle")] == ["big"]
    if store.settings.engine != "postgresql":  # (PostgreSQL records word positions up to 16,383 only)
        assert [h.id for h in store.search('"zeta needle"')] == ["big"]


@pytest.mark.parametrize("size", [100, 2_000_000], ids=["small", "large"])
def test_a_message_is_stemmed_once_when_appended_to_an_indexed_duckdb_store(new_store, monkeypatch, size):
    pytest.importorskip("duckdb")
    from sessionkit.store.engines.duckdb import search as engine_module

    st = new_store("duckdb")
    s = st.session("s")
    s.append(msg("first", "hello"))
    st.search("hello")  # builds the index: appends index as they write
    calls = []
    real = engine_module._search.index_text

    def counting(text):
        calls.append(len(text))
        return real(text)

    monkeypatch.setattr(engine_module._search, "index_text", counting)
    text = ("word " * (size // 5)).strip() + " needle"
    s.append(msg("m", text))
    assert len(calls) == 1
    assert [h.id for h in st.search("needle")] == ["m"]
