"""An append whose message is deleted by another writer between the one-statement fast
path ("already stored") and the read of the stored copy: the append sees the store after
the delete and stores the message again, instead of failing on the missing row (docs/errors.md:
reads racing writes see before or after, never an error)."""

from __future__ import annotations

import pytest
from helpers import msg

from sessionkit.store._values import Appended

#: every engine (the ``store`` fixture of tests/store/conftest.py opens one per test)
pytestmark = pytest.mark.parametrize("store", ["sqlite", "duckdb", "postgresql"], indirect=True)


def test_append_of_a_message_deleted_after_the_fast_path_saw_it_stores_it_again(store, monkeypatch):
    s = store.session("s")
    s.append(msg("a", "first"))
    engine = store._engine
    fast = engine.append_fast

    def deleted_meanwhile(*args, **kwargs):
        status = fast(*args, **kwargs)
        if status is Appended.EXISTS:
            store.session("s").delete("a")  # another writer, between the two statements
        return status

    monkeypatch.setattr(engine, "append_fast", deleted_meanwhile)
    res = s.append(msg("a", "second"))
    assert res.inserted
    assert res.message["id"] == "a"
    assert [m["parts"][0]["text"] for m in s.get_history()] == ["second"]


def test_append_of_a_stored_message_returns_the_stored_copy(store):
    s = store.session("s")
    s.append(msg("a", "first"))
    res = s.append(msg("a", "second"))
    assert not res.inserted
    assert res.message["parts"][0]["text"] == "first"
