"""Runs through the real litellm code path, offline with ``mock_response``."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from helpers import get_weather, kinds, litellm_tool_call

from sessionkit.agent import Agent
from sessionkit.agent.models import LiteLLMModel
from sessionkit.errors import ModelError

pytestmark = [
    # litellm is imported by the runs, not at collection (its import takes seconds)
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed"),
    # litellm's own pydantic types warn about ReadOnly TypedDict items under pytest's warning capture
    pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning"),
]


class Sequenced(LiteLLMModel):
    """A litellm model answering each call with the next mock response."""

    def __init__(self, model, responses, **options):
        super().__init__(model, **options)
        self.responses = list(responses)
        self.seen = []

    def call_options(self, messages, tools):
        options = super().call_options(messages, tools)
        self.seen.append({"messages": messages, "tools": tools})
        options["mock_response"] = self.responses.pop(0)
        return options


def test_plain_text_reply_without_streaming(store):
    model = LiteLLMModel("gpt-4o-mini", stream=False, mock_response="Hello from litellm.")
    agent = Agent("a", "Be kind.", model)
    session = store.session("plain")
    result = agent.run_sync("Hi", session=session)
    assert result.text == "Hello from litellm."
    assert [m["parts"] for m in session.get_history()] == [
        [{"type": "text", "text": "Hi"}],
        [{"type": "text", "text": "Hello from litellm."}],
    ]
    events = store.events("plain")
    assert kinds(events) == ["run.start", "turn.start", "delta.text", "usage", "turn.end", "run.end"]
    usage = events[3]
    assert usage["model"] == "gpt-4o-mini" and usage["in"] > 0 and usage["out"] > 0
    assert isinstance(usage["cost_usd"], float) and usage["cost_usd"] > 0


@pytest.mark.slow
def test_streamed_text_arrives_in_several_deltas(store):
    agent = Agent("a", "", LiteLLMModel("gpt-4o-mini", mock_response="Streaming works one piece at a time."))
    session = store.session("stream")

    async def collect():
        return [e async for e in agent.stream("Go", session=session)]

    events = asyncio.run(collect())
    deltas = [e["text"] for e in events if e["kind"] == "delta.text"]
    assert len(deltas) > 2
    assert "".join(deltas) == "Streaming works one piece at a time."
    assert events[-1]["kind"] == "run.end" and events[-1]["status"] == "completed"
    assert session.latest_leaf()["parts"] == [{"type": "text", "text": "Streaming works one piece at a time."}]


@pytest.mark.parametrize("stream", [True, False])
def test_a_tool_call_then_a_final_answer(store, stream):
    model = Sequenced(
        "gpt-4o-mini",
        [litellm_tool_call("get_weather", {"city": "Paris"}), "It is sunny in Paris, 21 °C."],
        stream=stream,
    )
    agent = Agent("weather", "You report weather.", model, tools=[get_weather])
    session = store.session("tools")
    result = agent.run_sync("Weather in Paris?", session=session)

    assert result.text == "It is sunny in Paris, 21 °C."
    assert [m["role"] for m in result.messages] == ["user", "assistant", "assistant"]
    assert result.messages[1]["parts"] == [
        {
            "type": "tool-get_weather",
            "toolCallId": "call_1",
            "state": "output-available",
            "input": {"city": "Paris"},
            "output": {"city": "Paris", "sky": "sunny", "celsius": 21},
        }
    ]
    assert session.get_history() == result.messages
    # the tool schema went to litellm, and the second call carried the tool round trip
    assert model.seen[0]["tools"][0]["function"]["name"] == "get_weather"
    assert model.seen[0]["tools"][0]["function"]["parameters"]["required"] == ["city"]
    assert model.seen[1]["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"city": "Paris", "sky": "sunny", "celsius": 21}'},
    ]
    events = store.events("tools")
    assert kinds(events)[:6] == ["run.start", "turn.start", "usage", "tool.call", "tool.result", "turn.end"]
    assert events[2]["in"] == 40 and events[2]["out"] == 12
    assert [e["stop_reason"] for e in events if e["kind"] == "turn.end"] == ["tool_calls", "stop"]
    assert result.usage["in"] >= 40 and isinstance(result.usage["cost_usd"], float)


@pytest.mark.parametrize(
    "mock, cause",
    [
        ("litellm.RateLimitError", "RateLimitError"),
        (Exception("provider exploded"), "InternalServerError"),
    ],
)
def test_a_provider_error_becomes_model_error_and_appends_nothing(store, mock, cause):
    agent = Agent("a", "", LiteLLMModel("gpt-4o-mini", mock_response=mock))
    session = store.session("err")
    with pytest.raises(ModelError) as info:
        agent.run_sync("Hi", session=session)
    assert type(info.value.__cause__).__name__ == cause
    assert type(info.value.__cause__).__module__.startswith("litellm")
    assert session.get_history() == []
    [run] = store.runs("err")
    assert run.status == "failed" and run.run_id == info.value.run_id
    assert kinds(store.events("err")) == ["run.start", "turn.start", "run.end"]


def test_cost_is_a_float_for_a_priced_model_and_none_for_an_unpriced_one(mem_store):
    priced = Agent("a", "", LiteLLMModel("gpt-4o-mini", mock_response="priced"))
    unpriced = Agent("b", "", LiteLLMModel("openai/sessionkit-unpriced-model", mock_response="unpriced"))
    a = priced.run_sync("Hi", session=mem_store.session("p"))
    b = unpriced.run_sync("Hi", session=mem_store.session("u"))
    assert isinstance(a.usage["cost_usd"], float) and a.usage["cost_usd"] > 0
    assert b.usage["cost_usd"] is None  # unknown, never zero
    assert b.usage["in"] > 0
    [usage_event] = [e for e in mem_store.events("u") if e["kind"] == "usage"]
    assert usage_event["cost_usd"] is None
    assert mem_store.runs("u")[0].usage["cost_usd"] is None


def test_a_model_name_string_is_a_litellm_model():
    agent = Agent("a", "", "gpt-4o-mini")
    assert isinstance(agent.model, LiteLLMModel) and agent.model.name == "gpt-4o-mini"
