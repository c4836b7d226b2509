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
    views = ["messages", "sessions", "compactions", "runs", "events", "labels", "paths", "turns", "tool_calls"]
    # every view of store.sql
    assert sorted(paths) == sorted([*views, "embeddings", "datasets", "dataset_items", "experiments"])
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


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_a_scorers_labels_come_back_whole_so_scoring_again_skips_them(make_store, tmp_path, pq):
    store = make_store("sqlite")  # (the labels' columns are read alike on every engine: the seams test)
    s = store.session("s")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    s.append({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]})
    s.add_label("u1", "greeting", author="ana", rating=0.5, note="first")

    @sk.scorers.scorer(name="says", version="1")
    def says(unit):
        return sk.Score(tag="hello" if "hello" in unit.text else "other", rationale="read it")

    assert store.score(says, level="message", progress=False)["labelled"] == 2
    folder = tmp_path / "out"
    sk.io.export_parquet(store, folder)
    dst = make_store("sqlite")
    sk.io.import_parquet(dst, folder)
    assert [x.to_dict() for x in dst.labels()] == [x.to_dict() for x in store.labels()]
    assert all(x.fingerprint for x in dst.labels() if x.scorer)
    again = dst.score(says, level="message", progress=False)
    assert (again["units"], again["skipped"], again["scored"]) == (2, 2, 0)
    # an export written before the labels' provenance and fingerprints: a person's labels
    table = pq.read_table(folder / "labels.parquet")
    pq.write_table(table.drop_columns(["source", "scorer", "rationale", "fingerprint"]), folder / "labels.parquet")
    older = make_store("sqlite")
    sk.io.import_parquet(older, folder)
    got = [(x.id, x.tag, x.source, x.scorer, x.fingerprint, x.author, x.created_at) for x in older.labels()]
    assert got == [(x.id, x.tag, "human", None, None, x.author, x.created_at) for x in store.labels()]


def _small_export(store, folder):
    s = store.session("s")
    s.append_many([{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"m {i}"}]} for i in range(3)])
    store.add_label("s", "m1", "good")
    return sk.io.export_parquet(store, folder)


def test_a_subset_export_imports_only_those_sessions(store, make_store, tmp_path, pq):
    for sid in ("a", "b"):
        store.session(sid).append({"id": f"{sid}1", "role": "user", "parts": [{"type": "text", "text": sid}]})
        store.add_label(sid, f"{sid}1", "seen")
        store.run_log.append_events(sid, [{"kind": "note"}])
    sk.io.export_parquet(store, tmp_path / "b", session_ids=["b"])
    assert {r["session_id"] for r in pq.read_table(tmp_path / "b" / "labels.parquet").to_pylist()} == {"b"}
    dst = make_store("sqlite")
    assert [s.session_id for s in sk.io.import_parquet(dst, tmp_path / "b")] == ["b"]
    assert [i.id for i in dst.list_sessions()] == ["b"]
    assert [label.message_id for label in dst.labels()] == ["b1"]
    assert dst.events("b") == store.events("b") and dst.events("a") == []


def test_import_parquet_refuses_what_is_no_export_and_names_the_row_at_fault(store, make_store, tmp_path, pq):
    import pyarrow as pa

    with pytest.raises(sk.UsageError, match="does not exist"):
        sk.io.import_parquet(store, tmp_path / "missing")
    (tmp_path / "file.parquet").write_bytes(b"PAR1")
    with pytest.raises(sk.UsageError, match="is a file: a Parquet export is a folder"):
        sk.io.import_parquet(store, tmp_path / "file.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(sk.UsageError, match="not a folder holding a Parquet export"):
        sk.io.import_parquet(store, tmp_path / "empty")
    folder = tmp_path / "pq"
    _small_export(make_store("sqlite"), folder)

    # a column missing: refused before anything is stored
    table = pq.read_table(folder / "labels.parquet")
    pq.write_table(table.drop_columns(["tag"]), folder / "labels.parquet")
    with pytest.raises(sk.io.MalformedInput, match="labels.parquet: no column 'tag'"):
        sk.io.import_parquet(store, folder)
    assert store.stats()["messages"] == 0

    # a file that is no Parquet
    (folder / "labels.parquet").write_text("not parquet")
    with pytest.raises(sk.io.MalformedInput, match="labels.parquet: not a Parquet file"):
        sk.io.import_parquet(store, folder)

    # a message whose JSON is broken: the rows of its batch are named, nothing of it stored
    pq.write_table(table, folder / "labels.parquet")
    messages = pq.read_table(folder / "messages.parquet").to_pylist()
    messages[2]["message"] = "{broken"
    pq.write_table(
        pa.Table.from_pylist(messages, schema=pq.read_schema(folder / "messages.parquet")), folder / "messages.parquet"
    )
    with pytest.raises(sk.io.MalformedInput, match="messages.parquet, row 3: 'message' is not JSON"):
        sk.io.import_parquet(store, folder)
    assert store.stats()["messages"] == 0


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_import_parquet_is_detected_by_the_command(tmp_path, make_store):
    import subprocess
    import sys

    folder = tmp_path / "pq"
    src = make_store("sqlite", folder=tmp_path, name="src")
    _small_export(src, folder)
    target = tmp_path / "restored.duckdb"
    done = subprocess.run(
        [sys.executable, "-m", "sessionkit", "import", str(target), str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "(parquet)" in done.stdout and "3 new messages, 1 new session" in done.stdout
    with sk.open_store(target) as restored:
        assert restored.session("s").get_history() == src.session("s").get_history()
        assert restored.labels() == src.labels()
