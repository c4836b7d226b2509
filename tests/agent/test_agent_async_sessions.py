"""SessionStores with coroutine ``load``/``save`` (docs/agents.md), an ``sk.aio`` store among them (docs/async.md)."""

from __future__ import annotations

import asyncio
import threading

import pytest

import sessionkit as sk
from sessionkit.agent import Agent, ExternalSession, SessionStore, create_session
from sessionkit.errors import ModelError
from sessionkit.testing.scripted import ScriptedModel


class AsyncDictStore:
    """A SessionStore as an asyncio application writes one: ``async def`` load and save."""

    def __init__(self):
        self.data: dict[str, list[dict]] = {}
        self.saves: list[list[str]] = []
        self.loads = 0

    async def load(self, session_id):
        await asyncio.sleep(0)  # a real await: the coroutine suspends once
        self.loads += 1
        return list(self.data.get(session_id, []))

    async def save(self, session_id, new_messages):
        await asyncio.sleep(0)
        self.saves.append([m["id"] for m in new_messages])
        self.data.setdefault(session_id, []).extend(new_messages)


def test_a_store_with_async_load_and_save_is_a_session_store():
    backing = AsyncDictStore()
    assert isinstance(backing, SessionStore)
    session = create_session("u1", store=backing)
    assert isinstance(session, ExternalSession) and session.session_id == "u1"
    assert session.get_history() == [] and session.latest_leaf() is None and len(session) == 0


def test_runs_on_an_async_session_store_outside_and_inside_a_running_loop():
    backing = AsyncDictStore()
    session = create_session("u1", store=backing)
    model = ScriptedModel(["Hi Ada!", "You are Ada.", "Still Ada.", "Streamed.", {"error": RuntimeError("down")}])
    agent = Agent("a", "sys", model)

    first = agent.run_sync("I'm Ada", session=session)  # no loop running here
    assert first.status == "completed" and first.text == "Hi Ada!"
    assert backing.saves == [[m["id"] for m in first.messages]]  # one save per run, the user's first

    async def app():  # as an asyncio application runs it
        second = await agent.run("Who am I?", session=session)
        third = agent.run_sync("And now?", session=session)  # the sync twin inside a running loop
        kinds = [event["kind"] async for event in agent.stream("Stream it", session=session)]
        return second, third, kinds

    second, third, kinds = asyncio.run(app())
    assert (second.text, third.text) == ("You are Ada.", "Still Ada.")
    assert kinds[0] == "run.start" and kinds[-1] == "run.end" and "delta.text" in kinds
    assert model.calls[1][1:] == [
        {"role": "user", "content": "I'm Ada"},
        {"role": "assistant", "content": "Hi Ada!"},
        {"role": "user", "content": "Who am I?"},
    ]
    assert len(backing.saves) == 4 and session.snapshot() == backing.data["u1"]
    assert session.snapshot()[:4] == first.messages + second.messages

    with pytest.raises(ModelError):
        agent.run_sync("fail", session=session)
    assert len(backing.saves) == 4  # nothing saved for the failed run
    assert [r.status for r in session.runs()] == ["completed"] * 4 + ["failed"]


def test_an_error_of_an_async_save_fails_the_run():
    class Broken(AsyncDictStore):
        async def save(self, session_id, new_messages):
            raise OSError("disk full")

    session = create_session("s", store=Broken())
    agent = Agent("a", "", ScriptedModel(["hello"]))
    with pytest.raises(sk.RunFailed, match="disk full"):
        agent.run_sync("hi", session=session)
    assert session.runs()[-1].status == "failed" and session.get_history() == []


def test_an_aio_store_is_a_session_store_for_runs(tmp_path):
    model = ScriptedModel(["First reply.", "Second reply.", "Third reply."])
    agent = Agent("a", "sys", model)

    async def app():
        async with sk.aio.open_store(tmp_path / "app.db") as store:
            assert isinstance(store, SessionStore)
            session = create_session("chat", store=store)
            assert isinstance(session, ExternalSession) and session.session_id == "chat"
            first = await agent.run("Hello", session=session)
            second = await agent.run("Again", session=session)
            history = await store.session("chat").get_history()
            in_a_thread = await asyncio.to_thread(agent.run_sync, "From a thread", session=session)
            return first, second, in_a_thread, history, await store.session("chat").get_history()

    first, second, third, history, final = asyncio.run(app())
    assert [m["id"] for m in history] == [m["id"] for m in first.messages + second.messages]
    assert history[0]["parts"][0]["text"] == "Hello" and history[-1]["parts"][0]["text"] == "Second reply."
    assert [m["id"] for m in final] == [m["id"] for m in first.messages + second.messages + third.messages]
    assert model.calls[2][1:] == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "First reply."},
        {"role": "user", "content": "Again"},
        {"role": "assistant", "content": "Second reply."},
        {"role": "user", "content": "From a thread"},
    ]
    with sk.open_store(tmp_path / "app.db") as sync_store:  # one chain, as append_many writes it
        s = sync_store.session("chat")
        assert s.path_length() == 6 and len(s) == 6


def test_runs_on_an_aio_store_load_the_compacted_path(tmp_path):
    """``load`` is ``get_history()``: a compaction of the store's session shows in the model's input."""
    model = ScriptedModel(["one", "two"])
    agent = Agent("a", "sys", model)

    async def app():
        async with sk.aio.open_store(tmp_path / "c.db") as store:
            session = create_session("c", store=store)
            await agent.run("first question", session=session)
            s = store.session("c").on_compaction(
                lambda messages, ctx: sk.CompactionResult(messages[0]["id"], messages[-1]["id"], "they said hi")
            )
            await s.compact()
            await agent.run("second question", session=session)

    asyncio.run(app())
    assert model.calls[1][1:] == [
        {"role": "assistant", "content": "they said hi"},
        {"role": "user", "content": "second question"},
    ]


def test_an_async_load_never_runs_on_the_callers_loop():
    """Inside a running loop the coroutine runs on a loop of its own (the caller's cannot wait for it)."""
    loops = []

    class Recording(AsyncDictStore):
        async def load(self, session_id):
            loops.append((asyncio.get_running_loop(), threading.get_ident()))
            return await super().load(session_id)

    backing = Recording()
    session = create_session("s", store=backing)

    async def app():
        caller = asyncio.get_running_loop()
        await Agent("a", "", ScriptedModel(["ok"])).run("hi", session=session)
        return caller

    caller = asyncio.run(app())
    assert loops and all(loop is not caller for loop, _ in loops)
    assert backing.saves and session.snapshot()[-1]["parts"][0]["text"] == "ok"


def test_a_run_takes_an_async_session_and_records_in_its_store(tmp_path):
    """An sk.aio session passed to a run directly: the run reads and writes the store behind
    it (runs and events recorded there), and the loop keeps turning while it loads."""
    model = ScriptedModel(["first reply", "second reply"])
    agent = Agent("a", "sys", model)

    async def app():
        async with sk.aio.open_store(tmp_path / "s.db") as store:
            session = store.session("chat")
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0)

            tick = asyncio.ensure_future(ticker())
            one = await agent.run("hello", session=session)
            two = await agent.run("again", session=session)
            tick.cancel()
            history = await session.get_history()
            runs = await store.runs("chat")
            return one, two, history, runs, ticks

    one, two, history, runs, ticks = asyncio.run(app())
    assert (one.text, two.text) == ("first reply", "second reply")
    assert [m["id"] for m in history] == [m["id"] for m in one.messages + two.messages]
    assert [r.status for r in runs] == ["completed", "completed"]
    assert ticks > 0
    # the second call saw the first run's turns as its history
    assert [m["content"] for m in model.calls[1] if m["role"] != "system"][:2] == ["hello", "first reply"]
