"""A SQLite search keeps what it read of the search window's state and the session's bounds
between searches, while the file is unchanged. Whatever changed it (another connection's
commit, this connection's write, a transaction rolled back) the next search answers as a
store opened afresh on the file answers.
"""

from __future__ import annotations

import random

import pytest
from helpers import msg

import sessionkit as sk

WORDS = "alpha beta gamma delta kiwi mango lemon plum".split()
QUERIES = ("kiwi", "alpha", "mango lemon", "plum")


def hits(store, query: str, sid: str | None) -> list[tuple[str, str, float]]:
    return [(h.session_id, h.id, round(h.score, 9)) for h in store.search(query, session_id=sid, limit=50)]


def assert_as_fresh(store, path: str, window: int) -> None:
    fresh = sk.open_store(path, search_window=window)
    try:
        for query in QUERIES:
            for sid in (None, "a", "b"):
                assert hits(store, query, sid) == hits(fresh, query, sid), (query, sid)
    finally:
        fresh.close()


@pytest.mark.parametrize("window", [8, 1 << 17])
def test_a_search_sees_what_another_connection_committed_since(tmp_path, window):
    """The other store's appends, deletes and updates reach the first store's next search,
    though the first store wrote nothing: its session bounds and the window's state must be
    read again."""
    path = str(tmp_path / "s.db")
    one = sk.open_store(path, search_window=window)
    two = sk.open_store(path, search_window=window)
    one.session("a").append(msg("a0", "alpha beta"))
    assert hits(one, "kiwi", "a") == [] and hits(one, "kiwi", None) == []
    for i in range(1, 30):
        two.session("a").append(msg(f"a{i}", "kiwi alpha" if i % 3 == 0 else "mango lemon"))
        two.session("b").append(msg(f"b{i}", "kiwi plum"))
        assert {m for _, m, _ in hits(one, "kiwi", "a")} == {f"a{j}" for j in range(3, i + 1, 3)}
        assert {m for _, m, _ in hits(one, "kiwi", "b")} == {f"b{j}" for j in range(1, i + 1)}
    assert_as_fresh(one, path, window)
    two.session("a").delete("a27", subtree=True)
    two.session("b").update(msg("b1", "gamma"))
    assert {m for _, m, _ in hits(one, "kiwi", "a")} == {f"a{j}" for j in range(3, 27, 3)}
    assert "b1" not in {m for _, m, _ in hits(one, "kiwi", None)}
    assert_as_fresh(one, path, window)
    one.close()
    two.close()


@pytest.mark.parametrize("window", [8, 1 << 17])
def test_searches_among_writes_and_rolled_back_transactions_answer_as_a_fresh_store(tmp_path, window):
    """Random appends (some in transactions that roll back after searching inside them),
    deletes and searches on one store; after each step its searches equal a fresh store's."""
    rng = random.Random(7)
    path = str(tmp_path / "s.db")
    store = sk.open_store(path, search_window=window)
    n = 0
    for _ in range(40):
        action = rng.choice(["append", "append", "rollback", "delete", "search"])
        sid = rng.choice("ab")
        if action == "append":
            for _ in range(rng.randint(1, 6)):
                n += 1
                store.session(sid).append(msg(f"m{n}", " ".join(rng.choices(WORDS, k=5))))
        elif action == "rollback":
            with pytest.raises(RuntimeError), store.transaction():
                for _ in range(rng.randint(1, 12)):
                    n += 1
                    store.session(sid).append(msg(f"m{n}", "kiwi " + " ".join(rng.choices(WORDS, k=4))))
                inside = {m for _, m, _ in hits(store, "kiwi", sid)}
                assert f"m{n}" in inside  # the transaction's own write is found inside it
                raise RuntimeError("roll back")
        elif action == "delete":
            ids = [m["id"] for m in store.session(sid).get_history()]
            if ids:
                store.session(sid).delete(rng.choice(ids), subtree=True)
        for query in QUERIES:
            hits(store, query, rng.choice(["a", "b", None]))
        assert_as_fresh(store, path, window)
    store.close()


def test_a_window_moved_in_a_rolled_back_transaction_is_read_again(tmp_path):
    """Searches inside a transaction move the window up (its appends) and roll back with it.
    The state they read there is the transaction's: a search after the rollback must not
    take it (here it would skip the window for session b, whose rows the window holds, and
    score b's hits with the whole store's statistics instead of the window's)."""
    path = str(tmp_path / "s.db")
    store = sk.open_store(path, search_window=8)
    for i in range(20):
        store.session("a").append(msg(f"a{i}", "kiwi mango" if i % 2 else "alpha plum"))
    store.session("b").append(msg("b0", "kiwi lemon"))
    store.session("b").append(msg("b1", "kiwi kiwi beta"))
    for _ in range(12):
        store.search("kiwi")  # the window made and filled: it holds b's rows
    lo, hi = store._engine.index.window()
    assert hi - lo + 1 == 8
    before = hits(store, "kiwi", "b")
    with pytest.raises(RuntimeError), store.transaction():
        for i in range(10):
            store.session("a").append(msg(f"t{i}", "kiwi gamma"))
        for _ in range(12):  # the window made afresh, filled and then left as it is
            for sid in (None, "a", "b"):
                hits(store, "kiwi", sid)
        moved = store._engine.index.window()
        assert moved[1] - moved[0] + 1 == 8 and moved[0] > lo  # past b's rows
        raise RuntimeError("roll back")
    assert store._engine.index.window() == (lo, hi)
    assert hits(store, "kiwi", "b") == before
    assert_as_fresh(store, path, 8)
    store.close()
