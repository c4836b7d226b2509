"""Run context (docs/agents.md): shown to the model beside the turn's user message, given to tools, never stored."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

import sessionkit as sk
from sessionkit.agent import Agent, RunController
from sessionkit.agent.tools import as_tool
from sessionkit.testing.scripted import ScriptedModel

CONTEXT = {"customer_id": "cus-4417", "plan": "pro", "locale": "pt-PT"}
BLOCK = '<context>\n{"customer_id": "cus-4417", "plan": "pro", "locale": "pt-PT"}\n</context>'


def with_block(prompt: str, block: str = BLOCK) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": block}, {"type": "text", "text": prompt}]}


def list_orders(status: str, context: dict) -> list:
    """Orders of the signed-in customer with a status.

    Args:
        status: "open" or "shipped".
        context: The run's context (never shown to the model).
    """
    return [{"customer": context["customer_id"], "status": status, "n": 2}]


def test_the_model_sees_the_context_before_the_prompt_and_nothing_stores_it(store):
    model = ScriptedModel(["You are on the pro plan."])
    agent = Agent("a", "Answer from the context.", model)
    session = store.session("c")
    result = agent.run_sync("Which plan am I on?", session=session, context=CONTEXT)

    assert model.calls == [
        [
            {"role": "system", "content": "Answer from the context."},
            with_block("Which plan am I on?"),
        ]
    ]
    history = session.get_history()
    assert [m["parts"] for m in history] == [
        [{"type": "text", "text": "Which plan am I on?"}],
        [{"type": "text", "text": "You are on the pro plan."}],
    ]
    assert history == result.messages
    assert history[0]["metadata"] == {"run_id": result.run_id}
    # neither the stored messages, the run record nor any event carries the context
    stored = json.dumps([history, [r.__dict__ for r in store.runs("c")], store.events("c")])
    assert "cus-4417" not in stored and "<context>" not in stored
    assert store.runs("c")[0].input == "Which plan am I on?"


def test_the_context_stays_for_the_runs_tool_turns_and_is_gone_in_the_next_run(mem_store):
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "list_orders", "arguments": {"status": "open"}, "id": "c1"}]},
            "You have 2 open orders.",
            "Hello again.",
        ]
    )
    agent = Agent("a", "", model, tools=[list_orders])
    session = mem_store.session("t")
    agent.run_sync("Any open orders?", session=session, context=CONTEXT)
    agent.run_sync("Thanks", session=session)

    assert model.calls[0][-1] == with_block("Any open orders?")
    assert model.calls[1][0] == with_block("Any open orders?")  # the tool turn still sees it
    assert [m["role"] for m in model.calls[1]] == ["user", "assistant", "tool"]
    # the next run reads the stored history: the prompt alone, no context
    assert model.calls[2][0] == {"role": "user", "content": "Any open orders?"}
    assert model.calls[2][-1] == {"role": "user", "content": "Thanks"}
    assert "<context>" not in json.dumps(model.calls[2])
    assert "pt-PT" not in json.dumps(model.calls[2])  # only what the tool returned stays


def test_a_tool_receives_the_context_the_model_cannot_see_or_set(mem_store):
    received = []

    def whoami(context: dict, verbose: bool = False) -> str:
        """Who is asking."""
        received.append(context)
        context["plan"] = "changed by the tool"  # its own copy
        return context["customer_id"]

    # the model tries to pass a context of its own: it is ignored
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "whoami", "arguments": {"context": {"customer_id": "evil"}}, "id": "c1"},
                    {"name": "whoami", "arguments": {"verbose": True}, "id": "c2"},
                ]
            },
            "done",
        ]
    )
    agent = Agent("a", "", model, tools=[whoami])
    session = mem_store.session("w")
    result = agent.run_sync("who am I?", session=session, context=CONTEXT)

    assert [r["customer_id"] for r in received] == ["cus-4417", "cus-4417"]
    assert received[0] is not received[1]
    tool_parts = result.messages[1]["parts"]
    assert [p["output"] for p in tool_parts] == ["cus-4417", "cus-4417"]
    assert model.calls[1][0] == with_block("who am I?")  # the tool's change did not reach the model
    # the schema has no context parameter
    assert model.tools[0][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"verbose": {"type": "boolean", "default": False}},
    }


def test_the_tool_schema_leaves_out_context():
    schema = as_tool(list_orders).schema()["function"]
    assert schema["parameters"] == {
        "type": "object",
        "properties": {"status": {"type": "string", "description": '"open" or "shipped".'}},
        "required": ["status"],
    }


def test_without_a_run_context_the_parameter_gets_none_or_its_default(mem_store):
    got = {}

    def needs(context) -> str:
        """Requires the parameter."""
        got["needs"] = context
        return "ok"

    async def optional(context: dict = {"plan": "free"}) -> str:  # noqa: B006 - the default is the point
        """Has a default."""
        got["optional"] = context
        return "ok"

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "needs", "arguments": {}}, {"name": "optional", "arguments": {}}]},
            "done",
            {"tool_calls": [{"name": "optional", "arguments": {}}]},
            "done",
        ]
    )
    agent = Agent("a", "", model, tools=[needs, optional])
    agent.run_sync("go", session=mem_store.session("n"))
    assert got == {"needs": None, "optional": {"plan": "free"}}
    agent.run_sync("go", session=mem_store.session("n"), context={"plan": "pro"})
    assert got["optional"] == {"plan": "pro"}
    assert "context" not in json.dumps(model.tools[0])


@pytest.mark.parametrize(
    "bad",
    [
        ["a", "list"],
        "a string",
        42,
        ({"a": 1},),
        {"ids": {1, 2}},
        {"when": object()},
        {"x": math.nan},
        {"x": math.inf},
        {"text": "lone \ud800 surrogate"},
    ],
)
def test_a_context_that_is_not_a_json_object_is_a_type_error_before_anything_is_recorded(mem_store, bad):
    model = ScriptedModel(["never"])
    agent = Agent("a", "", model)
    with pytest.raises(TypeError, match="context"):
        agent.run_sync("hi", session=mem_store.session("bad"), context=bad)
    assert mem_store.runs("bad") == [] and mem_store.events("bad") == []
    assert model.calls == []


def test_a_circular_context_is_a_type_error(mem_store):
    loop: dict = {"a": 1}
    loop["self"] = loop
    with pytest.raises(TypeError, match="JSON-encodable"):
        Agent("a", "", ScriptedModel(["x"])).run_sync("hi", session=mem_store.session(), context=loop)


def test_the_model_sees_the_context_as_json_gives_it_back(mem_store):
    model = ScriptedModel(["ok"])
    Agent("a", "", model).run_sync("hi", session=mem_store.session(), context={"pair": (1, 2), "n": None, "é": "ü"})
    assert model.calls[0][-1]["content"][0]["text"] == '<context>\n{"pair": [1, 2], "n": null, "é": "ü"}\n</context>'


def test_stream_and_async_run_take_a_context(mem_store):
    model = ScriptedModel(["streamed", "awaited"])
    agent = Agent("a", "", model)
    session = mem_store.session("s")

    async def main():
        events = [e async for e in agent.stream("one", session=session, context={"k": 1})]
        result = await agent.run("two", session=session, context={"k": 2})
        return events, result

    events, result = asyncio.run(main())
    assert events[-1]["kind"] == "run.end" and result.status == "completed"
    assert model.calls[0][-1] == with_block("one", '<context>\n{"k": 1}\n</context>')
    assert model.calls[1][0] == {"role": "user", "content": "one"}
    assert model.calls[1][-1] == with_block("two", '<context>\n{"k": 2}\n</context>')
    assert [m["parts"][0]["text"] for m in session.get_history()] == ["one", "streamed", "two", "awaited"]


def test_a_follow_up_joins_without_repeating_the_context(mem_store):
    controller = RunController()

    def check_in(context: dict) -> str:
        """The user follows up while the tool runs."""
        controller.follow_up("and the shipped ones?")
        return context["plan"]

    model = ScriptedModel([{"tool_calls": [{"name": "check_in", "arguments": {}}]}, "open: 2", "shipped: 5"])
    agent = Agent("a", "", model, tools=[check_in])
    agent.run_sync("orders?", session=mem_store.session("f"), controller=controller, context=CONTEXT)
    last = model.calls[-1]
    assert last[0] == with_block("orders?")
    assert last[-1] == {"role": "user", "content": "and the shipped ones?"}
    assert sum("<context>" in json.dumps(m) for m in last) == 1


def test_regenerate_shows_the_context_beside_the_answered_message(mem_store):
    model = ScriptedModel(["first answer", "second answer"])
    agent = Agent("a", "", model)
    session = mem_store.session("r")
    first = agent.run_sync("Which plan?", session=session)
    regenerated = agent.regenerate_sync(session, first.messages[0]["id"], context=CONTEXT)
    assert model.calls[1] == [with_block("Which plan?")]
    assert regenerated.text == "second answer"
    assert [m["parts"][0]["text"] for m in session.get_history()] == ["Which plan?", "second answer"]
    assert "cus-4417" not in json.dumps(session.get_history())


def test_a_prompt_with_a_file_keeps_its_parts_after_the_context(mem_store):
    model = ScriptedModel(["a cat"])
    prompt = {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "What is this?"},
            {"type": "file", "mediaType": "image/png", "url": "https://example.invalid/cat.png"},
        ],
    }
    Agent("a", "", model).run_sync(prompt, session=mem_store.session("img"), context={"k": 1})
    assert model.calls[0][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": '<context>\n{"k": 1}\n</context>'},
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.png"}},
        ],
    }


@pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning")  # litellm's own types
def test_litellm_receives_the_context_block(mem_store, monkeypatch):
    litellm = pytest.importorskip("litellm")
    seen = []
    real = litellm.acompletion

    async def recording(**kwargs):
        seen.append(kwargs["messages"])
        return await real(**kwargs)

    monkeypatch.setattr(litellm, "acompletion", recording)
    agent = sk.Agent("a", "", sk.LiteLLMModel("gpt-4o-mini", mock_response="pro"))
    result = agent.run_sync("Which plan?", session=mem_store.session("l"), context=CONTEXT)
    assert result.text == "pro"
    assert seen == [[with_block("Which plan?")]]
