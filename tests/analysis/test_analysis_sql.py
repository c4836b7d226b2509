"""store.sql: DuckDB SQL over messages, sessions, compactions, runs and events of any store.

The expected answers are computed here from the source files, without sessionkit.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from helpers import D1

import sessionkit as sk

_TURN = re.compile(r"\n\n(Human|Assistant): ")


def _oasst_nodes(tree):
    """(message id, depth, number of replies, role) for every message of a source tree."""
    out, stack = [], [(tree["prompt"], 0)]
    while stack:
        node, depth = stack.pop()
        out.append((node["message_id"], depth, len(node["replies"]), node["role"]))
        stack.extend((r, depth + 1) for r in node["replies"])
    return out


def _hh_shape(rec):
    """(roles of the stored messages, depth of the deepest one) for one HH pair."""

    def turns(text):
        pieces = _TURN.split(text)
        return list(zip(pieces[1::2], pieces[2::2]))

    a, b = turns(rec["chosen"]), turns(rec["rejected"])
    shared = 0
    while shared < min(len(a), len(b)) - 1 and a[shared] == b[shared]:
        shared += 1
    roles = [r for r, _ in a] + [r for r, _ in b[shared:]]
    names = {"Human": "user", "Assistant": "assistant"}
    return [names[r] for r in roles], max(len(a), len(b)) - 1


def test_messages_per_role(real):
    expected = Counter()
    for tree in real["oasst"]:
        expected.update({"prompter": "user"}.get(role, role) for *_, role in _oasst_nodes(tree))
    for rec in real["tau"]:
        expected.update(m["role"] for m in rec["traj"] if m["role"] != "tool")
    for rec in real["hh"]:
        expected.update(_hh_shape(rec)[0])
    df = real["store"].sql("SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY n DESC")
    assert dict(zip(df["role"], df["n"])) == expected
    assert list(df["n"]) == sorted(expected.values(), reverse=True)


def test_the_tool_most_called(real):
    calls = Counter(
        c["function"]["name"] for rec in real["tau"] for m in rec["traj"] for c in (m.get("tool_calls") or [])
    )
    (top, n), (_, runner_up) = calls.most_common(2)
    assert n > runner_up  # a unique answer
    df = real["store"].sql(
        "SELECT tool, count(*) AS calls FROM (SELECT unnest(tool_names) AS tool FROM messages) "
        "GROUP BY tool ORDER BY calls DESC, tool LIMIT 3"
    )
    assert (df["tool"][0], df["calls"][0]) == (top, n)
    assert list(df["calls"]) == [c for _, c in calls.most_common(3)]


def test_the_deepest_tree(real):
    depth = {}
    for tree in real["oasst"]:
        depth["oasst-" + tree["message_tree_id"]] = max(d for _, d, _, _ in _oasst_nodes(tree))
    for rec in real["tau"]:
        depth[f"tau-{rec['task_id']}-{rec['trial']}"] = sum(1 for m in rec["traj"] if m["role"] != "tool") - 1
    hh_depths = [_hh_shape(rec)[1] for rec in real["hh"]]
    deepest = max(list(depth.values()) + hh_depths)
    df = real["store"].sql(
        "SELECT session_id, max(depth) AS depth FROM messages GROUP BY session_id "
        "HAVING max(depth) = (SELECT max(depth) FROM messages) ORDER BY session_id"
    )
    assert set(df["depth"]) == {deepest}
    assert set(df["session_id"]) >= {sid for sid, d in depth.items() if d == deepest}
    assert len(df) == sum(1 for d in list(depth.values()) + hh_depths if d == deepest)
    # the deepest OpenAssistant tree, asked the same way through the sessions view
    oasst_max = max(d for sid, d in depth.items() if sid.startswith("oasst-"))
    got = real["store"].sql(
        "SELECT session_id FROM sessions WHERE session_id LIKE 'oasst-%' AND max_depth = ?", [oasst_max]
    )
    assert set(got["session_id"]) == {sid for sid, d in depth.items() if d == oasst_max and sid.startswith("oasst-")}


def test_the_widest_branch_point(real):
    replies = {}
    for tree in real["oasst"]:
        for mid, _, n, _ in _oasst_nodes(tree):
            replies[("oasst-" + tree["message_tree_id"], mid)] = n
    widest = max(replies.values())
    assert widest == 9  # as SOURCES.md states for this file
    df = real["store"].sql(
        "SELECT session_id, id, n_children FROM messages "
        "WHERE n_children = (SELECT max(n_children) FROM messages) ORDER BY session_id, id"
    )
    assert set(df["n_children"]) == {widest}
    assert set(zip(df["session_id"], df["id"])) == {k for k, n in replies.items() if n == widest}


def test_sessions_view_counts_leaves_and_branch_points(real):
    df = real["store"].sql("SELECT * FROM sessions WHERE session_id LIKE 'oasst-%'")
    got = {r["session_id"]: r for r in df.to_dict("records")}
    assert len(got) == len(real["oasst"])
    for tree in real["oasst"]:
        nodes = _oasst_nodes(tree)
        row = got["oasst-" + tree["message_tree_id"]]
        assert row["message_count"] == len(nodes)
        assert row["leaves"] == sum(1 for *_, n, _ in nodes if n == 0)
        assert row["branch_points"] == sum(1 for *_, n, _ in nodes if n > 1)
        assert row["roots"] == 1


def test_metadata_is_queryable_as_json(store, sources, tmp_path):
    import json

    pairs = sources["hh"][:40]
    path = tmp_path / "hh.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in pairs), encoding="utf-8")
    sk.io.import_hh(store, path)
    df = store.sql(
        "SELECT json_extract(metadata, '$.hh.chosen')::BOOLEAN AS chosen, count(*) AS leaves FROM messages "
        "WHERE n_children = 0 GROUP BY 1 ORDER BY 1"
    )
    assert df.to_dict("records") == [{"chosen": False, "leaves": 40}, {"chosen": True, "leaves": 40}]
    latest = store.sql(
        "SELECT count(*) AS n FROM messages WHERE on_latest_path AND n_children = 0 "
        "AND json_extract(metadata, '$.hh.chosen')::BOOLEAN"
    )
    assert latest["n"][0] == 40  # every session's latest leaf is its chosen reply


def test_runs_events_and_compactions_views(store):
    s = store.session("s")
    for i in range(4):
        s.append({"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": "x " * 50}]})
    s.on_compaction(lambda msgs, ctx: sk.CompactionResult("m0", "m2", "short"))
    comp = s.compact()
    store.run_log.begin("s", "s.1", "hello")
    store.run_log.end(
        "s.1",
        status="completed",
        error=None,
        usage={"in": 10, "out": 5, "cache_read": 0, "cache_write": 0, "cost_usd": 0.002, "model": "m"},
    )
    store.run_log.begin("runs-only", "r.1", "hi")  # a session with a run and no message
    store.run_log.end(
        "r.1",
        status="failed",
        error="boom",
        usage={"in": 3, "out": 0, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": "x"},
    )
    store.run_log.append_events(
        "s",
        [
            {"run_id": "s.1", "kind": "run.start", "input": "hello"},
            {"run_id": "s.1", "kind": "run.end", "status": "completed", "error": None},
        ],
    )
    runs = store.sql(
        "SELECT run_id, session_id, status, tokens_in, tokens_out, cost_usd, model, error FROM runs ORDER BY run_id"
    )
    assert (
        runs.to_dict("records")[0]
        == {
            "run_id": "r.1",
            "session_id": "runs-only",
            "status": "failed",
            "tokens_in": 3,
            "tokens_out": 0,
            "cost_usd": None,
            "model": "x",
            "error": "boom",
        }
        or runs["cost_usd"].isna()[0]
    )
    assert list(runs["run_id"]) == ["r.1", "s.1"] and runs["cost_usd"][1] == pytest.approx(0.002)
    events = store.sql(
        "SELECT seq, kind, run_id, json_extract_string(data, '$.input') AS input FROM events ORDER BY seq"
    )
    assert list(events["kind"]) == ["run.start", "run.end"] and events["input"][0] == "hello"
    comps = store.sql("SELECT id, from_id, to_id, summary, message_count, tokens_before FROM compactions")
    assert comps.to_dict("records") == [
        {
            "id": comp.id,
            "from_id": "m0",
            "to_id": "m2",
            "summary": "short",
            "message_count": 3,
            "tokens_before": comp.tokens_before,
        }
    ]
    sessions = store.sql(
        "SELECT session_id, message_count, run_count, compaction_count FROM sessions ORDER BY session_id"
    )
    assert sessions.to_dict("records") == [
        {"session_id": "runs-only", "message_count": 0, "run_count": 1, "compaction_count": 0},
        {"session_id": "s", "message_count": 4, "run_count": 1, "compaction_count": 1},
    ]
    covered = store.sql("SELECT id FROM messages WHERE compacted_by = ? ORDER BY seq", [comp.id])
    assert list(covered["id"]) == ["m0", "m1", "m2"]


def test_empty_store_views_have_their_columns(store):
    df = store.sql("SELECT * FROM messages")
    assert len(df) == 0
    assert list(df.columns)[:14] == D1
    for view in ("sessions", "compactions", "runs", "events"):
        assert len(store.sql(f"SELECT * FROM {view}")) == 0


def test_errors_and_plain_queries(store):
    assert store.sql("SELECT 42 AS answer")["answer"][0] == 42
    assert store.sql("SELECT $x + 1 AS y", {"x": 1})["y"][0] == 2
    with pytest.raises(ValueError, match="store.sql"):
        store.sql("SELECT * FROM no_such_view")
    with pytest.raises(ValueError, match="store.sql"):
        store.sql("SELEC oops")
    with pytest.raises(TypeError):
        store.sql(42)
    store.close()
    with pytest.raises(sk.StoreClosed):
        store.sql("SELECT count(*) FROM messages")
