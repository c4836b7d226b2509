"""Importers write a group of records (pairs, trees, blocks of lines) with one ``store.import_many``:
a few statements for the whole group, and still each record stored whole or not at all."""

from __future__ import annotations

import json

import pytest

import sessionkit as sk


def _pair(i: int, pad: str = "") -> dict:
    human = f"\n\nHuman: question {i}{pad}"
    return {"chosen": f"{human}\n\nAssistant: yes {i}", "rejected": f"{human}\n\nAssistant: no {i}"}


def _hh(path, pairs: list[dict]):
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs), encoding="utf-8")
    return path


def _text(mid: str, text: str) -> dict:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


# The grouped write is the engine's own code on DuckDB (w_import_records); SQLite writes each
# record in turn. Both must keep the rule.
@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_a_pair_the_store_refuses_fails_alone_and_the_pairs_before_it_stay(kind, new_store, tmp_path):
    store = new_store(kind, max_message_bytes=2000)
    pairs = [_pair(i) for i in range(6)]
    pairs[3] = _pair(3, pad="x" * 5000)  # refused by the store, inside the group's import_many
    path = _hh(tmp_path / "hh.jsonl", pairs)
    with pytest.raises(sk.MessageTooLarge) as info:
        sk.io.import_hh(store, path)
    assert str(info.value).startswith(f"{path}, line 4: ")
    assert "the 3 pairs before it are stored, through line 3" in str(info.value)
    # each pair: the shared question, then the rejected and the chosen answer
    assert (store.stats()["sessions"], store.stats()["messages"]) == (3, 9)
    pairs[3] = _pair(3)
    sessions = sk.io.import_hh(store, _hh(path, pairs))  # the corrected file completes the import
    assert len(sessions) == 6 and (store.stats()["sessions"], store.stats()["messages"]) == (6, 18)
    assert [m["id"] for m in sessions[3].get_history()] == ["p0", "c1"]


@pytest.mark.parametrize("kind", ["sqlite", "duckdb"])
def test_store_import_many_is_each_session_in_turn_and_all_or_nothing(kind, new_store):
    store = new_store(kind)
    with pytest.raises(sk.MessageNotFound, match="'missing' is not in session 'b'"):
        store.import_many([("a", [(_text("a1", "x"), None, None)]), ("b", [(_text("b1", "y"), "missing", None)])])
    assert store.stats()["messages"] == 0 and store.sessions_holding(["a", "b"]) == set()
    records = [
        ("a", [(_text("a1", "x"), None, None)]),
        ("a", [(_text("a2", "y"), "a1", None), (_text("a1", "changed"), None, None)]),  # a parent of record 1
        ("b", [(_text("b1", "z"), None, None)]),
    ]
    results = store.import_many(records)
    assert [[r.inserted for r in rs] for rs in results] == [[True], [True, False], [True]]
    assert results[1][1].message["parts"][0]["text"] == "x"  # the stored message, as import_many gives it
    assert [m["id"] for m in store.session("a").get_history()] == ["a1", "a2"]
    again = store.import_many(records)
    assert [[r.inserted for r in rs] for rs in again] == [[False], [False, False], [False]]
    assert store.stats()["messages"] == 3
    assert store.sessions_holding(["b", "a", "none", "a"]) == {"a", "b"}


def test_a_group_of_pairs_takes_a_few_statements_on_duckdb(new_store, tmp_path, monkeypatch):
    store = new_store("duckdb")
    engine = store._engine
    statements: list[str] = []
    for name in ("fetch", "fetch_one", "execute", "_direct"):
        real = getattr(engine, name)
        monkeypatch.setattr(engine, name, lambda *a, _real=real, **k: (statements.append(a[0]), _real(*a, **k))[1])
    small = _hh(tmp_path / "small.jsonl", [_pair(i) for i in range(10)])
    large = _hh(tmp_path / "large.jsonl", [_pair(i) for i in range(10, 190)])
    sk.io.import_hh(store, small)
    for_10 = len(statements)
    statements.clear()
    sk.io.import_hh(store, large)
    for_180 = len(statements)
    assert store.stats()["sessions"] == 190
    # one group each: no statement per pair (the new sessions are known to hold nothing)
    assert for_180 <= for_10 + 2 < 20, (for_10, for_180)
    statements.clear()
    sk.io.import_hh(store, large)  # idempotent: one read of the group's ids, nothing written
    assert len(statements) <= for_10 + 4 and store.stats()["messages"] == 570
