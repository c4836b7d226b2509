"""Every fact of the every-fact store (seams/facts.py) appears in its view of ``store.sql``,
with the counts and values the public Python reads of the same store give."""

from __future__ import annotations

import json
from collections import Counter

import pytest

ENGINES = [pytest.param(e, marks=() if e == "sqlite" else pytest.mark.slow) for e in ("sqlite", "duckdb", "postgresql")]


def _rows(store, query: str) -> list[dict]:
    return store.sql_arrow(query).to_pylist()


def _messages(store, notes) -> dict[str, list[dict]]:
    return {sid: _all(store, sid) for sid in notes["sessions"]}


def _all(store, sid: str) -> list[dict]:
    session = store.session(sid)
    return [session.get(n.id) for n in session.nodes()]


def _tool_parts(message: dict) -> list[dict]:
    return [p for p in message["parts"] if p["type"].startswith("tool-") or p["type"] == "dynamic-tool"]


@pytest.mark.parametrize("engine", ENGINES)
def test_messages_paths_and_turns_show_every_message(engine, every_fact_store):
    store, notes = every_fact_store(engine)
    rows = _rows(store, "SELECT session_id, id, parent_id, depth, role, text, n_children FROM messages")
    assert len(rows) == sum(len(store.session(sid).nodes()) for sid in notes["sessions"])
    by_key = {(r["session_id"], r["id"]): r for r in rows}
    for sid in notes["sessions"]:
        session = store.session(sid)
        nodes = session.nodes()
        children = Counter(n.parent_id for n in nodes)
        for node in nodes:
            row = by_key[(sid, node.id)]
            assert (row["parent_id"], row["depth"], row["role"]) == (node.parent_id, node.depth, node.role)
            assert row["n_children"] == children[node.id]
            for part in session.get(node.id)["parts"]:
                if part["type"] == "text":
                    assert part["text"] in row["text"], (sid, node.id)
        leaves = {n.id for n in nodes if not children[n.id]}
        paths = _rows(store, f"SELECT leaf_id, is_latest, message_count FROM paths WHERE session_id = '{sid}'")
        assert {p["leaf_id"] for p in paths} == leaves, sid
        assert [p["leaf_id"] for p in paths if p["is_latest"]] == ([session.latest_leaf()["id"]] if nodes else [])
        for p in paths:
            assert p["message_count"] == len(session.get_history(leaf_id=p["leaf_id"], compacted=False)), (sid, p)
        turns = _rows(store, f"SELECT user_id FROM turns WHERE session_id = '{sid}'")
        assert sorted(t["user_id"] for t in turns) == sorted(n.id for n in nodes if n.role == "user"), sid
    big = by_key[("__proto__", "big")]
    assert len(big["text"]) > 1 << 20 and big["text"].endswith("The end.")


@pytest.mark.parametrize("engine", ENGINES)
def test_tool_calls_show_every_tool_part(engine, every_fact_store):
    store, notes = every_fact_store(engine)
    rows = _rows(
        store,
        "SELECT session_id, call_message_id, tool_call_id, tool_name, arguments, result, is_error FROM tool_calls",
    )
    expected = {}
    for sid in notes["sessions"]:
        for message in _all(store, sid):
            for part in _tool_parts(message):
                expected[(sid, message["id"], part["toolCallId"])] = part
    # a tool call answered in a separate tool message is one row, keyed by its call
    got = {(r["session_id"], r["call_message_id"], r["tool_call_id"]): r for r in rows}
    calls = {k: p for k, p in expected.items() if k in got}
    assert set(got) <= set(expected) | {k for k in got if k[0] == "otel-oslo"}, set(got) - set(expected)
    for needed in [
        ("__proto__", "t-call", "call-json"),
        ("__proto__", "t-call", "call-str"),
        ("__proto__", "t-call", "call-err"),
        ("__proto__", "big", "call-big"),
    ]:
        assert needed in got, needed
    assert any(k[0] == "agent" for k in got) and any(k[0] == "otel-oslo" for k in got)
    for key, part in calls.items():
        row = got[key]
        assert row["tool_name"] == part["type"].removeprefix("tool-"), key
        assert json.loads(row["arguments"]) == part["input"], key
        if part["state"] == "output-error":
            assert row["is_error"] and row["result"] == part["errorText"], key
        elif "output" in part:
            assert not row["is_error"], key
            output = part["output"]
            assert (row["result"] if isinstance(output, str) else json.loads(row["result"])) == output, key


@pytest.mark.parametrize("engine", ENGINES)
def test_labels_runs_events_and_embeddings_views(engine, every_fact_store):
    store, notes = every_fact_store(engine)
    labels = _rows(store, "SELECT * FROM labels")
    fields = (
        "session_id",
        "id",
        "message_id",
        "target",
        "tag",
        "rating",
        "note",
        "author",
        "source",
        "scorer",
        "rationale",
    )
    assert sorted(tuple(r[f] for f in fields) for r in labels) == sorted(
        tuple(getattr(label, f) for f in fields) for label in store.labels()
    )
    assert {r["source"] for r in labels} == {"human", "code"}
    runs = _rows(store, "SELECT * FROM runs")
    expected = [r for sid in notes["sessions"] for r in store.runs(sid)]
    assert len(runs) == len(expected)
    by_id = {r["run_id"]: r for r in runs}
    for run in expected:
        row = by_id[run.run_id]
        assert (row["session_id"], row["status"], row["error"], row["input"]) == (
            run.session_id,
            run.status,
            run.error,
            run.input,
        ), run.run_id
        usage = run.usage or {}
        assert row["cost_usd"] == usage.get("cost_usd") and row["model"] == usage.get("model"), run.run_id
        assert row["tokens_in"] == usage.get("in") and row["tokens_out"] == usage.get("out"), run.run_id
    assert {r["variant"] for r in runs} >= {"terse", "wordy"}
    assert {r["session_id"] for r in runs} >= {"agent", "otel-oslo", "captured"}
    for sid in notes["sessions"]:
        events = _rows(store, f"SELECT seq, kind, run_id FROM events WHERE session_id = '{sid}' ORDER BY seq")
        assert [(e["kind"], e["run_id"]) for e in events] == [
            (e["kind"], e.get("run_id")) for e in store.events(sid)
        ], sid
    embedded = {
        (r["session_id"], r["message_id"]) for r in _rows(store, "SELECT session_id, message_id FROM embeddings")
    }
    with_text = {
        (r["session_id"], r["id"]) for r in _rows(store, "SELECT session_id, id, text FROM messages") if r["text"]
    }
    assert with_text and with_text <= embedded, with_text - embedded
    # the vectors are those of the embedder
    row = _rows(store, "SELECT vector FROM embeddings WHERE session_id = 'tree' AND message_id = 'a1'")[0]
    want = notes["embedder"](["Check the deployment logs first."])[0]
    assert row["vector"] == pytest.approx(want)
