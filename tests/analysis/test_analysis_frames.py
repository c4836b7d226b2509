"""DataFrames: exactly the docs/analysis.md columns, with values checked message by message."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest
from helpers import D1, message, text_part

import sessionkit as sk
from sessionkit import messages as _msg


def _build(store):
    s = store.session("built")
    s.append(message("u1", text_part("hello world " * 30)))
    s.append(
        message(
            "a1",
            text_part("Let me look."),
            text_part("Second part."),
            {
                "type": "tool-search",
                "toolCallId": "c1",
                "state": "output-available",
                "input": {"q": "x"},
                "output": {"hits": 3},
            },
            {"type": "tool-search", "toolCallId": "c2", "state": "input-available", "input": {"q": "y"}},
            {
                "type": "dynamic-tool",
                "toolName": "calc",
                "toolCallId": "c3",
                "state": "input-available",
                "input": {"expr": "1+1"},
            },
            {"type": "reasoning", "text": "thinking"},
            role="assistant",
        )
    )
    s.append(message("u2", text_part("and then?")))
    s.append(message("a2", text_part("then this"), role="assistant"))
    s.append(message("u2b", text_part("other question")), parent_id="a1")
    s.append(message("a2b", text_part("other answer"), role="assistant", createdAt="2024-02-03T04:05:06.789Z"))
    ranges = iter([("u1", "a1"), ("u1", "u2")])
    s.on_compaction(lambda msgs, ctx: sk.CompactionResult(*next(ranges), "summary"))
    older = s.compact(leaf_id="a2")
    newer = s.compact(leaf_id="a2")
    return s, older, newer


def test_columns_are_exactly_d1(store):
    s, *_ = _build(store)
    assert list(s.to_pandas().columns) == D1
    assert list(store.messages_df().columns) == D1
    empty = store.session("nothing").to_pandas()
    assert list(empty.columns) == D1 and len(empty) == 0
    assert list(store.messages_df(session_ids=["nothing"]).columns) == D1


def test_values_message_by_message(store):
    s, older, newer = _build(store)
    df = s.to_pandas()
    assert list(df["id"]) == ["u1", "a1", "u2", "a2", "u2b", "a2b"]  # write order
    rows = {r["id"]: r for r in df.to_dict("records")}
    parents = {"u1": None, "a1": "u1", "u2": "a1", "a2": "u2", "u2b": "a1", "a2b": "u2b"}
    for mid, parent in parents.items():
        row = rows[mid]
        msg = s.get(mid)
        assert row["session_id"] == "built"
        assert (row["parent_id"] if isinstance(row["parent_id"], str) else None) == parent
        assert row["role"] == msg["role"]
        assert row["text"] == _msg.message_text(msg)
        assert row["n_parts"] == len(msg["parts"])
        assert row["tokens"] == _msg.estimate_tokens(msg)
        assert row["bytes"] == len(json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode())
        assert row["created_at"] == pd.Timestamp(msg["createdAt"])
    assert rows["a1"]["text"] == "Let me look.\n\nSecond part."
    assert list(rows["a1"]["tool_names"]) == ["search", "search", "calc"]
    assert list(rows["u1"]["tool_names"]) == []
    assert rows["a2b"]["created_at"] == pd.Timestamp("2024-02-03T04:05:06.789Z")
    assert str(df["created_at"].dt.tz) == "UTC"
    assert {m: rows[m]["depth"] for m in parents} == {"u1": 0, "a1": 1, "u2": 2, "a2": 3, "u2b": 2, "a2b": 3}
    assert {m: rows[m]["n_children"] for m in parents} == {"u1": 1, "a1": 2, "u2": 1, "a2": 0, "u2b": 1, "a2b": 0}
    assert {m for m in parents if rows[m]["on_latest_path"]} == {"u1", "a1", "u2b", "a2b"}
    covered = {m: rows[m]["compacted_by"] for m in parents if isinstance(rows[m]["compacted_by"], str)}
    assert covered == {"u1": newer.id, "a1": newer.id, "u2": newer.id}  # the newer range wins
    assert df["depth"].dtype == "int64" and df["on_latest_path"].dtype == bool


def test_messages_df_scope_and_order(store):
    store.session("a").append(message("1", text_part("a1")))
    store.session("b").append(message("1", text_part("b1")))
    store.session("a").append(message("2", text_part("a2"), role="assistant"))
    df = store.messages_df()
    assert list(zip(df["session_id"], df["id"])) == [("a", "1"), ("b", "1"), ("a", "2")]
    only_b = store.messages_df(session_ids=["b"])
    assert list(only_b["session_id"]) == ["b"]
    assert list(store.messages_df(session_ids="a")["id"]) == ["1", "2"]
    with pytest.raises(TypeError):
        store.messages_df(session_ids=[1])


def test_metadata_keys_read_as_written(store):
    """A caller's key that collides with the store's payload key is data in every view (docs/messages.md)."""
    key = "__sessionkit_blob__"
    meta = {key: 1, key + key: [2], key + "x": {key: 3}}
    store.session("s").append(message("a", dict(text_part("hi"), **{key: 4}), metadata=meta))
    row = store.sql("SELECT metadata, text, n_parts FROM messages").iloc[0]
    assert json.loads(row["metadata"]) == meta
    assert (row["text"], row["n_parts"]) == ("hi", 1)
    assert store.session("s").to_pandas()["text"].tolist() == ["hi"]


def test_real_oasst_values_match_the_source(real):
    store = real["store"]
    trees = real["oasst"]
    df = store.messages_df(session_ids=["oasst-" + t["message_tree_id"] for t in trees])
    rows = {(r["session_id"], r["id"]): r for r in df.to_dict("records")}
    assert len(rows) == 1167
    roles = {"prompter": "user", "assistant": "assistant"}
    for tree in trees:
        sid = "oasst-" + tree["message_tree_id"]
        stack = [(tree["prompt"], 0)]
        while stack:
            node, depth = stack.pop()
            row = rows[(sid, node["message_id"])]
            assert row["depth"] == depth
            assert row["n_children"] == len(node["replies"])
            assert row["text"] == node["text"] and row["role"] == roles[node["role"]]
            stack.extend((r, depth + 1) for r in node["replies"])
        node, depth = tree["prompt"], 0
        while node["replies"]:
            node, depth = node["replies"][-1], depth + 1
        on_path = [r for (s_, _), r in rows.items() if s_ == sid and r["on_latest_path"]]
        assert len(on_path) == depth + 1
        assert rows[(sid, node["message_id"])]["on_latest_path"]


def test_real_tau_tool_names(real):
    store = real["store"]
    for rec in real["tau"][:20]:
        df = store.session(f"tau-{rec['task_id']}-{rec['trial']}").to_pandas()
        expected = [
            [c["function"]["name"] for c in (m.get("tool_calls") or [])] for m in rec["traj"] if m["role"] != "tool"
        ]
        assert [list(x) for x in df["tool_names"]] == expected


@pytest.mark.slow
def test_store_wide_scan_equals_engine_interface_reads(sample, monkeypatch):
    """The fast store-wide read and the per-session Engine reads give the same tables."""
    from sessionkit.analysis import _tables
    from sessionkit.analysis._tables import TABLES, StoreData

    monkeypatch.setattr(_tables, "_PAGE", 50)  # the scan comes in several batches
    store = sample["store"]
    assert store.stats()["messages"] > 4 * _tables._PAGE
    fast, slow = StoreData(store), StoreData(store, scan=False)
    assert fast._scan is not None and slow._scan is None
    for name in TABLES:
        a = fast.table(name, extra=True) if name == "messages" else fast.table(name)
        b = slow.table(name, extra=True) if name == "messages" else slow.table(name)
        assert a == b, name


def test_pandas_is_not_loaded_by_import_sessionkit():
    import subprocess

    code = (
        "import sys, sessionkit, sessionkit.store, sessionkit.io, sessionkit.analysis;"
        "bad = [m for m in ('pandas', 'duckdb', 'pyarrow', 'matplotlib', 'numpy') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    "blocked, call",
    [
        ("pandas", lambda st: st.messages_df()),
        ("pandas", lambda st: st.session("x").to_pandas()),
        ("duckdb", lambda st: st.sql("SELECT 1")),
        ("pyarrow", lambda st: st.sql("SELECT count(*) FROM messages")),
        ("matplotlib", lambda st: sk.plot.tool_calls(st)),
        ("pyarrow", lambda st: sk.io.export_parquet(st, "unused-folder")),
    ],
)
def test_missing_dependency_names_the_extra(monkeypatch, blocked, call):
    import sessionkit.analysis.plot  # noqa: F401  (loaded before the block: the check is at call time)

    st = sk.open_store()
    for name in list(sys.modules):
        if name == blocked or name.startswith(blocked + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)
    with pytest.raises(sk.MissingDependency, match=r"pip install 'sessionkit\[analysis\]'") as info:
        call(st)
    assert blocked in str(info.value)
    assert isinstance(info.value, ImportError)
    st.close()
