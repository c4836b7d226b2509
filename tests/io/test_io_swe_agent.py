"""SWE-agent trajectories from the SWE-agent repository (tests/data/SOURCES.md), compared
entry by entry with the trajectory's history."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers import content_text

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data" / "swe_agent"


@pytest.mark.parametrize("name", ["function_calling_simple", "swe-agent__test-repo-i1"])
def test_history_entry_by_entry(store, name):
    path = DATA / f"{name}.traj"
    (session,) = sk.io.import_swe_agent(store, path)
    assert session.session_id == name
    doc = json.loads(path.read_text(encoding="utf-8"))
    history = session.get_history()
    entries = [e for e in doc["history"] if e["role"] != "tool"]
    assert [m["role"] for m in history] == [e["role"] for e in entries]
    parts_by_call = {}
    for message, entry in zip(history, entries):
        assert "".join(p["text"] for p in message["parts"] if p["type"] == "text") == content_text(entry["content"])
        assert message["metadata"]["swe_agent"]["agent"] == entry["agent"]
        calls = (
            ast.literal_eval(entry["tool_calls"])
            if isinstance(entry.get("tool_calls"), str)
            else entry.get("tool_calls") or []
        )
        tools = [p for p in message["parts"] if p["type"].startswith("tool-")]
        assert [(p["toolCallId"], p["type"][5:], p["input"]) for p in tools] == [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls
        ]
        parts_by_call.update({p["toolCallId"]: p for p in tools})
    for entry in doc["history"]:
        if entry["role"] == "tool":
            ids = entry["tool_call_ids"]
            (call_id,) = ast.literal_eval(ids) if isinstance(ids, str) else ids
            assert parts_by_call[call_id]["output"] == content_text(entry["content"])
    if "info" in doc:
        (record,) = store.session_records.get(name, "swe_agent.info")
        stats = doc["info"]["model_stats"]
        stats = ast.literal_eval(stats) if isinstance(stats, str) else stats
        assert record[1]["model_stats"] == stats
        assert history[-1]["metadata"]["swe_agent"]["info"]["model_stats"]["tokens_sent"] == stats["tokens_sent"]
    before = len(session)
    sk.io.import_swe_agent(store, path)
    assert len(session) == before


def test_folder_and_bad_files(tmp_path):
    with sk.open_store() as store:
        sessions = sk.io.import_swe_agent(store, DATA, session_prefix="swe/")
        assert sorted(s.session_id for s in sessions) == ["swe/function_calling_simple", "swe/swe-agent__test-repo-i1"]
        bad = tmp_path / "x.traj"
        bad.write_text(
            '{"history": [{"role": "assistant", "content": "hi", "tool_calls": '
            '[{"id": "c1", "function": {"name": "bash", "arguments": "{oops"}}]}]}'
        )
        with pytest.raises(sk.io.MalformedInput, match=r"x.traj, history\[0\]: tool call 'c1' has arguments"):
            sk.io.import_swe_agent(store, bad)
        bad.write_text('{"trajectory": []}')
        with pytest.raises(sk.io.MalformedInput, match="no 'history' list"):
            sk.io.import_swe_agent(store, bad)
        bad.write_text('{"history": ' + "[" * 100_000 + "]" * 100_000 + "}")
        with pytest.raises(sk.io.MalformedInput, match="x.traj: the trajectory nests too deep to read"):
            sk.io.import_swe_agent(store, bad)


def test_a_trajectory_name_found_twice_in_a_folder_is_one_session_returned_once(tmp_path):
    """Two runs over the same instance write files of one name in their own folders: one session."""
    trajectory = (DATA / "function_calling_simple.traj").read_text(encoding="utf-8")
    for run in ("run-a", "run-b"):
        (tmp_path / run / "i1").mkdir(parents=True)
        (tmp_path / run / "i1" / "i1.traj").write_text(trajectory, encoding="utf-8")
    with sk.open_store() as store:
        sessions = sk.io.import_swe_agent(store, tmp_path)
        assert [s.session_id for s in sessions] == ["i1"]
        assert [s.id for s in store.list_sessions()] == ["i1"]
