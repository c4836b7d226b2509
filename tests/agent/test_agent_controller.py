"""RunController: steering and follow-ups join the active run in the documented order
(docs/agents.md); interrupt; clear."""

from __future__ import annotations

import asyncio
import threading

import pytest
from helpers import StalledModel, wait_until

from sessionkit.agent import Agent, RunController
from sessionkit.errors import RunInterrupted
from sessionkit.testing.scripted import ScriptedModel


def last_user(chat):
    return [m for m in chat if m["role"] == "user"][-1]["content"]


def test_messages_sent_during_a_run_join_it_steers_first_one_per_boundary(store):
    controller = RunController()

    def check_in() -> str:
        """Runs while the run is active: the user types three messages."""
        controller.follow_up("follow-up 1")
        controller.follow_up("follow-up 2")
        controller.steer("steer 1", metadata={"author": "ada"})
        return "checked"

    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "check_in", "arguments": {}}]},
            "reply to steer",
            "reply to follow-up 1",
            "reply to follow-up 2",
        ]
    )
    agent = Agent("a", "", model, tools=[check_in])
    session = store.session("q")
    result = agent.run_sync("start", session=session, controller=controller)

    # one queued message per boundary: the steer after the tool turn, then the follow-ups in order
    assert [last_user(c) for c in model.calls] == ["start", "steer 1", "follow-up 1", "follow-up 2"]
    assert model.calls[1][-3]["role"] == "assistant" and model.calls[1][-2]["role"] == "tool"
    roles_texts = [(m["role"], (m["parts"][0].get("text") if m["parts"] else None)) for m in result.messages]
    assert roles_texts == [
        ("user", "start"),
        ("assistant", None),  # the tool call
        ("user", "steer 1"),
        ("assistant", "reply to steer"),
        ("user", "follow-up 1"),
        ("assistant", "reply to follow-up 1"),
        ("user", "follow-up 2"),
        ("assistant", "reply to follow-up 2"),
    ]
    assert result.messages[2]["metadata"] == {"author": "ada", "run_id": result.run_id}
    assert result.text == "reply to follow-up 2"
    assert session.get_history() == result.messages
    assert controller.queued == 0 and controller.active is None

    starts = [e for e in store.events("q") if e["kind"] == "turn.start"]
    assert [(e["turn"], e.get("input"), e.get("mode")) for e in starts] == [
        (1, None, None),
        (2, "steer 1", "steer"),
        (3, "follow-up 1", "followUp"),
        (4, "follow-up 2", "followUp"),
    ]
    assert len(store.runs("q")) == 1


def test_interrupt_keeps_the_queue_for_the_next_run(mem_store):
    controller = RunController()
    gate = threading.Event()
    tool_returned = threading.Event()

    def slow_tool() -> str:
        """Queues a follow-up, then blocks until the test lets it go."""
        controller.follow_up("later, please")
        gate.wait(60)  # only bounds a broken test: the gate opens once the run has returned
        tool_returned.set()
        return "done"

    model = ScriptedModel([{"tool_calls": [{"name": "slow_tool", "arguments": {}}]}, "first", "second"])
    agent = Agent("a", "", model, tools=[slow_tool])
    session = mem_store.session("k")

    def interrupt_once_queued():
        wait_until(lambda: controller.queued, what="the tool's follow-up")
        controller.interrupt()

    interrupter = threading.Thread(target=interrupt_once_queued)

    def on_event(event):
        if event["kind"] == "tool.call":
            # the tool runs in a worker thread; interrupt once it has queued its message
            interrupter.start()

    unsubscribe = controller.on_event(on_event)
    with pytest.raises(RunInterrupted):
        agent.run_sync("go", session=session, controller=controller)
    interrupter.join()
    # the abandoned tool thread does not hold the caller: the run returned while it is blocked
    assert not tool_returned.is_set()
    gate.set()
    assert tool_returned.wait(60)
    unsubscribe()
    assert session.get_history() == []
    assert controller.items == [{"mode": "followUp", "text": "later, please"}]

    # the next run delivers the kept message at its first boundary
    result = agent.run_sync("new start", session=session, controller=controller)
    assert [last_user(c) for c in model.calls[1:]] == ["new start", "later, please"]
    assert [m["role"] for m in result.messages] == ["user", "assistant", "user", "assistant"]
    assert controller.queued == 0


def test_clear_removes_one_item_by_its_place_in_delivery_order():
    controller = RunController()
    controller.follow_up("a")
    controller.steer("b")
    controller.follow_up("c")
    controller.steer("d")
    assert [i["text"] for i in controller.items] == ["b", "d", "a", "c"]
    assert controller.clear(1) == [{"mode": "steer", "text": "d"}]
    assert controller.clear(-1) == [{"mode": "followUp", "text": "c"}]
    assert [i["text"] for i in controller.items] == ["b", "a"]
    with pytest.raises(IndexError):
        controller.clear(2)
    assert [i["text"] for i in controller.clear()] == ["b", "a"]
    assert controller.queued == 0 and controller.items == []


def test_subscribers_see_every_change_and_the_active_run(mem_store):
    controller = RunController()
    seen = []
    unsubscribe = controller.subscribe(seen.append)
    controller.steer("s")
    controller.follow_up("f")
    controller.clear(1)
    assert seen == [
        {"active": None, "queued": 1, "items": [{"mode": "steer", "text": "s"}]},
        {"active": None, "queued": 2, "items": [{"mode": "steer", "text": "s"}, {"mode": "followUp", "text": "f"}]},
        {"active": None, "queued": 1, "items": [{"mode": "steer", "text": "s"}]},
    ]
    seen.clear()
    agent = Agent("a", "", ScriptedModel(["one", "two"]))
    result = agent.run_sync("hi", session=mem_store.session(), controller=controller)
    assert seen[0] == {"active": result.run_id, "queued": 1, "items": [{"mode": "steer", "text": "s"}]}
    assert {"active": result.run_id, "queued": 0, "items": []} in seen  # the steer was delivered
    assert seen[-1] == {"active": None, "queued": 0, "items": []}
    unsubscribe()
    controller.steer("x")
    assert seen[-1]["queued"] == 0


def test_a_failing_subscriber_is_logged_and_does_not_stop_the_queue(caplog):
    controller = RunController()

    def bad(_state):
        raise RuntimeError("subscriber bug")

    controller.subscribe(bad)
    controller.steer("still queued")
    assert controller.queued == 1
    assert "subscriber" in caplog.text


def test_interrupt_from_another_thread_while_run_sync_waits(mem_store):
    model = StalledModel()
    agent = Agent("a", "", model)
    controller = RunController()

    def interrupt_once_active():
        wait_until(controller.interrupt, what="a run to interrupt")  # True once a run is active

    timer = threading.Thread(target=interrupt_once_active)
    timer.start()

    async def cell():  # the notebook case: run_sync inside a running loop
        return agent.run_sync("hi", session=mem_store.session("nb"), controller=controller)

    with pytest.raises(RunInterrupted):
        asyncio.run(cell())
    timer.join()
    assert not model.answered
    assert mem_store.runs("nb")[0].status == "interrupted"


def test_queue_arguments_are_checked():
    controller = RunController()
    with pytest.raises(TypeError):
        controller.steer(3)
    with pytest.raises(TypeError):
        controller.follow_up("x", metadata="author")
    with pytest.raises(TypeError):
        controller.clear("0")
    assert controller.interrupt() is False
    assert repr(controller) == "RunController(active=None, queued=0)"
