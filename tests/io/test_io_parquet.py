"""Parquet export: every message, session and compaction, readable without sessionkit."""

from __future__ import annotations

import importlib.util
import json

import pytest
from helpers import D1

import sessionkit as sk

# pyarrow is imported by the tests (through the ``pq`` fixture), not at collection
pytestmark = pytest.mark.skipif(importlib.util.find_spec("pyarrow") is None, reason="pyarrow is not installed")


@pytest.fixture
def pq():
    import pyarrow.parquet

    return pyarrow.parquet


def test_export_parquet_of_the_real_data(loaded, tmp_path, pq):
    store = loaded["store"]
    paths = sk.io.export_parquet(store, tmp_path / "out")
    assert sorted(paths) == sorted(["messages", "sessions", "compactions", "runs", "events", "labels"])
    messages = pq.read_table(paths["messages"])
    assert messages.column_names == D1 + ["seq", "metadata", "message"]
    assert messages.num_rows == store.stats()["messages"]
    seqs = messages.column("seq").to_pylist()
    assert seqs == sorted(seqs)  # write order
    rows = messages.slice(0, 50).to_pylist() + messages.slice(messages.num_rows - 50).to_pylist()
    for row in rows:
        assert json.loads(row["message"]) == store.session(row["session_id"]).get(row["id"])
    sessions = pq.read_table(paths["sessions"])
    assert sessions.num_rows == len(store.list_sessions())
    assert sum(sessions.column("message_count").to_pylist()) == messages.num_rows
    assert pq.read_table(paths["runs"]).num_rows == 0
    assert "cost_usd" in pq.read_table(paths["runs"]).column_names


def test_export_parquet_with_compactions_and_a_subset(store, tmp_path, pq):
    s = store.session("s")
    for i in range(6):
        s.append(
            {
                "id": f"m{i}",
                "role": "user" if i % 2 == 0 else "assistant",
                "parts": [{"type": "text", "text": f"message {i} " * 30}],
            }
        )
    s.on_compaction(lambda msgs, ctx: sk.CompactionResult("m0", "m3", "the gist"))
    comp = s.compact()
    store.session("other").append({"id": "x", "role": "user", "parts": []})
    paths = sk.io.export_parquet(store, tmp_path / "sub", session_ids=["s"])
    comps = pq.read_table(paths["compactions"]).to_pylist()
    assert [(c["id"], c["from_id"], c["to_id"], c["summary"], c["message_count"]) for c in comps] == [
        (comp.id, "m0", "m3", "the gist", 4)
    ]
    msgs = pq.read_table(paths["messages"]).to_pylist()
    assert [m["id"] for m in msgs] == [f"m{i}" for i in range(6)]
    assert [m["compacted_by"] for m in msgs] == [comp.id] * 4 + [None, None]
    with pytest.raises(ValueError, match="not a folder"):
        sk.io.export_parquet(store, paths["messages"])


def test_exported_labels_carry_their_provenance(store, tmp_path, pq):
    s = store.session("s")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    person = s.add_label("u1", "greeting", author="ana")
    judge = s.add_label("u1", "polite", source="llm", scorer="judge@2", rationale="says hello")
    rows = pq.read_table(sk.io.export_parquet(store, tmp_path / "out")["labels"]).to_pylist()
    got = [(r["id"], r["source"], r["scorer"], r["rationale"]) for r in rows]
    assert got == [(person.id, "human", None, None), (judge.id, "llm", "judge@2", "says hello")]
