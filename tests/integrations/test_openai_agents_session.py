"""SessionkitSession, the OpenAI Agents SDK's session over a sessionkit store.

Against the SDK's own ``SQLiteSession`` (in memory) on random sequences of calls with items
of every type, on every engine; under the SDK's ``Runner`` driven by a scripted model (no
network); its branches, its position across processes, and the errors of bad input.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from helpers import weather
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionkit as sk


@functools.cache
def _sdk() -> SimpleNamespace:
    """The SDK and what the tests build from it, imported on first use (importing it takes seconds)."""
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.memory import Session
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sessionkit.integrations.openai_agents import SessionkitSession

    set_tracing_disabled(True)

    def say(n, text):
        return [assistant_message(text, item_id=f"msg_{n}")]

    def call(n, city):
        return [function_call("weather", {"city": city}, call_id=f"call_{n}")]

    def agent(model):
        return Agent(name="helper", instructions="be brief", model=model, tools=[function_tool(weather)])

    return SimpleNamespace(
        Runner=Runner,
        SQLiteSession=SQLiteSession,
        Session=Session,
        SessionkitSession=SessionkitSession,
        ScriptedModel=ScriptedModel,
        say=say,
        call=call,
        agent=agent,
    )


# -- items of every type the SDK keeps in a session -----------------------------------------


def _items_of_every_type(t: str, n: int) -> dict:
    """One item of each kind, built from a text ``t`` and a number ``n`` (shapes of the
    Responses API input items the SDK writes to sessions)."""
    cid = f"call_{n}"
    return {
        "user_text": {"role": "user", "content": t},
        "user_parts": {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": t},
                {"type": "input_image", "image_url": f"https://example.com/{n}.png", "detail": "auto"},
                {"type": "input_file", "file_id": f"file-{n}", "filename": "notes.txt"},
            ],
        },
        "system": {"role": "system", "content": t},
        "developer": {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": t}]},
        "assistant": {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": []}],
        },
        "refusal": {
            "id": f"msg_r{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "refusal", "refusal": t}],
        },
        "function_call": {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": cid,
            "name": "weather",
            "arguments": json.dumps({"city": t, "days": n}),
            "status": "completed",
        },
        "function_call_bad_arguments": {"type": "function_call", "call_id": cid, "name": "weather", "arguments": "{"},
        "function_call_output": {"type": "function_call_output", "call_id": cid, "output": t},
        "function_call_output_parts": {
            "type": "function_call_output",
            "call_id": cid,
            "output": [{"type": "input_text", "text": t}, {"type": "input_image", "image_url": "https://x/y.png"}],
        },
        "reasoning": {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": t}],
            "encrypted_content": "gAAAA" + t.encode().hex(),
        },
        "web_search_call": {
            "type": "web_search_call",
            "id": f"ws_{n}",
            "status": "completed",
            "action": {"type": "search", "query": t, "sources": [{"type": "url", "url": "https://example.com"}]},
        },
        "file_search_call": {
            "type": "file_search_call",
            "id": f"fs_{n}",
            "status": "completed",
            "queries": [t],
            "results": [{"file_id": f"file-{n}", "filename": "a.md", "score": 0.5, "text": t, "attributes": {}}],
        },
        "computer_call": {
            "type": "computer_call",
            "id": f"cu_{n}",
            "call_id": cid,
            "action": {"type": "click", "x": n, "y": 2 * n, "button": "left"},
            "pending_safety_checks": [],
            "status": "completed",
        },
        "computer_call_output": {
            "type": "computer_call_output",
            "call_id": cid,
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            "acknowledged_safety_checks": [],
        },
        "local_shell_call": {
            "type": "local_shell_call",
            "id": f"ls_{n}",
            "call_id": cid,
            "action": {"type": "exec", "command": ["echo", t], "env": {}},
            "status": "completed",
        },
        "local_shell_call_output": {"type": "local_shell_call_output", "id": f"ls_{n}", "output": t},
        "shell_call": {
            "type": "shell_call",
            "call_id": cid,
            "action": {"commands": [f"echo {n}"], "timeout_ms": 1000},
            "status": "completed",
        },
        "shell_call_output": {
            "type": "shell_call_output",
            "call_id": cid,
            "output": [{"stdout": t, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
        "apply_patch_call": {
            "type": "apply_patch_call",
            "call_id": cid,
            "operation": {"type": "update_file", "path": "a.py", "diff": f"-{n}\n+{t}"},
            "status": "completed",
        },
        "apply_patch_call_output": {"type": "apply_patch_call_output", "call_id": cid, "status": "completed"},
        "custom_tool_call": {"type": "custom_tool_call", "call_id": cid, "name": "grammar", "input": t},
        "custom_tool_call_output": {"type": "custom_tool_call_output", "call_id": cid, "output": t},
        "mcp_list_tools": {
            "type": "mcp_list_tools",
            "id": f"mcpl_{n}",
            "server_label": "docs",
            "tools": [{"name": "lookup", "input_schema": {"type": "object"}, "annotations": None}],
        },
        "mcp_approval_request": {
            "type": "mcp_approval_request",
            "id": f"mcpr_{n}",
            "server_label": "docs",
            "name": "lookup",
            "arguments": json.dumps({"q": t}),
        },
        "mcp_approval_response": {"type": "mcp_approval_response", "approval_request_id": f"mcpr_{n}", "approve": True},
        "mcp_call": {
            "type": "mcp_call",
            "id": f"mcp_{n}",
            "server_label": "docs",
            "name": "lookup",
            "arguments": json.dumps({"q": t}),
            "output": t,
            "error": None,
        },
        "image_generation_call": {
            "type": "image_generation_call",
            "id": f"ig_{n}",
            "status": "completed",
            "result": "iVBORw0KGgo" * (1 + n % 3),
        },
        "code_interpreter_call": {
            "type": "code_interpreter_call",
            "id": f"ci_{n}",
            "container_id": "cntr_1",
            "code": f"print({n})",
            "outputs": [{"type": "logs", "logs": t}],
            "status": "completed",
        },
        "item_reference": {"type": "item_reference", "id": f"msg_{n}"},
        "compaction": {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": "gAAAA" + str(n)},
    }


KINDS = sorted(_items_of_every_type("x", 0))
_text = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
#: Any JSON object with the keys items have: what the SDK keeps, it gives back, mapped or not.
_free_item = st.dictionaries(
    st.sampled_from(["type", "role", "content", "call_id", "id", "arguments", "summary", "output", "name", "action"]),
    _json | st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "user"]),
    max_size=5,
)
item = (
    st.builds(lambda kind, t, n: _items_of_every_type(t, n)[kind], st.sampled_from(KINDS), _text, st.integers(0, 99))
    | _free_item
)
step = st.one_of(
    st.tuples(st.just("add"), st.lists(item, max_size=4)),
    st.tuples(st.just("get"), st.one_of(st.none(), st.integers(-2, 6))),
    st.tuples(st.just("pop")),
    st.tuples(st.just("clear")),
    st.tuples(st.just("reopen")),  # a new SessionkitSession object on the same store
)


async def _compare(store, sid: str, steps: list) -> None:
    """Run ``steps`` on the SDK's SQLiteSession and on a SessionkitSession; the same results
    after every step, and every message written still in the store until a clear."""
    sdk = _sdk()
    ref = sdk.SQLiteSession(sid)
    ours = sdk.SessionkitSession(sid, store)
    stored = 0
    try:
        for op, *args in steps:
            if op == "add":
                items = args[0]
                given_items = copy.deepcopy(items)
                await ref.add_items(copy.deepcopy(items))
                await ours.add_items(items)
                assert items == given_items  # not changed by the call
                stored += len(items)
            elif op == "get":
                assert await ours.get_items(args[0]) == await ref.get_items(args[0])
            elif op == "pop":
                assert await ours.pop_item() == await ref.pop_item()
            elif op == "clear":
                await ref.clear_session()
                await ours.clear_session()
                stored = 0
            else:
                ours = sdk.SessionkitSession(sid, store)
            assert await ours.get_items() == await ref.get_items()
            assert len(store.session(sid)) == stored  # a popped item stays in the tree
    finally:
        ref.close()


def test_every_item_type_round_trips(new_store):
    """Each kind once, in one add_items: read back item for item, each one message of the tree."""
    sdk = _sdk()
    store = new_store("sqlite")
    built = _items_of_every_type("Oslo", 7)
    items = list(built.values())
    session = sdk.SessionkitSession("all", store)

    async def go():
        await session.add_items(items)
        return await session.get_items()

    assert asyncio.run(go()) == items
    path = store.session("all").get_history()
    assert len(path) == len(items)
    assert [m["metadata"]["openai_agents"]["raw"] for m in path] == items
    by_kind = dict(zip(built, path))
    assert [p["type"] for p in by_kind["function_call"]["parts"]] == ["tool-weather"]
    assert by_kind["function_call"]["parts"][0]["input"] == {"city": "Oslo", "days": 7}
    # an output added with its call is named after the call's tool
    assert by_kind["function_call_output"]["parts"][0] == {
        "type": "tool-weather",
        "toolCallId": "call_7",
        "state": "output-available",
        "output": "Oslo",
    }
    assert by_kind["reasoning"]["parts"] == [{"type": "reasoning", "text": "Oslo"}]
    assert by_kind["user_parts"]["parts"][0] == {"type": "text", "text": "Oslo"}
    assert by_kind["mcp_call"]["parts"][0]["type"] == "tool-docs.lookup"
    # arguments that are not JSON: the item is kept whole in a data part
    assert by_kind["function_call_bad_arguments"]["parts"][0]["type"] == "data-openai-function_call"
    assert by_kind["web_search_call"]["parts"][0]["input"] == built["web_search_call"]["action"]


@pytest.mark.slow
def test_matches_the_sdks_sqlite_session(engine, new_store):
    """Random sequences of add_items (items of every type), get_items(limit), pop_item and
    clear_session give SQLiteSession's results after every step."""
    store = new_store(engine)
    sessions = itertools.count()

    @settings(
        max_examples=40 if engine == "sqlite" else 12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(steps=st.lists(step, max_size=10))
    def check(steps):
        asyncio.run(_compare(store, f"s{next(sessions)}", steps))

    check()


def test_pop_item_keeps_the_popped_item_as_a_branch(new_store):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("chat", store)
    q = {"role": "user", "content": "Deploying v2 failed with a timeout."}
    a1 = {"role": "assistant", "content": "Check the deployment logs first."}
    a2 = {"role": "assistant", "content": "Retry with a longer timeout."}

    async def go():
        await s.add_items([q, a1])
        popped = await s.pop_item()
        await s.add_items([a2])
        return popped, await s.get_items()

    popped, items = asyncio.run(go())
    assert popped == a1
    assert items == [q, a2]
    chat = store.session("chat")
    (root,) = chat.roots()
    assert [m["metadata"]["openai_agents"]["raw"] for m in chat.branches(root["id"])] == [a1, a2]


def test_pop_to_empty_then_add_starts_a_second_root(new_store):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("chat", store)
    first, second = {"role": "user", "content": "one"}, {"role": "user", "content": "two"}

    async def go():
        await s.add_items([first])
        assert await s.pop_item() == first
        assert await s.pop_item() is None
        assert await s.get_items() == []
        await s.add_items([second])
        return await s.get_items()

    assert asyncio.run(go()) == [second]
    assert [m["parts"][0]["text"] for m in store.session("chat").roots()] == ["one", "two"]


def test_runner_continues_the_conversation_and_pop_item_leaves_a_branch(new_store):
    """Two Runner.run calls in a row: the second model request holds the first turn. Then the
    last exchange popped and asked again: the new question is a sibling of the old one."""
    sdk = _sdk()
    store = new_store("sqlite")
    session = sdk.SessionkitSession("conv", store)
    model = sdk.ScriptedModel(
        [
            sdk.call(1, "Oslo"),
            sdk.say(2, "Sunny in Oslo."),
            sdk.say(3, "Rome is sunny too."),
            sdk.say(4, "Paris is sunny as well."),
        ]
    )
    agent = sdk.agent(model)

    async def go():
        first = await sdk.Runner.run(agent, "Weather in Oslo?", session=session)
        after_first = await session.get_items()
        second = await sdk.Runner.run(agent, "And Rome?", session=session)
        after_second = await session.get_items()
        popped = [await session.pop_item(), await session.pop_item()]
        third = await sdk.Runner.run(agent, "And Paris?", session=session)
        return first, after_first, second, after_second, popped, third, await session.get_items()

    first, after_first, second, after_second, popped, third, final = asyncio.run(go())
    assert (first.final_output, second.final_output, third.final_output) == (
        "Sunny in Oslo.",
        "Rome is sunny too.",
        "Paris is sunny as well.",
    )
    kinds = [i.get("type", "message") for i in after_first]
    assert kinds == ["message", "function_call", "function_call_output", "message"]
    assert after_first[2]["output"] == "sunny in Oslo"  # the tool ran in the SDK
    # the second run's request: the whole first turn, then the new question
    request = model.calls[2].input
    assert len(request) == len(after_first) + 1
    assert [i.get("call_id") for i in request[:-1]] == [i.get("call_id") for i in after_first]
    assert request[0]["content"] == "Weather in Oslo?" and request[-1]["content"] == "And Rome?"
    assert after_second[: len(after_first)] == after_first and len(after_second) == len(after_first) + 2
    assert popped == after_second[len(after_first) :][::-1]
    # the third run saw the first turn only, and its question is a sibling of "And Rome?"
    assert [i.get("content") for i in model.calls[3].input if i.get("role") == "user"] == [
        "Weather in Oslo?",
        "And Paris?",
    ]
    assert final[: len(after_first)] == after_first
    chat = store.session("conv")
    end_of_first = chat.get_history()[len(after_first) - 1]["id"]
    assert [m["parts"][0]["text"] for m in chat.branches(end_of_first)] == ["And Rome?", "And Paris?"]
    assert len(chat) == len(after_second) + 2


def test_a_streamed_run_saves_its_turn(new_store):
    """Runner.run_streamed on the same session: the turn is saved as the stream ends, and the
    next run's request holds it."""
    sdk = _sdk()
    store = new_store("sqlite")
    session = sdk.SessionkitSession("streamed", store)
    model = sdk.ScriptedModel([sdk.call(1, "Oslo"), sdk.say(2, "Sunny in Oslo."), sdk.say(3, "Still sunny.")])
    agent = sdk.agent(model)

    async def go():
        streamed = sdk.Runner.run_streamed(agent, "Weather in Oslo?", session=session)
        events = [event async for event in streamed.stream_events()]
        after = await session.get_items()
        await sdk.Runner.run(agent, "And now?", session=session)
        return streamed.final_output, events, after

    final, events, after = asyncio.run(go())
    assert final == "Sunny in Oslo." and events
    assert [i.get("type", "message") for i in after] == ["message", "function_call", "function_call_output", "message"]
    assert [m.streamed for m in model.calls] == [True, True, False]
    assert model.calls[2].input[: len(after)] == after
    assert len(store.session("streamed")) == len(after) + 2


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_the_position_lasts_across_processes(tmp_path):
    """A pop in one process: another process opening the store continues from the parent."""
    sdk = _sdk()
    path = tmp_path / "chats.db"
    store = sk.open_store(path)
    items = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]

    async def go():
        s = sdk.SessionkitSession("p", store)
        await s.add_items(items)
        await s.pop_item()

    asyncio.run(go())
    store.close()
    code = textwrap.dedent(
        f"""
        import asyncio, json, sessionkit as sk
        from sessionkit.integrations.openai_agents import SessionkitSession
        store = sk.open_store({str(path)!r})
        s = SessionkitSession("p", store)
        async def go():
            before = await s.get_items()
            await s.add_items([{{"role": "user", "content": "d"}}])
            return before
        print(json.dumps(asyncio.run(go())))
        store.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == items[:2]
    store = sk.open_store(path)
    try:
        chat = store.session("p")
        assert [m["parts"][0]["text"] for m in chat.get_history()] == ["a", "b", "d"]
        second = chat.get_history()[1]["id"]
        assert [m["parts"][0]["text"] for m in chat.branches(second)] == ["c", "d"]
    finally:
        store.close()


def test_messages_written_by_other_means_reach_the_sdk_as_text(new_store):
    """A session sessionkit wrote itself: the SDK reads its path as easy input messages and
    continues from its latest leaf."""
    sdk = _sdk()
    store = new_store("sqlite")
    chat = store.session("mixed")
    chat.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    chat.append({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]})
    chat.append({"id": "a2", "role": "assistant", "parts": [{"type": "text", "text": "hey"}]}, parent_id="u1")
    s = sdk.SessionkitSession("mixed", store)

    async def go():
        before = await s.get_items()
        await s.add_items([{"role": "user", "content": "bye"}])
        return before, await s.get_items()

    before, after = asyncio.run(go())
    assert before == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hey"}]
    assert after == [*before, {"role": "user", "content": "bye"}]
    assert chat.get_history()[-2]["id"] == "a2"


def test_a_deleted_current_leaf_falls_back_to_the_latest_leaf(new_store):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("del", store)
    a, b, c = ({"role": "user", "content": t} for t in "abc")

    async def go():
        await s.add_items([a, b])
        await s.pop_item()  # the current leaf is a's message
        chat = store.session("del")
        chat.delete(chat.roots()[0]["id"], subtree=True)
        chat.append({"id": "x", "role": "user", "parts": [{"type": "text", "text": "x"}]})
        read = await s.get_items()
        await s.add_items([c])
        return read, await s.get_items()

    assert asyncio.run(go()) == ([{"role": "user", "content": "x"}], [{"role": "user", "content": "x"}, c])


def test_a_cancelled_write_is_finished_before_the_cancellation(new_store):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("cancel", store)
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]

    async def go():
        task = asyncio.create_task(s.add_items(items))
        await asyncio.sleep(0)  # the call has begun: its write is on its thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await s.get_items()

    assert asyncio.run(go()) == items


def test_concurrent_writers_extend_one_chain(engine, new_store):
    """add_items from many tasks at once (threads, and on PostgreSQL connections,
    of their own): each add_items one unbroken run of one chain."""
    sdk = _sdk()
    store = new_store(engine)
    s = sdk.SessionkitSession("busy", store)
    batches = [[{"role": "user", "content": f"{n}-{k}"} for k in range(3)] for n in range(8)]

    async def go():
        await asyncio.gather(*(s.add_items(b) for b in batches))
        return await s.get_items()

    items = asyncio.run(go())
    assert sorted(i["content"] for i in items) == sorted(i["content"] for b in batches for i in b)
    for b in batches:  # each add_items is one unbroken run of the chain
        start = items.index(b[0])
        assert items[start : start + 3] == b
    tree = store.session("busy").nodes()
    assert len({n.parent_id for n in tree}) == len(tree)  # no message has two children


def test_session_settings_limit_applies(new_store):
    sdk = _sdk()
    s = sdk.SessionkitSession("lim", new_store("sqlite"), session_settings={"limit": 2})
    items = [{"role": "user", "content": str(n)} for n in range(5)]

    async def go():
        await s.add_items(items)
        return await s.get_items(), await s.get_items(4)

    assert asyncio.run(go()) == (items[-2:], items[-4:])


def test_protocol_and_async_store(tmp_path):
    """An sk.aio store works too; the object is a Session of the SDK's protocol."""
    sdk = _sdk()

    async def go():
        async with sk.aio.open_store(tmp_path / "a.db") as store:
            s = sdk.SessionkitSession("aio", store)
            assert isinstance(s, sdk.Session)
            await s.add_items([{"role": "user", "content": "hi"}])
            popped = await s.pop_item()
            await s.add_items([{"role": "user", "content": "hello"}])
            return popped, await s.get_items(), await store.session("aio").count()

    assert asyncio.run(go()) == ({"role": "user", "content": "hi"}, [{"role": "user", "content": "hello"}], 2)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "error", "words"),
    [
        ({"role": "user", "content": "hi"}, TypeError, "list of items"),
        ("hi", TypeError, "list of items"),
        ([{"role": "user", "content": "hi"}, "oops"], TypeError, "item 1 is a str"),
        ([{"role": "user", "content": "hi"}, {"role": "user", "content": {1, 2}}], TypeError, "item 1 (message)"),
        (
            [{"type": "function_call_output", "call_id": "c", "output": float("nan")}],
            TypeError,
            "item 0 (function_call_output)",
        ),
        ([{"role": "user", "content": "\ud800"}], sk.InvalidMessage, "item 0"),
    ],
)
def test_bad_items_store_nothing(new_store, items, error, words):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("bad", store)
    kept = [{"role": "user", "content": "kept"}]

    async def go():
        await s.add_items(kept)
        with pytest.raises(error) as raised:
            await s.add_items(items)
        return str(raised.value), await s.get_items()

    message, after = asyncio.run(go())
    assert words in message
    assert after == kept and len(store.session("bad")) == 1


def test_an_item_over_the_size_limit_stores_nothing(new_store):
    sdk = _sdk()
    store = new_store("sqlite", max_message_bytes=2_000)
    s = sdk.SessionkitSession("big", store)

    async def go():
        with pytest.raises(sk.MessageTooLarge, match=r"item 1 \(message\)"):
            await s.add_items([{"role": "user", "content": "small"}, {"role": "user", "content": "x" * 5_000}])
        return await s.get_items()

    assert asyncio.run(go()) == []
    assert len(store.session("big")) == 0


def test_a_closed_store_is_refused(new_store):
    sdk = _sdk()
    store = new_store("sqlite")
    s = sdk.SessionkitSession("closed", store)
    asyncio.run(s.add_items([{"role": "user", "content": "hi"}]))
    store.close()

    async def go():
        for call in (s.get_items(), s.add_items([]), s.add_items([{"role": "user", "content": "x"}])):
            with pytest.raises(sk.StoreClosed):
                await call
        for call in (s.pop_item(), s.clear_session()):
            with pytest.raises(sk.StoreClosed):
                await call

    asyncio.run(go())


def test_bad_arguments():
    sdk = _sdk()
    store = sk.open_store()
    with pytest.raises(TypeError, match="session_id"):
        sdk.SessionkitSession(3, store)
    with pytest.raises(TypeError, match="sessionkit store"):
        sdk.SessionkitSession("s", "chats.db")
    s = sdk.SessionkitSession("s", store)
    with pytest.raises(TypeError, match="limit"):
        asyncio.run(s.get_items("3"))
    store.close()


# -- imports ------------------------------------------------------------------------------


def test_import_sessionkit_loads_no_sdk():
    code = "import sys, sessionkit, sessionkit.integrations; print('agents' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_the_sdk_the_import_names_the_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["agents"] = None  # as if openai-agents were not installed
        import sessionkit as sk
        try:
            import sessionkit.integrations.openai_agents
        except sk.MissingDependency as exc:
            print(isinstance(exc, ImportError), str(exc))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("True ")
    assert "pip install 'sessionkit[openai-agents]'" in out.stdout


# -- the guide ------------------------------------------------------------------------------


def test_the_guide_runs_as_written(tmp_path, monkeypatch):
    """docs/integrations/openai-agents.md's examples, in order: an expression whose comment
    starts with a Python literal must give it."""
    import ast
    import re
    from pathlib import Path

    monkeypatch.chdir(tmp_path)  # the example writes agents.db
    page = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "openai-agents.md"
    namespace: dict = {}
    compared = 0
    for block in re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL):
        lines = block.splitlines()
        for statement in ast.parse(block).body:
            comment = lines[statement.end_lineno - 1].partition("  #")[2].strip()
            try:
                expected = ast.literal_eval(comment) if isinstance(statement, ast.Expr) else None
            except (ValueError, SyntaxError):
                expected = None
            if expected is None:
                exec(compile(ast.Module([statement], []), page.name, "exec"), namespace)
            else:
                assert eval(compile(ast.Expression(statement.value), page.name, "eval"), namespace) == expected
                compared += 1
    namespace["store"].close()
    assert compared == 5
