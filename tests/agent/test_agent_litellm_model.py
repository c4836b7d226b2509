"""sk.LiteLLMModel (docs/agents.md): options reach every litellm call; an unknown cost is None, never 0.0."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from helpers import get_weather, litellm_tool_call

import sessionkit as sk
from sessionkit.agent.models import LiteLLMModel
from sessionkit.errors import MaxStepsExceeded, ModelError
from sessionkit.testing.scripted import ScriptedModel

pytestmark = [
    # litellm is imported by the runs, not at collection (its import takes seconds)
    pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed"),
    # litellm's own pydantic types warn about ReadOnly TypedDict items under pytest's warning capture
    pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning"),
]

UNPRICED = "openai/sessionkit-unpriced-model"


@pytest.fixture
def litellm_calls(monkeypatch):
    """Every ``litellm.acompletion`` call's keyword arguments (the real call still runs)."""
    import litellm

    calls = []
    real = litellm.acompletion

    async def recording(**kwargs):
        calls.append(kwargs)
        return await real(**kwargs)

    monkeypatch.setattr(litellm, "acompletion", recording)
    return calls


def usage_costs(store, sid):
    return [e["cost_usd"] for e in store.events(sid) if e["kind"] == "usage"]


def run_end(store, sid):
    return [e for e in store.events(sid) if e["kind"] == "run.end"][-1]


# ---------------------------------------------------------------------------- the class


def test_sk_lite_llm_model_is_the_model_behind_a_name():
    assert sk.LiteLLMModel is LiteLLMModel
    assert "LiteLLMModel" in sk.__all__
    agent = sk.Agent("a", "", "gpt-4o-mini")
    assert type(agent.model) is sk.LiteLLMModel and agent.model.name == "gpt-4o-mini"
    assert agent.model.options == {}


@pytest.mark.parametrize("stream", [True, False])
def test_litellm_kwargs_reach_every_call(mem_store, litellm_calls, stream):
    model = sk.LiteLLMModel(
        "gpt-4o-mini",
        stream=stream,
        temperature=0.2,
        max_tokens=64,
        api_base="http://127.0.0.1:9/v1",
        mock_response="Hello from the mock.",
    )
    agent = sk.Agent("a", "Be brief.", model)
    session = mem_store.session("kw")
    first = agent.run_sync("Hi", session=session)
    second = agent.run_sync("Again", session=session)

    assert first.text == second.text == "Hello from the mock."
    assert len(litellm_calls) == 2
    for call in litellm_calls:
        assert call["model"] == "gpt-4o-mini"
        assert call["temperature"] == 0.2 and call["max_tokens"] == 64
        assert call["api_base"] == "http://127.0.0.1:9/v1"
        assert call["mock_response"] == "Hello from the mock."
        assert call.get("stream", False) is stream
    assert litellm_calls[1]["messages"][-1] == {"role": "user", "content": "Again"}
    assert model.options["temperature"] == 0.2  # calls did not consume the options


def test_reserved_options_and_a_repr_that_hides_secrets():
    with pytest.raises(TypeError, match="messages"):
        sk.LiteLLMModel("gpt-4o-mini", messages=[])
    with pytest.raises(TypeError, match="tools"):
        sk.LiteLLMModel("gpt-4o-mini", tools=[])
    with pytest.raises(TypeError):
        sk.LiteLLMModel("")
    model = sk.LiteLLMModel("gpt-4o-mini", api_key="sk-live-1234", temperature=0)
    assert repr(model) == "LiteLLMModel('gpt-4o-mini', api_key=***, temperature=0)"
    assert "sk-live" not in repr(sk.Agent("a", "", model))
    assert repr(sk.LiteLLMModel("x", stream=False)) == "LiteLLMModel('x', stream=False)"


def test_priced_says_whether_litellm_knows_the_price():
    assert sk.LiteLLMModel("gpt-4o-mini").priced is True
    assert sk.LiteLLMModel(UNPRICED).priced is False
    assert sk.LiteLLMModel(UNPRICED, input_cost_per_token=1e-6, output_cost_per_token=2e-6).priced is True


# ---------------------------------------------------------------------------- unknown cost is None


def test_an_unpriced_completed_run_reports_none_everywhere(store):
    agent = sk.Agent("a", "", sk.LiteLLMModel(UNPRICED, mock_response="unpriced reply"))
    result = agent.run_sync("Hi", session=store.session("u"))
    assert result.usage["cost_usd"] is None and result.usage["in"] > 0 and result.usage["out"] > 0
    assert usage_costs(store, "u") == [None]
    assert run_end(store, "u")["usage"]["cost_usd"] is None
    [record] = store.runs("u")
    assert record.status == "completed" and record.usage["cost_usd"] is None
    assert record.usage == result.usage


def test_an_unpriced_run_that_fails_before_any_reply_reports_none_not_zero(store):
    agent = sk.Agent("a", "", sk.LiteLLMModel(UNPRICED, mock_response=Exception("provider exploded")))
    with pytest.raises(ModelError):
        agent.run_sync("Hi", session=store.session("f"))
    [record] = store.runs("f")
    assert record.status == "failed"
    assert record.usage == {"in": 0, "out": 0, "cache_read": 0, "cache_write": 0, "cost_usd": None, "model": UNPRICED}
    assert run_end(store, "f")["usage"]["cost_usd"] is None
    assert usage_costs(store, "f") == []


def test_a_priced_run_that_fails_before_any_reply_costs_a_known_zero(mem_store):
    agent = sk.Agent("a", "", sk.LiteLLMModel("gpt-4o-mini", mock_response=Exception("provider exploded")))
    with pytest.raises(ModelError):
        agent.run_sync("Hi", session=mem_store.session("p"))
    assert mem_store.runs("p")[0].usage["cost_usd"] == 0.0
    assert run_end(mem_store, "p")["usage"]["cost_usd"] == 0.0


@pytest.mark.parametrize("model_name, priced", [(UNPRICED, False), ("gpt-4o-mini", True)])
def test_a_run_failing_after_a_reply_keeps_what_its_calls_cost(mem_store, model_name, priced):
    reply = litellm_tool_call("get_weather", {"city": "Oslo"}, model=model_name)
    model = sk.LiteLLMModel(model_name, stream=False, mock_response=reply)
    agent = sk.Agent("a", "", model, tools=[get_weather], max_steps=1)
    with pytest.raises(MaxStepsExceeded):
        agent.run_sync("Weather in Oslo?", session=mem_store.session("m"))
    [record] = mem_store.runs("m")
    [event_cost] = usage_costs(mem_store, "m")
    assert record.status == "failed" and record.usage["in"] == 40 and record.usage["out"] == 12
    if priced:
        assert isinstance(event_cost, float) and event_cost > 0
        assert record.usage["cost_usd"] == pytest.approx(event_cost)
    else:
        assert event_cost is None and record.usage["cost_usd"] is None
    assert run_end(mem_store, "m")["usage"] == record.usage


def test_a_scripted_model_failing_run_has_an_unknown_cost(mem_store):
    model = ScriptedModel([{"error": ConnectionError("overloaded")}])
    with pytest.raises(ModelError):
        sk.Agent("a", "", model).run_sync("Hi", session=mem_store.session("s"))
    assert mem_store.runs("s")[0].usage["cost_usd"] is None


def test_a_guardrail_block_before_any_call_follows_the_same_rule(mem_store):
    def block(messages):
        return "no"

    for sid, model, expected in [
        ("u", sk.LiteLLMModel(UNPRICED, mock_response="x"), None),
        ("p", sk.LiteLLMModel("gpt-4o-mini", mock_response="x"), 0.0),
    ]:
        with pytest.raises(sk.GuardrailTripped):
            sk.Agent("a", "", model, input_guardrails=[block]).run_sync("Hi", session=mem_store.session(sid))
        assert mem_store.runs(sid)[0].usage["cost_usd"] == expected
        assert (mem_store.runs(sid)[0].usage["cost_usd"] is None) is (expected is None)


def test_a_custom_model_that_says_it_is_priced(mem_store):
    class Priced:
        name = "house-model"
        priced = True

        async def stream(self, messages, *, tools):
            raise RuntimeError("down")
            yield  # an async generator

    with pytest.raises(ModelError):
        sk.Agent("a", "", Priced()).run_sync("Hi", session=mem_store.session("c"))
    assert mem_store.runs("c")[0].usage["cost_usd"] == 0.0


def test_stream_reports_the_unknown_cost_in_run_end(mem_store):
    agent = sk.Agent("a", "", sk.LiteLLMModel(UNPRICED, mock_response=Exception("boom")))

    async def collect():
        events = []
        with pytest.raises(ModelError):
            async for event in agent.stream("Hi", session=mem_store.session("st")):
                events.append(event)
        return events

    events = asyncio.run(collect())
    assert events[-1]["kind"] == "run.end" and events[-1]["usage"]["cost_usd"] is None
