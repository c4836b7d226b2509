"""The analysis never answers with rows the store does not hold.

``store.sql`` on a SQLite or PostgreSQL store reads a DuckDB cache of the store (a file
beside a SQLite file, else in memory). These tests hold it to the store where it could
drift: a store deleted and made again in the same place with the same ids, writes of a
transaction that rolls back, a message of many megabytes, and a query waiting for a
store that another thread's transaction holds.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers import msg, wait_until

import sessionkit as sk

READERS = ["adbc", "store connection"]


def _texts(store) -> list[str]:
    return store.sql("SELECT text FROM messages ORDER BY seq")["text"].tolist()


def _use_reader(monkeypatch, reader: str) -> None:
    """A SQLite file's cache reads through the ADBC driver when it is installed, else
    through the store's own connection."""
    from sessionkit.store.engines.sqlite import analysis as sqlite_source

    if reader == "adbc":
        pytest.importorskip("adbc_driver_sqlite", reason="the ADBC SQLite driver is in the analysis extra")
    else:
        monkeypatch.setattr(sqlite_source, "_adbc_sqlite", lambda: None)


def _build(path: Path, word: str) -> None:
    store = sk.open_store(str(path))
    try:
        store.session("s").append_many([msg(f"m{i}", f"{word} {i}") for i in range(3)])
        assert _texts(store) == [f"{word} {i}" for i in range(3)]
        assert store.messages_df()["text"].tolist() == [f"{word} {i}" for i in range(3)]
    finally:
        store.close()


@pytest.mark.parametrize("reader", READERS)
def test_a_store_made_again_in_the_same_place_is_never_answered_from_the_old_one(tmp_path, monkeypatch, reader):
    """Restart the kernel and run all, in a notebook that starts by deleting its store: the
    store's files go, its cache file beside them stays; the new store has the same ids."""
    _use_reader(monkeypatch, reader)
    path = tmp_path / "x.db"
    _build(path, "OLD")
    assert Path(str(path) + "-analysis.duckdb").exists()
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    store = sk.open_store(str(path))
    try:
        store.session("s").append_many([msg(f"m{i}", f"NEW {i}") for i in range(3)])
        assert [m["parts"][0]["text"] for m in store.session("s").get_history()] == [f"NEW {i}" for i in range(3)]
        assert _texts(store) == [f"NEW {i}" for i in range(3)]
        assert store.messages_df()["text"].tolist() == [f"NEW {i}" for i in range(3)]
        assert int(store.sql("SELECT count(*) AS n FROM messages")["n"][0]) == 3
    finally:
        store.close()


def test_each_store_has_an_id_of_its_own(tmp_path):
    """Two stores made in the same place one after the other are told apart by their id."""
    path = tmp_path / "y.db"
    ids = []
    for _ in range(2):
        store = sk.open_store(str(path))
        store.session("s").append(msg("m0", "hello"))
        store.close()
        import sqlite3

        with sqlite3.connect(path) as db:
            ids.append(db.execute("SELECT value FROM sessionkit_meta WHERE key = 'store_id'").fetchone()[0])
        path.unlink()
    assert all(len(i) == 32 for i in ids) and ids[0] != ids[1]


STORES = [
    "sqlite-memory",
    "sqlite-file-adbc",
    "sqlite-file-store-connection",
    "duckdb-file",
    pytest.param("postgresql", marks=pytest.mark.postgres),
]


def _open(new_store, monkeypatch, kind: str):
    if kind.startswith("sqlite-file"):
        _use_reader(monkeypatch, "adbc" if kind.endswith("adbc") else "store connection")
        return new_store("sqlite-file")
    return new_store(kind)


class Boom(Exception):
    pass


@pytest.mark.parametrize("kind", STORES)
def test_writes_of_a_transaction_that_rolls_back_never_reach_the_analysis(new_store, monkeypatch, kind):
    """Inside ``store.transaction()`` a query sees the transaction's own writes; once it rolls
    back, the analysis shows the store as it was, and a later append (which may reuse the
    rolled-back sequence number) appears."""
    store = _open(new_store, monkeypatch, kind)
    s = store.session("s")
    s.append(msg("a", "original"))
    assert _texts(store) == ["original"]
    with pytest.raises(Boom):
        with store.transaction():
            s.append(msg("ghost", "ghost"))
            s.update(msg("a", "rewritten"))
            assert sorted(_texts(store)) == ["ghost", "rewritten"]
            assert int(store.sql("SELECT count(*) AS n FROM messages")["n"][0]) == 2
            raise Boom
    assert _texts(store) == ["original"]
    assert store.messages_df()["id"].tolist() == ["a"]
    s.append(msg("b", "after"))
    assert _texts(store) == ["original", "after"]
    assert store.sql("SELECT id FROM messages ORDER BY seq")["id"].tolist() == ["a", "b"]
    # and a transaction that commits is seen whole
    with store.transaction():
        s.append(msg("c", "committed"))
        assert _texts(store) == ["original", "after", "committed"]
    assert _texts(store) == ["original", "after", "committed"]


@pytest.mark.parametrize("kind", STORES[1:])  # (a store in memory cannot be opened again)
def test_a_store_object_opened_again_after_a_rollback_agrees_with_the_store(new_store, monkeypatch, kind):
    """What a rolled-back transaction's query read is not left in a cache file either."""
    store = _open(new_store, monkeypatch, kind)
    s = store.session("s")
    s.append(msg("a", "original"))
    with pytest.raises(Boom):
        with store.transaction():
            s.append(msg("ghost", "ghost"))
            assert len(_texts(store)) == 2
            raise Boom
    path = store.path
    store.close()
    again = sk.open_store(path)
    try:
        assert _texts(again) == ["original"]
        again.session("s").append(msg("b", "after"))
        assert _texts(again) == ["original", "after"]
    finally:
        again.close()


@pytest.mark.parametrize("kind", ["sqlite-file", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_message_of_many_megabytes_reaches_the_analysis_whole(new_store, kind):
    """A text of 12 MB (PostgreSQL's cache reads CSV in blocks a row may not straddle)."""
    store = new_store(kind)
    s = store.session("s")
    s.append(msg("small", "small"))
    assert _texts(store) == ["small"]
    big = "x" * (12 << 20) + '"quoted", and\nlines'
    s.append(msg("big", big))
    got = store.sql("SELECT id, length(text) AS n, text[-18:] AS tail FROM messages ORDER BY seq")
    assert got["id"].tolist() == ["small", "big"]
    assert got["n"].tolist() == [5, len(big)]
    assert got["tail"].tolist()[1] == big[-18:]
    assert int(store.sql("SELECT count(*) AS n FROM messages")["n"][0]) == 2


@pytest.mark.parametrize(
    "kind", ["sqlite-file-store-connection", "sqlite-memory", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_query_inside_a_transaction_while_another_thread_waits_to_query(new_store, monkeypatch, kind):
    """Thread B's query waits for the store while thread A's transaction holds it; A's own
    query inside that transaction must not wait for B (which would wait for A forever)."""
    store = _open(new_store, monkeypatch, kind)
    store.session("s").append(msg("a", "first"))
    assert _texts(store) == ["first"]
    engine = store._engine
    b_waits = threading.Event()
    original = engine.snapshot

    def snapshot():
        if threading.current_thread().name == "query-b":
            b_waits.set()
        return original()

    monkeypatch.setattr(engine, "snapshot", snapshot)
    seen: dict = {}

    def query_b() -> None:
        seen["b"] = _texts(store)

    def transaction_a() -> None:
        with store.transaction():
            store.session("s").append(msg("b", "second"))
            b = threading.Thread(target=query_b, name="query-b", daemon=True)
            b.start()
            wait_until(b_waits.is_set, what="thread B's query to reach the store")
            seen["a"] = _texts(store)
        b.join()

    a = threading.Thread(target=transaction_a, name="transaction-a", daemon=True)
    a.start()
    wait_until(lambda: "a" in seen and "b" in seen, what="both queries to answer")
    a.join()
    assert seen["a"] == ["first", "second"]
    assert seen["b"] in (["first"], ["first", "second"])
    assert _texts(store) == ["first", "second"]
