"""ScriptedModel (docs/agents.md): replies across runs, streamed deltas, tool calls, usage, errors."""

from __future__ import annotations

import asyncio
import time

import pytest

from sessionkit.agent.models import ModelReply, ReasoningDelta, TextDelta
from sessionkit.testing.scripted import ScriptedModel, ScriptExhausted


def call(model, messages, tools=()):
    async def go():
        return [item async for item in model.stream(messages, tools=list(tools))]

    return asyncio.run(go())


def test_replies_are_used_in_order_and_text_streams_in_several_deltas():
    model = ScriptedModel(["Hello there, how are you today?", {"text": "second", "usage": {"in": 7, "out": 3}}])
    items = call(model, [{"role": "user", "content": "hi"}])
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert len(deltas) >= 3 and "".join(deltas) == "Hello there, how are you today?"
    reply = items[-1]
    assert isinstance(reply, ModelReply) and reply.text == "Hello there, how are you today?"
    assert reply.stop_reason == "stop" and reply.usage["cost_usd"] is None and reply.usage["in"] > 0
    second = call(model, [{"role": "user", "content": "again"}])[-1]
    assert second.usage == {"in": 7, "out": 3, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": "scripted"}
    assert model.calls == [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "again"}]]
    assert model.remaining == 0
    with pytest.raises(ScriptExhausted, match="call 3 has none"):
        call(model, [])


def test_tool_calls_reasoning_errors_and_delays():
    boom = TimeoutError("slow provider")
    model = ScriptedModel(
        [
            {
                "reasoning": "think first",
                "tool_calls": [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "id": "mine"}],
            },
            {"error": boom},
            {"text": "late", "delay": 0.2},
            lambda messages: f"you said {messages[-1]['content']}",
        ]
    )
    items = call(model, [])
    assert [type(i) for i in items[:-1]] == [ReasoningDelta, ReasoningDelta]
    reply = items[-1]
    assert reply.reasoning == "think first" and reply.stop_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("call_1_1", "f", {"x": 1}), ("mine", "g", {})]
    with pytest.raises(TimeoutError) as info:
        call(model, [])
    assert info.value is boom
    started = time.monotonic()
    assert call(model, [])[-1].text == "late"
    assert time.monotonic() - started >= 0.2
    assert call(model, [{"role": "user", "content": "ping"}])[-1].text == "you said ping"


def test_a_bad_script_is_refused_up_front():
    with pytest.raises(TypeError):
        ScriptedModel("just a string")
    with pytest.raises(ValueError, match="unknown keys"):
        ScriptedModel([{"txt": "typo"}])
    with pytest.raises(TypeError, match="exception"):
        ScriptedModel([{"error": "not an exception"}])
    with pytest.raises(ValueError, match="name"):
        ScriptedModel([{"tool_calls": [{"arguments": {}}]}])
    assert ScriptedModel([]).add("a", "b").remaining == 2
