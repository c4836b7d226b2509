"""replay(): a stored conversation's user turns asked again with another agent, beside the original,
compared turn by turn, and resumed after a crash without asking a turn twice."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import pytest
from helpers import wait_until

import sessionkit as sk
from sessionkit.prototyping import REPLAY_COLUMNS, replay
from sessionkit.testing import ScriptedModel

QUESTIONS = ["What is 2 + 3?", "And times 4?", "Say it in words.", "Thanks!", "Bye."]


def _original(store, sid="src", n=3):
    """A conversation of ``n`` turns, the first answer calling a tool, each reply with usage."""
    session = store.session(sid)
    messages = []
    for k, question in enumerate(QUESTIONS[:n]):
        messages.append({"id": f"u{k}", "role": "user", "parts": [{"type": "text", "text": question}]})
        parts = [{"type": "text", "text": f"Original answer {k}."}]
        if k == 0:
            parts.append(
                {"type": "tool-add", "toolCallId": "c0", "state": "output-available", "input": {}, "output": 5}
            )
        usage = {"in": 10, "out": 4, "cost_usd": 0.001}
        messages.append({"id": f"a{k}", "role": "assistant", "parts": parts, "metadata": {"usage": usage}})
    session.append_many(messages, parent_id=None)
    return session


def _echo(messages):
    """Answer with the last user question and how many user turns the model saw."""
    users = [m for m in messages if m["role"] == "user"]
    return {"text": f"B: {users[-1]['content']} ({len(users)} seen)", "usage": {"in": 5, "out": 2, "cost_usd": 0.0005}}


def test_a_replay_is_a_branch_beside_the_original_with_a_per_turn_comparison(new_store):
    store = new_store("sqlite", memory=True)
    session = _original(store)
    same = "Original answer 1."
    model = ScriptedModel([_echo, same, _echo])
    agent = sk.Agent("b", "Be brief.", model)
    done = []

    result = asyncio.run(replay(agent, session, progress=lambda n, total: done.append((n, total))))

    assert done == [(1, 3), (2, 3), (3, 3)]
    assert [len([m for m in call if m["role"] == "user"]) for call in model.calls] == [1, 2, 3]  # its own history
    assert model.calls[1][-2]["content"] == "B: What is 2 + 3? (1 seen)"  # the replay's first answer, not the original
    rows = result.rows
    assert [r["turn"] for r in rows] == [1, 2, 3] and all(r["status"] == "completed" for r in rows)
    assert rows[0]["original_text"] == "Original answer 0." and rows[0]["replay_text"] == "B: What is 2 + 3? (1 seen)"
    assert [r["text_changed"] for r in rows] == [True, False, True]
    assert rows[0]["original_tools"] == ["add"] and rows[0]["replay_tools"] == [] and rows[0]["tools_changed"]
    assert rows[1]["tools_changed"] is False
    assert (rows[0]["original_tokens"], rows[0]["replay_tokens"]) == (4, 2)
    assert rows[0]["original_cost_usd"] == pytest.approx(0.001) and rows[0]["replay_cost_usd"] == pytest.approx(0.0005)

    # beside the original: two roots, the original's path unchanged, the replay's path its own
    assert sorted(m["id"] for m in session.roots()) == ["b:u0", "u0"]
    assert [m["id"] for m in session.get_history(leaf_id="a2")] == ["u0", "a0", "u1", "a1", "u2", "a2"]
    replayed = session.get_history(leaf_id=result.leaves["src"])
    assert [m["id"] for m in replayed if m["role"] == "user"] == ["b:u0", "b:u1", "b:u2"]
    assert replayed[0]["metadata"]["labels"] == {"replay": "b", "source": "src", "leaf": "a2", "turn": 1, "of": "u0"}
    # each turn's run record names the replay, its source and where the turn hung
    by_run = {r.run_id: r.meta for r in store.runs("src") if r.meta and "replay" in r.meta}
    users = [m for m in replayed if m["role"] == "user"]
    parents = [replayed[i - 1]["id"] if i else None for i, m in enumerate(replayed) if m["role"] == "user"]
    assert [by_run[m["metadata"]["run_id"]] for m in users] == [
        {"at": at, **m["metadata"]["labels"]} for m, at in zip(users, parents)
    ]
    frame = result.to_pandas()
    assert list(frame.columns) == REPLAY_COLUMNS and list(frame["text_changed"]) == [True, False, True]

    # called again: every turn is already there, nothing is asked
    again = asyncio.run(replay(agent, session))
    assert [r["resumed"] for r in again.rows] == [True, True, True] and len(model.calls) == 3
    assert [r["replay_text"] for r in again.rows] == [r["replay_text"] for r in rows]


def test_many_sessions_into_a_target_and_a_failing_turn_stops_its_source(new_store):
    store = new_store("sqlite", memory=True)
    first, second = _original(store, "one", 2), _original(store, "two", 2)
    target = store.session("replays")
    model = ScriptedModel([_echo, {"error": RuntimeError("provider down")}, _echo, _echo])
    result = asyncio.run(replay(sk.Agent("b", "", model), [first, (second, "a1")], target=target, name="try"))
    assert [(r["source_session"], r["turn"], r["status"]) for r in result.rows] == [
        ("one", 1, "completed"),
        ("one", 2, "failed"),
        ("two", 1, "completed"),
        ("two", 2, "completed"),
    ]
    assert "provider down" in result.rows[1]["error"]
    assert sorted(m["id"] for m in target.roots()) == ["try:one:u0", "try:two:u0"]
    assert len(first) == 4 and len(second) == 4  # the sources are untouched
    with pytest.raises(ValueError, match="name"):
        asyncio.run(replay(sk.Agent("b", "", model), first, name="a:b"))
    with pytest.raises(TypeError, match="agent"):
        asyncio.run(replay("gpt-4o", first))


CHILD = r"""
import asyncio, json, sys
import sessionkit as sk
from sessionkit.prototyping import replay
from sessionkit.testing import ScriptedModel

target, log = sys.argv[1], sys.argv[2]

def reply(messages):
    users = [m for m in messages if m["role"] == "user"]
    with open(log, "a") as fh:
        fh.write(json.dumps(users[-1]["content"]) + "\n")
    if len(users) == 3:  # the third turn never answers: the test kills this process meanwhile
        return {"text": "never", "delay": 3600}
    return {"text": "first pass " + users[-1]["content"]}

store = sk.open_store(target)
asyncio.run(replay(sk.Agent("b", "", ScriptedModel([reply] * 5)), store.session("src"), progress=False))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_a_replay_killed_midway_resumes_without_asking_a_turn_twice(engine, request, tmp_path):
    if engine == "postgresql":
        target = request.getfixturevalue("pg_store_url")()
    else:
        target = str(tmp_path / ("r.db" if engine == "sqlite" else "r.duckdb"))
    store = sk.open_store(target)
    _original(store, n=5)
    store.close()  # a DuckDB file admits one process: the child's, until it is killed

    log = tmp_path / "asked.jsonl"
    log.touch()
    child = subprocess.Popen([sys.executable, "-c", CHILD, target, str(log)], stderr=subprocess.PIPE, text=True)
    try:
        # the third turn is asked only once the second one's messages are committed
        wait_until(lambda: len(log.read_text().splitlines()) >= 3 or child.poll() is not None, timeout=120)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    first_pass = [json.loads(line) for line in log.read_text().splitlines()]
    assert first_pass == QUESTIONS[:3]

    store = sk.open_store(target)
    try:
        session = store.session("src")
        assert [m["id"] for m in session.get_many(["b:u0", "b:u1", "b:u2"]).values()] == ["b:u0", "b:u1"]
        model = ScriptedModel([_echo] * 3)
        result = asyncio.run(replay(sk.Agent("b", "", model), session, progress=False))
        asked_again = [[m for m in call if m["role"] == "user"][-1]["content"] for call in model.calls]
        assert asked_again == QUESTIONS[2:]  # turns 1 and 2 are not asked again
        assert [r["resumed"] for r in result.rows] == [True, True, False, False, False]
        assert [r["replay_text"] for r in result.rows[:2]] == ["first pass " + q for q in QUESTIONS[:2]]
        assert all(r["status"] == "completed" for r in result.rows)
        replay_users = [m for m in session.get_history(leaf_id=result.leaves["src"]) if m["role"] == "user"]
        assert [m["id"] for m in replay_users] == [f"b:u{k}" for k in range(5)]
        # one stored user message per turn, and one completed run per turn
        users = [n for n in session.nodes() if n.role == "user" and n.id.startswith("b:")]
        assert len(users) == 5
        completed = [r for r in store.runs("src") if r.status == "completed"]
        assert sorted(r.input for r in completed) == sorted(QUESTIONS)
    finally:
        store.close()


def test_replay_reads_an_imported_conversation(new_store):
    """A tau-bench airline chat (system prompt, tool calls) imported, then two of its turns asked again."""
    store = new_store("sqlite", memory=True)
    with gzip.open(Path(__file__).resolve().parent.parent / "data" / "gpt-4o-airline.json.gz", "rt") as fh:
        chat = json.load(fh)[0]["traj"]
    source = store.session("tau")
    sk.io.import_openai(source, chat, progress=False)
    path = source.get_history(compacted=False)
    users = [i for i, m in enumerate(path) if m["role"] == "user"]
    second_answer = path[users[2] - 1]["id"]  # the path through the second turn's replies
    model = ScriptedModel([_echo, _echo])
    result = asyncio.run(replay(sk.Agent("b", "", model), (source, second_answer), progress=False))
    assert [r["user_text"] for r in result.rows] == [sk.parts.text_of(path[i], "") for i in users[:2]]
    assert all(r["text_changed"] and r["status"] == "completed" for r in result.rows)
    assert path[0]["role"] == "system"  # the replay is a root beside the recorded system prompt
    assert sorted(m["id"] for m in source.roots()) == sorted([path[0]["id"], "b:" + path[1]["id"]])
    assert [m["role"] for m in model.calls[0]] == ["user"]  # the new agent's (no) instructions, not the recorded


def test_in_place_and_into_a_target_the_agent_s_instructions_replace_the_recorded_system_prompt(new_store):
    """A replay "with another agent" sends that agent's instructions, not the system prompt the
    original was recorded with, whether the replay is beside the original or in a target."""
    store = new_store("sqlite", memory=True)
    source = store.session("src")
    source.append({"id": "sys", "role": "system", "parts": [{"type": "text", "text": "Old policy."}]})
    source.append({"id": "sys2", "role": "system", "parts": [{"type": "text", "text": "Old extra rule."}]})
    for k, question in enumerate(QUESTIONS[:2]):
        source.append({"id": f"u{k}", "role": "user", "parts": [{"type": "text", "text": question}]})
        source.append({"id": f"a{k}", "role": "assistant", "parts": [{"type": "text", "text": f"Answer {k}."}]})
    sent = {}
    for where, target in (("in place", None), ("target", store.session("out"))):
        model = ScriptedModel([_echo, _echo])
        agent = sk.Agent("b", "New policy.", model)
        result = asyncio.run(replay(agent, source, target=target, progress=False))
        assert [r["status"] for r in result.rows] == ["completed", "completed"]
        sent[where] = [[(m["role"], m["content"]) for m in call if m["role"] == "system"] for call in model.calls]
    assert sent["in place"] == sent["target"] == [[("system", "New policy.")]] * 2
    # in place, the replay hangs where the recorded system prompt starts: a root beside it
    assert sorted(m["id"] for m in source.roots()) == ["b:u0", "sys"]
