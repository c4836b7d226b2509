"""sk.capture: litellm completions (sync and async, streamed or not, offline with mock_response)
recorded as conversation trees and runs, compared with what litellm itself reported."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

import sessionkit as sk

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm's bundled prices: nothing fetched


class _Litellm:
    """litellm, imported on first use (after the setting above): the import takes seconds,
    which every test worker would otherwise pay while collecting, whether or not it runs a
    test of this module."""

    def __getattr__(self, name):
        if name.startswith("__"):
            # What the collector asks of every module attribute (__bases__ when it checks
            # for test classes, __test__): answered without importing litellm.
            raise AttributeError(name)
        import litellm

        return getattr(litellm, name)

    def __setattr__(self, name, value):
        import litellm

        setattr(litellm, name, value)


litellm = _Litellm()

MODEL = "gpt-4o-mini"
SYSTEM = {"role": "system", "content": "Answer in one line."}


def _probe_class():
    from litellm.integrations.custom_logger import CustomLogger

    class Seen(CustomLogger):
        """What litellm reported of each call, independently of the capture."""

        def __init__(self):
            super().__init__()
            self.calls: list[dict] = []
            self._cond = threading.Condition()

        def _add(self, kwargs, response, failed):
            usage = getattr(response, "usage", None)
            with self._cond:
                self.calls.append(
                    {
                        "call_id": kwargs.get("litellm_call_id"),
                        "failed": failed,
                        "in": getattr(usage, "prompt_tokens", None),
                        "out": getattr(usage, "completion_tokens", None),
                        "cost": kwargs.get("response_cost"),
                    }
                )
                self._cond.notify_all()

        def log_success_event(self, kwargs, response_obj, start_time, end_time):
            self._add(kwargs, response_obj, False)

        def log_failure_event(self, kwargs, response_obj, start_time, end_time):
            self._add(kwargs, None, True)

        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            self._add(kwargs, response_obj, False)

        async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
            self._add(kwargs, None, True)

        def wait_for(self, n: int) -> None:
            with self._cond:
                assert self._cond.wait_for(lambda: len(self.calls) >= n, 30), (
                    f"litellm reported {len(self.calls)} of {n} calls"
                )

    return Seen


@pytest.fixture
def probe():
    """A plain litellm callback put after the capture's, taken out after the test."""
    seen = _probe_class()()
    litellm.callbacks = [*litellm.callbacks, seen]
    yield seen
    from sessionkit.agent.models import remove_callback

    remove_callback(seen)


def user(text):
    return {"role": "user", "content": text}


def ask(messages, reply, **options):
    return litellm.completion(model=MODEL, messages=messages, mock_response=reply, **options)


def streamed(messages, reply):
    chunks = list(litellm.completion(model=MODEL, messages=messages, mock_response=reply, stream=True))
    return "".join(c.choices[0].delta.content or "" for c in chunks)


async def ask_async(messages, reply, *, stream=False):
    response = await litellm.acompletion(model=MODEL, messages=messages, mock_response=reply, stream=stream)
    if not stream:
        return response
    return "".join([c.choices[0].delta.content or "" async for c in response])


def test_calls_sharing_a_prefix_build_one_path_and_a_branch(new_store, engine, probe):
    store = new_store(engine)
    with sk.capture(store) as cap:
        first = ask([SYSTEM, user("Where is Oslo?")], "In Norway.")
        second = [SYSTEM, user("Where is Oslo?"), first.choices[0].message, user("And Bergen?")]
        assert streamed(second, "Also in Norway.") == "Also in Norway."
        # another question after the same reply: a branch below it

        async def third():
            again = [SYSTEM, user("Where is Oslo?"), {"role": "assistant", "content": "In Norway."}, user("And Rome?")]
            text = await ask_async(again, "Italy.", stream=True)
            await cap.wait_async()  # litellm reports an async call from its loop: keep it running until then
            return text

        assert asyncio.run(third()) == "Italy."
    assert cap.errors == []
    chat = store.session("litellm")  # the default session
    nodes = chat.nodes()
    assert len(nodes) == 7  # system, question, reply, two follow-ups and their replies
    assert [n.role for n in nodes if n.parent_id is None] == ["system"]
    reply = next(n for n in nodes if n.role == "assistant" and n.depth == 2)
    assert sorted(m["parts"][0]["text"] for m in chat.branches(reply.id)) == ["And Bergen?", "And Rome?"]
    assert [m["parts"][0]["text"] for m in chat.get_history()] == [
        "Answer in one line.",
        "Where is Oslo?",
        "In Norway.",
        "And Rome?",
        "Italy.",
    ]

    runs = store.runs("litellm")
    assert [r.status for r in runs] == ["completed"] * 3 and cap.run_ids == [r.run_id for r in runs]
    assert [r.input for r in runs] == ["Where is Oslo?", "And Bergen?", "And Rome?"]  # each call's own question
    probe.wait_for(3)
    reported = {c["call_id"]: c for c in probe.calls}
    for run in runs:
        seen = reported[run.meta["call_id"]]
        assert (run.usage["in"], run.usage["out"], run.usage["cost_usd"]) == (seen["in"], seen["out"], seen["cost"])
        assert run.usage["model"] == MODEL and run.meta["latency_s"] > 0
    assert (runs[0].usage["in"], runs[0].usage["out"]) == (first.usage.prompt_tokens, first.usage.completion_tokens)
    assert runs[0].usage["cost_usd"] == first._hidden_params["response_cost"] > 0
    # each reply carries its run, model and usage, as an agent's replies do
    replies = [m for m in chat.get_many([n.id for n in nodes]).values() if m["role"] == "assistant"]
    assert sorted(m["metadata"]["run_id"] for m in replies) == sorted(r.run_id for r in runs)
    assert sum(m["metadata"]["usage"]["cost_usd"] for m in replies) == pytest.approx(
        sum(r.usage["cost_usd"] for r in runs)
    )

    kinds = [e["kind"] for e in store.events("litellm") if e["run_id"] == runs[1].run_id]
    assert kinds == ["run.start", "turn.start", "delta.text", "usage", "turn.end", "run.end"]
    start, end = (
        e for e in store.events("litellm") if e["run_id"] == runs[1].run_id and e["kind"] in ("run.start", "run.end")
    )
    assert start["at"] == runs[1].meta["at"] and start["input"] == "And Bergen?"
    assert end["usage"] == runs[1].usage and start["ts"] <= end["ts"]


def test_repeated_calls_reuse_the_tree_and_a_new_system_prompt_is_a_new_root(new_store):
    store = new_store("sqlite")

    async def again(cap):
        await ask_async([SYSTEM, user("hi")], "hello again")  # another reply: a sibling
        await cap.wait_async()

    with sk.capture(store, session="notebook") as cap:
        for _ in range(2):
            ask([SYSTEM, user("hi")], "hello")
        ask([{"role": "system", "content": "Answer in French."}, user("hi")], "bonjour")
        asyncio.run(again(cap))
    chat = store.session("notebook")
    assert len(chat) == 7  # 3 messages, 1 more reply, and the French system prompt with its question and reply
    assert [m["parts"][0]["text"] for m in chat.roots()] == ["Answer in one line.", "Answer in French."]
    question = chat.get_history(leaf_id=chat.roots()[0]["id"])[0]
    (hi,) = chat.branches(question["id"])
    assert sorted(m["parts"][0]["text"] for m in chat.branches(hi["id"])) == ["hello", "hello again"]
    assert len(store.runs("notebook")) == 4
    assert store.runs("litellm") == []  # session= was given: nothing in the default one


@pytest.mark.slow
def test_failed_calls_are_failed_runs(new_store, engine):
    store = new_store(engine)

    async def overloaded(cap):
        with pytest.raises(Exception, match="overloaded"):
            await ask_async([user("hi")], Exception("overloaded"))
        await cap.wait_async()

    with sk.capture(store) as cap:
        with pytest.raises(Exception, match="quota"):
            ask([user("hi")], Exception("quota exceeded"))
        asyncio.run(overloaded(cap))
        ask([user("hi")], "fine")
    assert cap.errors == []
    runs = store.runs("litellm")
    assert [r.status for r in runs] == ["failed", "failed", "completed"]
    assert "quota exceeded" in runs[0].error and "overloaded" in runs[1].error
    assert runs[0].usage is None
    ended = [e for e in store.events("litellm") if e["kind"] == "run.end"]
    assert [e["status"] for e in ended] == ["failed", "failed", "completed"]
    assert ended[0]["error_type"] and ended[2]["error_type"] is None
    # the question is stored once, the reply of the call that worked under it
    assert [m["role"] for m in store.session("litellm").get_history()] == ["user", "assistant"]


def test_nothing_is_recorded_after_the_block(new_store, probe):
    store = new_store("sqlite")
    with sk.capture(store):
        ask([user("during")], "yes")
    assert litellm.callbacks == [probe]  # the capture left litellm
    before = (len(store.session("litellm")), len(store.runs("litellm")), len(store.events("litellm")))
    ask([user("after")], "no")

    async def after():
        await ask_async([user("after, async")], "no")
        await asyncio.to_thread(probe.wait_for, 3)  # litellm reports it from this loop

    asyncio.run(after())  # litellm has reported the calls after the block to every callback it had
    assert (
        (len(store.session("litellm")), len(store.runs("litellm")), len(store.events("litellm"))) == before == (2, 1, 6)
    )


def test_async_block_waits_for_its_calls(new_store):
    store = new_store("sqlite")

    async def go():
        async with sk.capture(store, session="async"):
            await asyncio.gather(*(ask_async([user(f"q{i}")], f"a{i}", stream=i % 2 == 1) for i in range(4)))

    asyncio.run(go())
    assert len(store.runs("async")) == 4 and len(store.session("async")) == 8


def test_nested_captures_record_into_each_session(new_store):
    store = new_store("sqlite")
    with sk.capture(store, session="outer") as outer:
        with sk.capture(store, session="inner") as inner:
            ask([user("both")], "yes")
        ask([user("outer only")], "yes")
    assert (len(store.runs("inner")), len(store.runs("outer"))) == (1, 2)
    assert inner.errors == outer.errors == []
    assert store.runs("inner")[0].meta["call_id"] == store.runs("outer")[0].meta["call_id"]


def test_tool_calls_and_their_results(new_store):
    store = new_store("sqlite")
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    with sk.capture(store):
        first = litellm.completion(model=MODEL, messages=[user("Weather in Oslo?")], mock_tool_calls=[call])
        asked = first.choices[0].message
        ask(
            [user("Weather in Oslo?"), asked, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
            "It is sunny.",
        )
    chat = store.session("litellm")
    history = chat.get_history()
    assert [m["role"] for m in history] == ["user", "assistant", "assistant"]
    tool_part = next(p for p in history[1]["parts"] if p["type"] == "tool-weather")
    # the reply that asked for the tool is one message, given its result by the next call
    assert tool_part["input"] == {"city": "Oslo"} and tool_part["state"] == "output-available"
    assert tool_part["output"] == "sunny"
    run = store.runs("litellm")[0]
    calls = [e for e in store.events("litellm") if e["run_id"] == run.run_id and e["kind"] == "tool.call"]
    assert [(e["name"], e["tool_call_id"], e["input"]) for e in calls] == [("weather", "call_1", {"city": "Oslo"})]
    assert [e["stop_reason"] for e in store.events("litellm") if e["kind"] == "turn.end"][0] == "tool_calls"


def test_a_capture_as_a_litellm_callback_of_its_own(new_store, probe):
    from sessionkit.agent.models import remove_callback

    store = new_store("sqlite")
    recorder = sk.capture(store, session="always")
    litellm.callbacks = [recorder, *litellm.callbacks]
    try:
        ask([user("one")], "1")

        async def two():
            await ask_async([user("two")], "2")
            assert await recorder.wait_async(30)

        asyncio.run(two())
    finally:
        remove_callback(recorder)
    assert len(store.runs("always")) == 2 and recorder.errors == []


def test_bad_arguments(new_store):
    store = new_store("sqlite")
    with pytest.raises(TypeError, match="sessionkit Store"):
        sk.capture("chats.db")
    with pytest.raises(TypeError, match="session must be a session id"):
        sk.capture(store, session=3)
    with pytest.raises(sk.UsageError, match="another store"):
        sk.capture(store, session=new_store("sqlite").session("x"))
    with pytest.raises(ValueError, match="timeout"):
        sk.capture(store, timeout=-1)
    cap = sk.capture(store)
    with cap, pytest.raises(sk.UsageError, match="active already"):
        cap.__enter__()
    assert all(c is not cap for c in litellm.callbacks)


def test_the_views_read_captured_calls(new_store):
    store = new_store("sqlite")
    with sk.capture(store):
        first = ask([user("hi")], "hello")
    (run,) = store.runs("litellm")
    start, end = (e["ts"] for e in store.events("litellm") if e["kind"] in ("run.start", "run.end"))
    assert (run.started_at, run.ended_at) == (start, end)  # the call's own times, on the run and its events
    turns = store.sql("SELECT run_id, cost_usd, latency_s, reply_id FROM turns").to_dict("records")
    assert len(turns) == 1 and turns[0]["run_id"] == run.run_id
    assert turns[0]["cost_usd"] == pytest.approx(first._hidden_params["response_cost"])
    assert turns[0]["latency_s"] == pytest.approx(run.meta["latency_s"], abs=0.002)  # events keep milliseconds
    assert turns[0]["reply_id"] == store.session("litellm").get_history()[-1]["id"]
    runs = store.sql("SELECT tokens_in, tokens_out, started_at_message FROM runs").to_dict("records")
    assert runs == [
        {
            "tokens_in": first.usage.prompt_tokens,
            "tokens_out": first.usage.completion_tokens,
            "started_at_message": run.meta["at"],
        }
    ]


def test_replies_are_recorded_in_the_order_their_calls_began(new_store):
    from datetime import datetime

    store = new_store("sqlite")
    first, second = ask([user("first")], "one"), ask([user("second")], "two")  # no capture yet: not recorded
    recorder = sk.capture(store)  # reported to as litellm reports: the later call first, from another thread

    def kwargs(call_id, text):
        return {"litellm_call_id": call_id, "model": MODEL, "messages": [user(text)], "litellm_params": {}}

    recorder.log_pre_api_call(MODEL, [user("first")], kwargs("call-a", "first"))
    recorder.log_pre_api_call(MODEL, [user("second")], kwargs("call-b", "second"))
    now = datetime.now()
    later = threading.Thread(target=recorder.log_success_event, args=(kwargs("call-b", "second"), second, now, now))
    later.start()
    assert store.runs("litellm") == []  # the second call's reply waits for the first call's
    recorder.log_success_event(kwargs("call-a", "first"), first, now, now)
    later.join()
    assert [r.meta["call_id"] for r in store.runs("litellm")] == ["call-a", "call-b"]
    assert store.session("litellm").latest_leaf()["parts"][0]["text"] == "two"
