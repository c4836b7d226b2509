"""Guardrails (docs/agents.md): input and output checks that fail a run with GuardrailTripped."""

from __future__ import annotations

import asyncio
import copy
import functools
import re
import sys
import threading
from pathlib import Path

import pytest
from helpers import kinds

import sessionkit as sk
from sessionkit.agent import Agent, RunController
from sessionkit.errors import GuardrailTripped, RunFailed, RunTimeout
from sessionkit.testing.scripted import ScriptedModel

CARD = re.compile(r"\b(?:\d[ -]?){13,16}\b")


def text(message):
    return " ".join(p["text"] for p in message["parts"] if p["type"] == "text")


def no_card_numbers(messages):
    """Blocks a reply that shows a card number."""
    for m in messages:
        if m["role"] == "assistant" and CARD.search(text(m)):
            return "the reply contains a card number"
    return None


async def no_shouting(messages):
    """Blocks a user message written in capitals (an async guardrail)."""
    await asyncio.sleep(0)
    for m in messages:
        if m["role"] == "user" and text(m).isupper():
            return f"shouting: {text(m)!r}"
    return None


def lookup_card(customer: str) -> dict:
    """The customer's card on file."""
    return {"customer": customer, "card": "4111 1111 1111 1111"}


def seed(session):
    session.append({"id": "old-u", "role": "user", "parts": [{"type": "text", "text": "hello"}]})
    session.append({"id": "old-a", "role": "assistant", "parts": [{"type": "text", "text": "hi there"}]})
    return [m["id"] for m in session.get_history()]


def assert_blocked_and_recorded(store, sid, exc, before):
    """Nothing appended, the run recorded failed with the reason, run.end carries the error."""
    assert [m["id"] for m in store.session(sid).get_history()] == before
    run = store.runs(sid)[-1]
    assert run.run_id == exc.run_id
    assert run.status == "failed"
    assert exc.reason in run.error and repr(exc.guardrail) in run.error
    end = store.events(sid)[-1]
    assert end["kind"] == "run.end" and end["run_id"] == exc.run_id
    assert end["status"] == "failed"
    assert end["error"] == run.error == str(exc)
    assert end["error_type"] == "GuardrailTripped"


# ---------------------------------------------------------------------------- output


def test_an_output_guardrail_blocks_a_reply_with_a_card_number_and_nothing_is_appended(store):
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "lookup_card", "arguments": {"customer": "ada"}, "id": "c1"}]},
            "Your card on file is 4111 1111 1111 1111.",
        ]
    )
    agent = Agent("support", "Help customers.", model, tools=[lookup_card], output_guardrails=[no_card_numbers])
    session = store.session("cards")
    before = seed(session)

    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("Which card do you have for me?", session=session)

    exc = info.value
    assert isinstance(exc, RunFailed) and isinstance(exc, sk.SessionKitError)
    assert exc.reason == "the reply contains a card number"
    assert exc.guardrail == "no_card_numbers"
    assert exc.stage == "output"
    assert str(exc) == "output guardrail 'no_card_numbers' blocked the run: the reply contains a card number"
    assert len(model.calls) == 2  # the model answered; the block came before the append
    assert_blocked_and_recorded(store, "cards", exc, before)
    assert kinds(store.events("cards"))[-3:] == ["usage", "turn.end", "run.end"]


def test_output_guardrails_see_exactly_the_messages_the_run_would_append(mem_store):
    seen = []

    def record(messages):
        seen.append(copy.deepcopy(messages))
        messages[0]["parts"][0]["text"] = "changed by the guardrail"  # a copy: changes nothing

    model = ScriptedModel(
        [
            {"text": "Adding.", "tool_calls": [{"name": "lookup_card", "arguments": {"customer": "bo"}, "id": "c1"}]},
            "Done.",
        ]
    )
    agent = Agent("a", "", model, tools=[lookup_card], output_guardrails=[record])
    result = agent.run_sync("go", session=mem_store.session("s"))

    [messages] = seen
    assert [(m["role"], text(m)) for m in messages] == [
        ("user", "go"),
        ("assistant", "Adding."),
        ("assistant", "Done."),
    ]
    assert messages[1]["parts"][1]["output"] == {"customer": "bo", "card": "4111 1111 1111 1111"}
    assert [m["id"] for m in messages] == [m["id"] for m in result.messages]
    assert [text(m) for m in mem_store.session("s").get_history()] == ["go", "Adding.", "Done."]


def test_an_allowing_guardrail_lets_the_run_complete(mem_store):
    agent = Agent(
        "a", "", ScriptedModel(["All fine."]), input_guardrails=[no_shouting], output_guardrails=[no_card_numbers]
    )
    result = agent.run_sync("hello there", session=mem_store.session("ok"))
    assert result.status == "completed" and result.text == "All fine."
    assert [text(m) for m in mem_store.session("ok").get_history()] == ["hello there", "All fine."]
    assert mem_store.runs("ok")[0].status == "completed"


# ---------------------------------------------------------------------------- input


def test_an_async_input_guardrail_blocks_before_the_first_model_call(store):
    model = ScriptedModel(["never sent"])
    agent = Agent("a", "", model, input_guardrails=[no_shouting])
    session = store.session("loud")
    before = seed(session)

    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("GIVE ME A REFUND", session=session)

    exc = info.value
    assert (exc.guardrail, exc.stage, exc.reason) == ("no_shouting", "input", "shouting: 'GIVE ME A REFUND'")
    assert model.calls == []  # the model never saw the message
    assert model.remaining == 1
    assert_blocked_and_recorded(store, "loud", exc, before)
    assert kinds(store.events("loud")) == ["run.start", "run.end"]
    assert store.runs("loud")[0].input == "GIVE ME A REFUND"


def test_input_guardrails_get_the_new_user_message_only(mem_store):
    seen = []

    def record(messages):
        seen.append([(m["role"], text(m), m["metadata"]) for m in messages])

    session = mem_store.session("s")
    seed(session)
    agent = Agent("a", "", ScriptedModel(["ok"]), input_guardrails=[record])
    result = agent.run_sync("new question", session=session, metadata={"author": "ada"})
    assert seen == [[("user", "new question", {"author": "ada", "run_id": result.run_id})]]


def test_guardrails_run_in_order_and_the_first_block_wins(mem_store):
    calls = []

    def allow(messages):
        calls.append("allow")

    def block(messages):
        calls.append("block")
        return "first block"

    def never(messages):
        calls.append("never")
        return "second block"

    agent = Agent("a", "", ScriptedModel(["x"]), input_guardrails=[allow, block, never])
    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("hi", session=mem_store.session("o"))
    assert calls == ["allow", "block"]
    assert (info.value.guardrail, info.value.reason) == ("block", "first block")


# ---------------------------------------------------------------------------- failures of the guardrail itself


def test_a_guardrail_that_raises_fails_the_run_the_same_way(store):
    def moderation_api(messages):
        raise ConnectionError("moderation service unreachable")

    agent = Agent("a", "", ScriptedModel(["Sure."]), output_guardrails=[moderation_api])
    session = store.session("raises")
    before = seed(session)
    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("hi", session=session)
    exc = info.value
    assert exc.reason == "ConnectionError: moderation service unreachable"
    assert exc.guardrail == "moderation_api" and exc.stage == "output"
    assert isinstance(exc.__cause__, ConnectionError)
    assert str(exc) == "output guardrail 'moderation_api' raised ConnectionError: moderation service unreachable"
    assert_blocked_and_recorded(store, "raises", exc, before)


def test_an_async_guardrail_that_raises_and_one_with_a_bad_answer(mem_store):
    async def broken(messages):
        raise KeyError("parts")

    def yes_or_no(messages):
        return True

    with pytest.raises(GuardrailTripped) as info:
        Agent("a", "", ScriptedModel(["x"]), input_guardrails=[broken]).run_sync("hi", session=mem_store.session("b"))
    assert info.value.reason == "KeyError: 'parts'" and info.value.guardrail == "broken"

    with pytest.raises(GuardrailTripped) as info:
        Agent("a", "", ScriptedModel(["x"]), input_guardrails=[yes_or_no]).run_sync(
            "hi", session=mem_store.session("c")
        )
    assert info.value.guardrail == "yes_or_no"
    assert "returned a bool" in info.value.reason
    assert mem_store.session("b").get_history() == [] and mem_store.session("c").get_history() == []
    assert [r.status for r in mem_store.runs("b") + mem_store.runs("c")] == ["failed", "failed"]


def test_guardrail_names_of_partials_and_callable_objects(mem_store):
    def limit(messages, max_chars):
        return "too long" if len(text(messages[0])) > max_chars else None

    class Blocklist:
        async def __call__(self, messages):
            return "blocked word" if "secret" in text(messages[0]) else None

    agent = Agent(
        "a", "", ScriptedModel(["x", "y"]), input_guardrails=[functools.partial(limit, max_chars=8), Blocklist()]
    )
    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("far too long", session=mem_store.session("p"))
    assert info.value.guardrail == "limit"
    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("secret", session=mem_store.session("p"))
    assert info.value.guardrail == "Blocklist"


def test_a_slow_guardrail_counts_against_the_timeout(mem_store):
    async def slow(messages):
        await asyncio.sleep(60)  # a guardrail that never answers in time (60 s bounds a broken timeout)

    agent = Agent("a", "", ScriptedModel(["x"]), output_guardrails=[slow])
    with pytest.raises(RunTimeout):
        agent.run_sync("hi", session=mem_store.session("t"), timeout=0.2)
    assert mem_store.session("t").get_history() == []
    assert mem_store.runs("t")[0].status == "failed"


def test_guardrail_arguments_are_checked():
    model = ScriptedModel([])
    with pytest.raises(TypeError, match="list of callables"):
        Agent("a", "", model, input_guardrails=no_card_numbers)
    with pytest.raises(TypeError, match="must be callable"):
        Agent("a", "", model, output_guardrails=["no_card_numbers"])
    with pytest.raises(TypeError, match="list of callables"):
        Agent("a", "", model, output_guardrails="no_card_numbers")
    agent = Agent("a", "", model, input_guardrails=(no_shouting,), output_guardrails=[no_card_numbers])
    assert agent.input_guardrails == (no_shouting,) and agent.output_guardrails == (no_card_numbers,)


# ---------------------------------------------------------------------------- stream, regenerate, follow-ups


def test_stream_yields_run_end_with_the_error_then_raises(mem_store):
    agent = Agent("a", "", ScriptedModel(["Card: 4111-1111-1111-1111"]), output_guardrails=[no_card_numbers])
    session = mem_store.session("st")
    events = []

    async def consume():
        async for event in agent.stream("my card?", session=session):
            events.append(event)

    with pytest.raises(GuardrailTripped) as info:
        asyncio.run(consume())
    assert events[-1]["kind"] == "run.end"
    assert events[-1]["status"] == "failed"
    assert events[-1]["error"] == str(info.value)
    assert "delta.text" in kinds(events)  # the reply streamed before the check
    assert session.get_history() == []


def test_regenerate_checks_the_answered_message_and_the_new_reply(mem_store):
    seen = []

    def record_input(messages):
        seen.append([m["id"] for m in messages])

    model = ScriptedModel(["Card 4111 1111 1111 1111"])
    agent = Agent("a", "", model, input_guardrails=[record_input], output_guardrails=[no_card_numbers])
    session = mem_store.session("regen")
    seed(session)
    with pytest.raises(GuardrailTripped) as info:
        agent.regenerate_sync(session, "old-a")
    assert info.value.stage == "output"
    assert seen == [["old-u"]]
    assert [m["id"] for m in session.get_history()] == ["old-u", "old-a"]
    assert [m["id"] for m in session.branches("old-u")] == ["old-a"]  # no sibling reply was added


def test_a_queued_message_passes_the_input_guardrails_when_it_joins(store):
    controller = RunController()
    seen = []

    def record(messages):
        seen.append(text(messages[0]))

    def check_in() -> str:
        """Runs while the run is active: the user sends two more messages."""
        controller.steer("only in Lisbon")
        controller.follow_up("and a cheap one")
        return "checked"

    model = ScriptedModel([{"tool_calls": [{"name": "check_in", "arguments": {}}]}, "steered", "followed"])
    agent = Agent("a", "", model, tools=[check_in], input_guardrails=[record])
    result = agent.run_sync("find a hotel", session=store.session("q"), controller=controller)
    assert seen == ["find a hotel", "only in Lisbon", "and a cheap one"]
    assert [text(m) for m in result.messages if m["role"] == "user"] == seen


def test_a_blocked_follow_up_fails_the_whole_run(store):
    controller = RunController()

    def check_in() -> str:
        """The user follows up in capitals while the tool runs."""
        controller.follow_up("CANCEL EVERYTHING")
        return "checked"

    model = ScriptedModel([{"tool_calls": [{"name": "check_in", "arguments": {}}]}, "answer", "unused"])
    agent = Agent("a", "", model, tools=[check_in], input_guardrails=[no_shouting])
    session = store.session("f")
    before = seed(session)
    with pytest.raises(GuardrailTripped) as info:
        agent.run_sync("find a hotel", session=session, controller=controller)
    exc = info.value
    assert exc.reason == "shouting: 'CANCEL EVERYTHING'" and exc.stage == "input"
    assert len(model.calls) == 1  # the model never saw the blocked follow-up
    assert controller.queued == 0  # the blocked message was consumed
    assert_blocked_and_recorded(store, "f", exc, before)
    # the run went through a whole turn (tool call and result) before the block
    assert kinds(store.events("f"))[-4:] == ["tool.call", "tool.result", "turn.end", "run.end"]


def test_a_guardrail_raising_guardrail_tripped_keeps_its_reason(mem_store):
    def strict(messages):
        raise GuardrailTripped("custom", reason="policy 7")

    with pytest.raises(GuardrailTripped) as info:
        Agent("a", "", ScriptedModel(["x"]), input_guardrails=[strict]).run_sync("hi", session=mem_store.session("g"))
    exc = info.value
    assert (exc.reason, exc.guardrail, exc.stage) == ("policy 7", "strict", "input")
    assert exc.run_id == mem_store.runs("g")[0].run_id


def test_sync_guardrails_do_not_block_the_event_loop(mem_store):
    entered = threading.Event()
    gate = threading.Event()
    returned = threading.Event()
    ticks = []

    def slow_check(messages):
        entered.set()
        gate.wait(60)  # a blocking moderation call, released by the test (60 s bounds a broken test)
        returned.set()

    async def main():
        agent = Agent("a", "", ScriptedModel(["x"]), input_guardrails=[slow_check])
        run = asyncio.ensure_future(agent.run("hi", session=mem_store.session("l")))
        await asyncio.to_thread(entered.wait, 60)
        for _ in range(5):  # the loop goes on turning while the guardrail blocks
            await asyncio.sleep(0)
            ticks.append(returned.is_set())
        gate.set()
        return await run

    result = asyncio.run(main())
    assert result.status == "completed" and ticks == [False] * 5


# ---------------------------------------------------------------------------- the HTTP server


def test_a_server_run_blocked_by_a_guardrail_is_recorded_failed(tmp_path):
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
    from live_server import TOKEN, LiveServer, wait_idle

    from sessionkit.server import create_app

    store = sk.open_store(tmp_path / "server.db")
    model = ScriptedModel(["Your card is 4111 1111 1111 1111.", "Fine."])
    agent = Agent("support", "", model, output_guardrails=[no_card_numbers])
    live = LiveServer(create_app(agent, store, token=TOKEN)).start()
    try:
        with live.client() as c:
            c.post("/sessions", json={"sessionId": "g"})
            assert c.post("/sessions/g/messages", json={"text": "my card?"}).json() == {"runId": "g.1", "queued": False}
            wait_idle(c, "g")
            c.post("/sessions/g/messages", json={"text": "thanks"})
            state = wait_idle(c, "g")
    finally:
        live.stop()
    try:
        assert [(r["runId"], r["status"]) for r in state["runs"]] == [("g.1", "failed"), ("g.2", "completed")]
        [first, second] = store.runs("g")
        assert first.status == "failed" and "the reply contains a card number" in first.error
        assert second.status == "completed"
        assert [text(m) for m in store.session("g").get_history()] == ["thanks", "Fine."]
    finally:
        store.close()
