"""Prototyping with runs: from any node, history policies (docs/prototyping.md)."""

from __future__ import annotations

import asyncio

import pytest

import sessionkit as sk
from sessionkit.agent import Agent, HistoryPolicy
from sessionkit.errors import MessageNotFound, UsageError
from sessionkit.messages import estimate_tokens
from sessionkit.store import create_compact_function
from sessionkit.testing.scripted import ScriptedModel

SYS = {"role": "system", "content": "sys"}


def _three_turns(store, sid: str = "t"):
    """A session of three question/answer turns; returns the session and its six ids."""
    model = ScriptedModel(["A1", "A2", "A3"])
    agent = Agent("a", "sys", model)
    session = store.session(sid)
    ids = []
    for q in ("Q1", "Q2", "Q3"):
        ids += [m["id"] for m in agent.run_sync(q, session=session).messages]
    return session, ids


# ---------------------------------------------------------------------------- run from any node


def test_a_run_from_an_earlier_node_branches_there_and_records_where(store):
    session, ids = _three_turns(store)
    model = ScriptedModel(["B2"])
    agent = Agent("b", "sys", model)
    before = [m["id"] for m in session.get_history()]

    result = agent.run_sync("Q2 again", session=session, at=ids[1])  # under the first answer

    assert model.calls == [
        [
            SYS,
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1"},
            {"role": "user", "content": "Q2 again"},
        ]
    ]
    user, reply = result.messages
    assert [m["id"] for m in session.branches(ids[1])] == [ids[2], user["id"]]
    assert session.latest_leaf()["id"] == reply["id"]
    assert [m["id"] for m in session.get_history(leaf_id=ids[-1])] == before  # the old branch is intact
    starts = [e for e in store.events("t") if e["kind"] == "run.start"]
    assert [e["at"] for e in starts] == [None, ids[1], ids[3], ids[1]]
    assert store.runs("t")[-1].status == "completed"
    # the run record says where each run started, as its run.start event does
    assert [r.meta for r in store.runs("t")] == [{"at": e["at"]} for e in starts]
    by_sql = store.sql("SELECT run_id, started_at_message FROM runs WHERE session_id = 't' ORDER BY run_number")
    assert by_sql["run_id"].tolist() == [e["run_id"] for e in starts]
    assert by_sql["started_at_message"].tolist()[1:] == [ids[1], ids[3], ids[1]]


def test_run_from_an_unknown_node_or_another_sessions_node_writes_nothing(store):
    session, ids = _three_turns(store)
    other = store.session("other")
    other_reply = Agent("o", "", ScriptedModel(["x"])).run_sync("hi", session=other).messages[-1]["id"]
    model = ScriptedModel(["never"])
    agent = Agent("b", "sys", model)
    runs, events, count = len(store.runs("t")), len(store.events("t")), len(session)

    for bad in ("missing", other_reply):
        with pytest.raises(MessageNotFound, match=repr(bad)):
            agent.run_sync("x", session=session, at=bad)
    with pytest.raises(TypeError, match="at must be"):
        agent.run_sync("x", session=session, at=7)

    assert (len(store.runs("t")), len(store.events("t")), len(session)) == (runs, events, count)
    assert model.calls == []


def test_stream_and_the_async_facade_run_from_a_node():
    model = ScriptedModel(["A1", "A2", "streamed", "async"])
    agent = Agent("b", "sys", model)

    async def go():
        async with sk.aio.open_store(":memory:") as astore:
            session = astore.session("t")
            ids = []
            for q in ("Q1", "Q2"):
                ids += [m["id"] for m in (await agent.run(q, session=session)).messages]
            events = [e async for e in agent.stream("S", session=session, at=ids[1])]
            result = await agent.run("A", session=session, at=ids[3])
            return ids, events, result, await session.branches(ids[1])

    ids, events, result, under = asyncio.run(go())
    assert events[0]["kind"] == "run.start" and events[0]["at"] == ids[1]
    assert [m["content"] for m in model.calls[2][1:]] == ["Q1", "A1", "S"]
    assert [m["content"] for m in model.calls[3][1:]] == ["Q1", "A1", "Q2", "A2", "A"]
    assert [m["id"] for m in under] == [ids[2], events[0]["run_id"] and under[1]["id"]]
    assert under[1]["parts"] == [{"type": "text", "text": "S"}]
    assert result.messages[0]["parts"] == [{"type": "text", "text": "A"}]


def test_a_run_from_a_node_sees_the_compacted_path(mem_store):
    session, ids = _three_turns(mem_store)
    session.import_compaction(sk.Compaction("c1", ids[0], ids[1], "S: Q1 was answered", "2026-01-01T00:00:00Z", 9, 3))
    model = ScriptedModel(["B"])
    Agent("b", "sys", model).run_sync("next", session=session, at=ids[3])
    assert model.calls[0] == [
        SYS,
        {"role": "assistant", "content": "S: Q1 was answered"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "next"},
    ]


def test_run_from_a_node_needs_a_tree_session(tmp_path):
    session = sk.create_session("line", store=sk.FileSessionStore(tmp_path))
    first = Agent("a", "", ScriptedModel(["x"])).run_sync("hi", session=session, labels={"variant": "v"})
    # its run log (in memory) keeps what the run was too, and refuses what JSON cannot hold
    assert session.runs()[0].meta == {"at": None, "variant": "v"}
    with pytest.raises(TypeError, match="meta"):
        session.run_log.begin("line", "other", "x", meta={"bad": {1}})
    assert [r.run_id for r in session.runs()] == [first.run_id]
    with pytest.raises(UsageError, match="at="):
        Agent("a", "", ScriptedModel(["y"])).run_sync("again", session=session, at=session.snapshot()[0]["id"])
    assert len(session.snapshot()) == 2


# ---------------------------------------------------------------------------- history policy


def test_max_messages_and_max_tokens_trim_what_the_model_sees_not_what_is_stored(mem_store):
    session, ids = _three_turns(mem_store)
    model = ScriptedModel(["r1", "r2", "r3"])
    agent = Agent("b", "sys", model, history=HistoryPolicy(max_messages=2))

    agent.run_sync("Q4", session=session)
    assert model.calls[0] == [
        SYS,
        {"role": "user", "content": "Q3"},
        {"role": "assistant", "content": "A3"},
        {"role": "user", "content": "Q4"},
    ]
    assert len(session.get_history()) == 8

    stored = session.get_history()
    budget = sum(estimate_tokens(m) for m in stored[-3:])  # exactly the newest three fit
    agent.run_sync("Q5", session=session, history=HistoryPolicy(max_tokens=budget))
    assert [m["content"] for m in model.calls[1][1:]] == ["A3", "Q4", "r1", "Q5"]

    agent.run_sync("Q6", session=session, history=HistoryPolicy(max_messages=0))
    assert model.calls[2] == [SYS, {"role": "user", "content": "Q6"}]


def test_the_hook_sees_history_and_input_and_decides_what_the_model_receives(store):
    session, ids = _three_turns(store)
    seen = []

    def hook(history, new_input):
        seen.append(([m["id"] for m in history], [m["role"] for m in new_input]))
        history[0]["parts"][0]["text"] = "changed"  # a copy: the store keeps its text
        note = {"id": "note", "role": "user", "parts": [{"type": "text", "text": "Answer in French."}]}
        return [history[0], note, *new_input]

    model = ScriptedModel(["Bonjour", "Encore"])
    agent = Agent("b", "sys", model, history=HistoryPolicy(max_messages=4, hook=hook))
    result = agent.run_sync("Q4", session=session, context={"user": "u1"})

    assert seen == [(ids[2:], ["user"])]
    chat = model.calls[0]
    assert chat[:3] == [SYS, {"role": "user", "content": "changed"}, {"role": "user", "content": "Answer in French."}]
    assert chat[3]["role"] == "user" and "u1" in str(chat[3]["content"]) and "Q4" in str(chat[3]["content"])
    assert len(chat) == 4
    assert session.get(ids[2])["parts"][0]["text"] == "Q2"
    assert [m["role"] for m in result.messages] == ["user", "assistant"]
    assert result.messages[0]["parts"] == [{"type": "text", "text": "Q4"}]

    # a regeneration: the hook gets the path before the user message, and that message as input
    agent.regenerate_sync(session, result.messages[1]["id"])
    assert seen[1] == (ids[2:], ["user"])
    assert [c["content"] for c in model.calls[1][1:]] == ["changed", "Answer in French.", "Q4"]


def test_a_bad_hook_fails_the_run_before_anything_is_recorded(mem_store):
    session, _ = _three_turns(mem_store)
    runs = len(mem_store.runs("t"))
    agent = Agent("b", "sys", ScriptedModel(["never"]))

    def raises(history, new_input):
        raise RuntimeError("boom")

    for hook, message in ((raises, "raised RuntimeError: boom"), (lambda h, i: "text", "must return a list")):
        with pytest.raises(UsageError, match=message):
            agent.run_sync("x", session=session, history=HistoryPolicy(hook=hook))
    with pytest.raises(UsageError, match=r"bad message at \[0\]"):
        agent.run_sync("x", session=session, history=HistoryPolicy(hook=lambda h, i: [{"role": "user"}]))
    assert len(mem_store.runs("t")) == runs and len(session) == 6
    with pytest.raises(ValueError, match="max_messages"):
        HistoryPolicy(max_messages=-1)
    with pytest.raises(TypeError, match="max_tokens"):
        HistoryPolicy(max_tokens="10")
    with pytest.raises(TypeError, match="history must be"):
        Agent("c", "", ScriptedModel([]), history={"max_messages": 2})


def test_a_policy_applies_on_top_of_compaction(mem_store):
    model = ScriptedModel(["A1", "SUMMARY one", "A2", "SUMMARY two"])
    agent = Agent("h", "sys", model, history=HistoryPolicy(max_messages=2))
    session = mem_store.session("c")
    session.on_compaction(
        create_compact_function(agent.summarizer(), keep_recent_tokens=0, protect_head=0, min_tail_messages=1)
    ).compact_after(5)
    agent.run_sync("Hello there, this is a long first question about many things", session=session)
    agent.run_sync("Q2", session=session)
    # the newest two of the compacted path (summary, A1), not of the stored one (question, A1)
    assert model.calls[2][1:] == [
        {"role": "assistant", "content": "SUMMARY one"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
    ]
