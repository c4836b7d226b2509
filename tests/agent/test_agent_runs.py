"""Runs with ScriptedModel against real stores: persistence, failures, events, turns."""

from __future__ import annotations

import asyncio
from unittest.mock import ANY

import pytest
from helpers import StalledModel, kinds

from sessionkit.agent import Agent, RunController, RunResult
from sessionkit.errors import (
    MaxStepsExceeded,
    MessageNotFound,
    ModelError,
    RunFailed,
    RunInterrupted,
    RunTimeout,
    SessionKitError,
    UsageError,
)
from sessionkit.store import create_compact_function
from sessionkit.testing.scripted import ScriptedModel, ScriptExhausted


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


async def lookup(key: str) -> dict:
    """Look a key up (async)."""
    await asyncio.sleep(0)
    return {"key": key, "value": key.upper()}


# ---------------------------------------------------------------------------- success


def test_a_tool_run_appends_exactly_the_new_turns(store):
    model = ScriptedModel(
        [
            {
                "text": "Let me add.",
                "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "c1"}],
                "usage": {"in": 20, "out": 5},
            },
            {"text": "1 + 2 = 3", "usage": {"in": 30, "out": 4}},
        ]
    )
    agent = Agent("calc", "You add numbers.", model, tools=[add])
    session = store.session("s1")
    result = agent.run_sync("What is 1 + 2?", session=session)

    assert isinstance(result, RunResult)
    assert result.status == "completed"
    assert result.text == "1 + 2 = 3"
    assert result.session_id == "s1"
    rid = result.run_id
    usage1 = {"in": 20, "out": 5, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": "scripted"}
    usage2 = {"in": 30, "out": 4, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": "scripted"}
    expected = [
        {
            "id": ANY,
            "role": "user",
            "parts": [{"type": "text", "text": "What is 1 + 2?"}],
            "createdAt": ANY,
            "metadata": {"run_id": rid},
        },
        {
            "id": ANY,
            "role": "assistant",
            "createdAt": ANY,
            "parts": [
                {"type": "text", "text": "Let me add."},
                {
                    "type": "tool-add",
                    "toolCallId": "c1",
                    "state": "output-available",
                    "input": {"a": 1, "b": 2},
                    "output": 3,
                },
            ],
            "metadata": {"run_id": rid, "model": "scripted", "usage": usage1},
        },
        {
            "id": ANY,
            "role": "assistant",
            "createdAt": ANY,
            "parts": [{"type": "text", "text": "1 + 2 = 3"}],
            "metadata": {"run_id": rid, "model": "scripted", "usage": usage2},
        },
    ]
    assert result.messages == expected
    assert session.get_history() == result.messages  # exactly these, in this order, nothing else
    assert len(session) == 3
    assert result.usage == {
        "in": 50,
        "out": 9,
        "cache_read": 0,
        "cache_write": 0,
        "cost_usd": None,
        "model": "scripted",
    }

    # the model saw the system prompt, the prompt, then the tool round trip
    assert model.calls[0] == [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "What is 1 + 2?"},
    ]
    assert model.calls[1][2:] == [
        {
            "role": "assistant",
            "content": "Let me add.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    assert model.tools[0][0]["function"]["name"] == "add"

    [run] = store.runs("s1")
    assert (run.run_id, run.status, run.error, run.input) == (rid, "completed", None, "What is 1 + 2?")
    assert run.usage == result.usage and run.ended_at is not None


def test_events_are_in_order_and_seq_continues_across_runs(store):
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 2}, "id": "c1"}], "usage": {"in": 1, "out": 1}},
            {"text": "It is four.", "usage": {"in": 1, "out": 1}},
            "Second answer here.",
        ]
    )
    agent = Agent("calc", "", model, tools=[add])
    session = store.session("ev")
    first = agent.run_sync("2+2?", session=session)
    events = store.events("ev")
    assert kinds(events) == [
        "run.start",
        "turn.start",
        "usage",
        "tool.call",
        "tool.result",
        "turn.end",
        "turn.start",
        "delta.text",
        "delta.text",
        "delta.text",
        "usage",
        "turn.end",
        "run.end",
    ]
    assert [e["seq"] for e in events] == list(range(len(events)))
    for e in events:
        assert e["v"] == 1 and e["session_id"] == "ev" and e["run_id"] == first.run_id
        assert e["ts"].endswith("Z") and len(e["ts"]) == 24
    assert events[0]["input"] == "2+2?"
    assert events[3] == {**events[3], "tool_call_id": "c1", "name": "add", "input": {"a": 2, "b": 2}}
    assert events[4] == {**events[4], "tool_call_id": "c1", "output": 4, "error": None}
    assert events[5]["stop_reason"] == "tool_calls" and events[11]["stop_reason"] == "stop"
    assert "".join(e["text"] for e in events if e["kind"] == "delta.text") == "It is four."
    assert events[-1]["status"] == "completed" and events[-1]["error"] is None

    second = agent.run_sync("again", session=session)
    all_events = store.events("ev")
    assert [e["seq"] for e in all_events] == list(range(len(all_events)))
    later = store.events("ev", after_seq=events[-1]["seq"])
    assert later[0]["seq"] == events[-1]["seq"] + 1
    assert later[0]["kind"] == "run.start" and {e["run_id"] for e in later} == {second.run_id}
    assert [r.run_id for r in store.runs("ev")] == [first.run_id, second.run_id]


def test_the_second_run_sees_the_first_turn(mem_store):
    model = ScriptedModel(["Nice to meet you, Ada!", "Your name is Ada."])
    agent = Agent("helper", "Be brief.", model)
    session = mem_store.session("name")
    agent.run_sync("Hi, my name is Ada.", session=session)
    result = agent.run_sync("What's my name?", session=session)
    assert result.text == "Your name is Ada."
    assert model.calls[1] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi, my name is Ada."},
        {"role": "assistant", "content": "Nice to meet you, Ada!"},
        {"role": "user", "content": "What's my name?"},
    ]
    assert [m["role"] for m in session.get_history()] == ["user", "assistant", "user", "assistant"]


def test_a_run_without_a_session_uses_a_fresh_in_memory_one():
    agent = Agent("a", "", ScriptedModel(["one", "two"]))
    first = agent.run_sync("hi")
    assert first.session is not None and first.session.get_history() == first.messages
    second = agent.run_sync("again", session=first.session)
    assert len(second.session.get_history()) == 4
    other = Agent("b", "", ScriptedModel(["x"])).run_sync("hi")
    assert other.session.session_id != first.session.session_id


def test_tool_errors_and_unknown_tools_become_results_and_the_run_goes_on(mem_store):
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "divide", "arguments": {"a": 1, "b": 0}, "id": "c1"},
                    {"name": "nope", "arguments": {}, "id": "c2"},
                    {"name": "lookup", "arguments": {"key": "k"}, "id": "c3"},
                    {"name": "add", "arguments": {"a": 1}, "id": "c4"},
                ]
            },
            "Handled.",
        ]
    )
    agent = Agent("t", "", model, tools=[divide, lookup, add])
    session = mem_store.session()
    result = agent.run_sync("go", session=session)
    parts = result.messages[1]["parts"]
    assert parts[0] == {
        "type": "tool-divide",
        "toolCallId": "c1",
        "state": "output-error",
        "input": {"a": 1, "b": 0},
        "errorText": "ZeroDivisionError: division by zero",
    }
    assert parts[1]["state"] == "output-error" and "unknown tool 'nope'" in parts[1]["errorText"]
    assert parts[2] == {
        "type": "tool-lookup",
        "toolCallId": "c3",
        "state": "output-available",
        "input": {"key": "k"},
        "output": {"key": "k", "value": "K"},
    }
    assert parts[3]["state"] == "output-error" and parts[3]["errorText"].startswith("TypeError")
    tool_msgs = [m for m in model.calls[1] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "Error: ZeroDivisionError: division by zero"
    assert tool_msgs[2]["content"] == '{"key": "k", "value": "K"}'
    results = [e for e in mem_store.events("") if e["kind"] == "tool.result"]
    assert results[0]["error"] == "ZeroDivisionError: division by zero" and results[0]["output"] is None
    assert result.text == "Handled."


# ---------------------------------------------------------------------------- failures


def assert_failed_run(store, sid, error, status, before):
    """Nothing appended, the run recorded with its status and a run.end event."""
    assert store.session(sid).get_history() == before
    run = store.runs(sid)[-1]
    assert run.run_id == error.run_id and error.run_id is not None
    assert run.status == status and run.error and run.ended_at is not None
    events = [e for e in store.events(sid) if e["run_id"] == error.run_id]
    assert events[0]["kind"] == "run.start" and events[-1]["kind"] == "run.end"
    assert events[-1]["status"] == status and events[-1]["error"] == run.error
    return events


def test_a_model_error_fails_the_run_and_appends_nothing(store):
    boom = ConnectionError("provider down")
    agent = Agent("a", "", ScriptedModel(["first reply", {"error": boom}]))
    session = store.session("f")
    agent.run_sync("hello", session=session)
    before = session.get_history()
    with pytest.raises(ModelError) as info:
        agent.run_sync("fail please", session=session)
    assert info.value.__cause__ is boom
    assert isinstance(info.value, RunFailed) and isinstance(info.value, SessionKitError)
    events = assert_failed_run(store, "f", info.value, "failed", before)
    assert events[-1]["error_type"] == "ModelError" and "provider down" in events[-1]["error"]


def test_running_past_the_end_of_the_script_raises(mem_store):
    agent = Agent("a", "", ScriptedModel(["only one"]))
    session = mem_store.session()
    agent.run_sync("1", session=session)
    with pytest.raises(ModelError) as info:
        agent.run_sync("2", session=session)
    assert isinstance(info.value.__cause__, ScriptExhausted)
    assert "call 2 has none" in str(info.value)


def test_max_steps_exceeded_appends_nothing(store):
    loop_call = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 1}}]}
    model = ScriptedModel([loop_call, loop_call, loop_call])
    agent = Agent("a", "", model, tools=[add], max_steps=2)
    session = store.session("m")
    with pytest.raises(MaxStepsExceeded) as info:
        agent.run_sync("loop", session=session)
    assert len(model.calls) == 2 and model.remaining == 1
    events = assert_failed_run(store, "m", info.value, "failed", [])
    assert kinds(events).count("tool.result") == 2


def test_a_timeout_appends_nothing_and_is_recorded(store):
    model = StalledModel()
    agent = Agent("a", "", model)
    session = store.session("t")
    with pytest.raises(RunTimeout) as info:
        agent.run_sync("hurry", session=session, timeout=0.2)
    assert not model.answered  # the run gave up on the call, it did not wait for the reply
    assert "0.2" in str(info.value)
    assert_failed_run(store, "t", info.value, "failed", [])


def test_interrupt_cancels_the_model_call_and_appends_nothing(store):
    model = StalledModel()
    agent = Agent("a", "", model)
    controller = RunController()
    session = store.session("i")

    def on_event(event):
        if event["kind"] == "turn.start":
            controller.interrupt()

    controller.on_event(on_event)
    with pytest.raises(RunInterrupted) as info:
        agent.run_sync("stop me", session=session, controller=controller)
    assert not model.answered  # cancelled, not waited for
    assert controller.active is None
    assert_failed_run(store, "i", info.value, "interrupted", [])


def test_interrupt_cancels_a_running_tool(mem_store):
    started = asyncio.Event()

    async def wait_forever() -> str:
        """Never returns (before the test's end: 60 s only bounds a broken interrupt)."""
        started.set()
        await asyncio.sleep(60)
        return "done"

    model = ScriptedModel([{"tool_calls": [{"name": "wait_forever", "arguments": {}}]}])
    agent = Agent("a", "", model, tools=[wait_forever])
    controller = RunController()

    async def main():
        task = asyncio.create_task(agent.run("go", session=mem_store.session("x"), controller=controller))
        await asyncio.wait_for(started.wait(), 60)  # only bounds a run that never calls the tool
        assert controller.interrupt() is True
        with pytest.raises(RunInterrupted):
            await task

    asyncio.run(main())
    assert mem_store.session("x").get_history() == []
    assert mem_store.runs("x")[0].status == "interrupted"
    assert controller.interrupt() is False  # nothing active any more


def test_stream_yields_the_events_then_raises_the_runs_error(mem_store):
    agent = Agent("a", "", ScriptedModel(["Hello there, world.", {"error": ValueError("bad")}]))
    session = mem_store.session("st")

    async def collect(prompt):
        seen = []
        try:
            async for event in agent.stream(prompt, session=session):
                seen.append(event)
        except RunFailed as exc:
            return seen, exc
        return seen, None

    ok, err = asyncio.run(collect("hi"))
    assert err is None
    assert kinds(ok)[0] == "run.start" and kinds(ok)[-1] == "run.end"
    assert kinds(ok).count("delta.text") >= 3  # streamed in several deltas
    assert ok == mem_store.events("st")  # what was yielded is what was stored

    failed, err = asyncio.run(collect("again"))
    assert isinstance(err, ModelError) and isinstance(err.__cause__, ValueError)
    assert kinds(failed) == ["run.start", "turn.start", "run.end"]
    assert failed[-1]["status"] == "failed"
    assert len(session.get_history()) == 2


def test_leaving_a_stream_early_cancels_the_run(mem_store):
    model = StalledModel()
    agent = Agent("a", "", model)
    session = mem_store.session("early")

    async def main():
        stream = agent.stream("hi", session=session)
        async for event in stream:
            if event["kind"] == "turn.start":
                break
        await stream.aclose()

    asyncio.run(main())
    assert not model.answered
    assert mem_store.runs("early")[0].status == "interrupted"
    assert session.get_history() == []


# ---------------------------------------------------------------------------- sync twin


def test_run_sync_works_inside_a_running_event_loop(mem_store):
    agent = Agent("a", "", ScriptedModel(["from a notebook cell"]))
    session = mem_store.session("nb")

    async def cell():
        # a notebook cell: a loop is running in this thread, and the user calls run_sync
        asyncio.get_running_loop()
        return agent.run_sync("hi", session=session)

    result = asyncio.run(cell())
    assert result.text == "from a notebook cell"
    assert session.get_history() == result.messages


def test_run_sync_inside_a_loop_raises_the_runs_error(mem_store):
    agent = Agent("a", "", ScriptedModel([{"error": KeyError("k")}]))

    async def cell():
        return agent.run_sync("hi", session=mem_store.session())

    with pytest.raises(ModelError):
        asyncio.run(cell())


# ---------------------------------------------------------------------------- regenerate


def test_regenerate_adds_a_sibling_reply(mem_store):
    model = ScriptedModel(["First answer.", "Second answer."])
    agent = Agent("a", "sys", model)
    session = mem_store.session("r")
    first = agent.run_sync("Question?", session=session)
    user_id, old_reply = first.messages[0]["id"], first.messages[1]["id"]

    again = asyncio.run(agent.regenerate(session, old_reply))  # a reply's id works too
    assert again.text == "Second answer."
    assert [m["role"] for m in again.messages] == ["assistant"]
    assert [m["id"] for m in session.branches(user_id)] == [old_reply, again.messages[0]["id"]]
    assert session.latest_leaf()["id"] == again.messages[0]["id"]
    assert model.calls[1] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "Question?"}]
    runs = mem_store.runs("r")
    assert len(runs) == 2 and runs[1].input == "Question?" and runs[1].status == "completed"
    with pytest.raises(MessageNotFound):
        agent.regenerate_sync(session, "missing")


# ---------------------------------------------------------------------------- compaction


def test_with_compaction_the_model_receives_the_summary(mem_store):
    model = ScriptedModel(
        [
            "Nice to meet you, Ada. Paris is lovely in spring.",
            "SUMMARY: The user is Ada and plans a trip to Paris.",  # the summarizer's call
            "You are Ada.",
            "SUMMARY: Ada asked for her name.",  # the second run's append compacts again
        ]
    )
    agent = Agent("helper", "Be brief.", model)
    session = mem_store.session("c")
    session.on_compaction(
        create_compact_function(agent.summarizer(), keep_recent_tokens=0, protect_head=0, min_tail_messages=1)
    ).compact_after(10)
    agent.run_sync("Hi, I'm Ada and I am planning a long trip to Paris next spring.", session=session)
    assert len(session.compactions()) == 1
    summary_prompt = model.calls[1][-1]["content"]
    assert "planning a long trip to Paris" in summary_prompt

    agent.run_sync("What's my name?", session=session)
    seen = model.calls[2]
    assert seen == [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "SUMMARY: The user is Ada and plans a trip to Paris."},
        {"role": "assistant", "content": "Nice to meet you, Ada. Paris is lovely in spring."},
        {"role": "user", "content": "What's my name?"},
    ]
    assert not any("planning a long trip" in str(m.get("content")) for m in seen)
    # the originals are still stored; the second compaction extends the first summary
    assert len(session.get_history(compacted=False)) == 4
    assert len(session.compactions()) == 2 and model.remaining == 0
    assert "SUMMARY: The user is Ada" in model.calls[3][-1]["content"]


# ---------------------------------------------------------------------------- arguments


def test_bad_arguments_fail_before_anything_is_recorded(mem_store):
    agent = Agent("a", "", ScriptedModel(["x"]))
    session = mem_store.session("bad")
    with pytest.raises(TypeError):
        agent.run_sync(42, session=session)
    with pytest.raises(ValueError):
        agent.run_sync("x", session=session, timeout=0)
    with pytest.raises(TypeError):
        agent.run_sync("x", session=session, metadata={"s": {1, 2}})
    with pytest.raises(TypeError, match="sessionkit session"):
        agent.run_sync("x", session="not a session")
    assert mem_store.runs("bad") == [] and mem_store.events("bad") == []
    with pytest.raises(ValueError, match="max_steps"):
        Agent("a", "", ScriptedModel([]), max_steps=0)
    with pytest.raises(ValueError, match="two tools"):
        Agent("a", "", ScriptedModel([]), tools=[add, add])
    with pytest.raises(TypeError, match="model"):
        Agent("a", "", 3.5)


def test_a_prompt_can_be_a_user_message_with_metadata(mem_store):
    agent = Agent("a", "", ScriptedModel(["ok", "ok"]))
    session = mem_store.session("p")
    msg = {"id": "u-1", "role": "user", "parts": [{"type": "text", "text": "hello"}], "metadata": {"author": "ada"}}
    result = agent.run_sync(msg, session=session)
    assert result.messages[0]["id"] == "u-1"
    assert result.messages[0]["metadata"] == {"author": "ada", "run_id": result.run_id}
    second = agent.run_sync("hi", session=session, metadata={"author": "bob"}, run_id="my-run")
    assert second.run_id == "my-run"
    assert second.messages[0]["metadata"] == {"author": "bob", "run_id": "my-run"}


def test_one_controller_drives_one_run_at_a_time(mem_store):
    controller = RunController()

    async def main():
        release = asyncio.Event()
        entered = asyncio.Event()

        async def hold() -> str:
            """Keeps the first run busy until the test lets it go."""
            entered.set()
            await release.wait()
            return "released"

        model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}, "done"])
        agent = Agent("a", "", model, tools=[hold])
        first = asyncio.create_task(agent.run("1", session=mem_store.session("a"), controller=controller))
        await asyncio.wait_for(entered.wait(), 60)  # only bounds a run that never calls the tool
        assert controller.active == mem_store.runs("a")[0].run_id
        with pytest.raises(UsageError):
            await agent.run("2", session=mem_store.session("b"), controller=controller)
        release.set()
        assert (await first).text == "done"
        assert controller.active is None

    asyncio.run(main())
    assert mem_store.runs("b") == []


def test_a_custom_model_object_works_and_its_usage_gets_every_key(mem_store):
    class Echo:
        """The smallest model object: no name, partial usage."""

        async def stream(self, messages, *, tools):
            from sessionkit.agent.models import ModelReply, TextDelta

            text = "echo: " + messages[-1]["content"]
            yield TextDelta(text)
            yield ModelReply(text=text, usage={"in": 3})

    agent = Agent("e", "", Echo())
    result = agent.run_sync("hi", session=mem_store.session("echo"))
    assert result.text == "echo: hi"
    [usage] = [e for e in mem_store.events("echo") if e["kind"] == "usage"]
    assert {k: usage[k] for k in ("in", "out", "cache_read", "cache_write", "cost_usd", "model")} == {
        "in": 3,
        "out": 0,
        "cache_read": 0,
        "cache_write": 0,
        "cost_usd": None,
        "model": "Echo",
    }
