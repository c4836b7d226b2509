"""RunView: folding run events, batching live updates, the queue, replay from the store."""

from __future__ import annotations

import asyncio

import pytest
from helpers import get_weather, wait_until
from viewtools import front

import sessionkit as sk
from sessionkit.testing import ScriptedModel
from sessionkit.widgets import RunView, _runlog

LONG = " ".join(f"word{i}" for i in range(60))


def _agent(script):
    return sk.Agent("t", "Be brief.", ScriptedModel(script), tools=[get_weather])


def _strip(state):
    """A state without timestamps, to compare live and replayed views."""
    for run in state["runs"]:
        run["started"] = run["ended"] = None
    return state


def test_replay_of_a_stored_run_shows_turns_tools_and_usage(store):
    s = store.session("r")
    agent = _agent(
        [
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}], "usage": {"in": 10, "out": 5}},
            {"text": "Sunny in Oslo.", "usage": {"in": 20, "out": 7}},
        ]
    )
    result = agent.run_sync("Weather in Oslo?", session=s)
    view = RunView(result)
    st = view.state
    (run,) = st["runs"]
    assert run["run_id"] == result.run_id and run["status"] == "completed"
    assert run["input"] == "Weather in Oslo?"
    assert [t["turn"] for t in run["turns"]] == [1, 2]
    (tool,) = run["turns"][0]["tools"]
    assert (tool["name"], tool["input"], tool["output"], tool["done"]) == (
        "get_weather",
        {"city": "Oslo"},
        {"city": "Oslo", "sky": "sunny", "celsius": 21},
        True,
    )
    assert run["turns"][1]["text"] == result.text == view.text
    assert [t["stop_reason"] for t in run["turns"]] == ["tool_calls", "stop"]
    assert (st["usage"]["in"], st["usage"]["out"], st["usage"]["calls"]) == (result.usage["in"], result.usage["out"], 2)
    assert st["usage"]["unpriced"] == 2  # a scripted model has no price
    assert view.summary["status"] == "completed" and view.summary["turns"] == 2
    # the same from the session, by run id, and from the raw event list
    assert _strip(RunView.replay(s, result.run_id).state) == _strip(st)
    assert _strip(RunView(store.events("r")).state) == _strip(st)


def test_live_run_is_sent_in_batches_that_add_up_to_the_stored_events(store, record, manual_timers):
    s = store.session("live")
    controller = sk.RunController()
    view = RunView(controller, interval=0.05)
    sent = record(view)

    class Paced(ScriptedModel):
        """The batch interval passes after every 20 streamed pieces, as with a slow provider."""

        async def stream(self, messages, *, tools):
            pieces = 0
            async for item in super().stream(messages, tools=tools):
                yield item
                pieces += 1
                if pieces % 20 == 0:
                    manual_timers.fire()

    agent = sk.Agent("t", "Be brief.", Paced([LONG]))
    result = asyncio.run(agent.run("Say many words", session=s, controller=controller))
    batches = sent.of("events")
    stored = store.events("live")
    deltas = [e for e in stored if e["kind"] == "delta.text"]
    assert len(deltas) == 60
    assert 2 <= len(batches) < len(deltas)  # merged, not one message per delta
    assert set(manual_timers.intervals) == {0.05}
    flat = [e for b in batches for e in b["events"]]
    assert [e["_i"] for e in flat] == list(range(len(flat)))
    assert "".join(e["text"] for e in flat if e["kind"] == "delta.text") == result.text == LONG
    assert [e["kind"] for e in flat if e["kind"] != "delta.text"] == [
        e["kind"] for e in stored if e["kind"] != "delta.text"
    ]
    assert _strip(_runlog.fold(flat)) == _strip(RunView(result).state) == _strip(view.state)
    assert view.summary["status"] == "completed"
    # a front end that opens late gets everything at once
    front(view, {"type": "hello", "req": 1})
    (reset,) = sent.of("reset")
    assert reset["events"] == flat


def test_text_deltas_are_batched_every_interval(record, manual_timers):
    view = RunView(interval=0.075)
    sent = record(view)
    view.push({"kind": "run.start", "run_id": "r", "input": "x", "seq": 0})
    for i in range(100):
        view.push({"kind": "delta.text", "run_id": "r", "text": "a", "seq": i + 1})
        if i % 25 == 24:  # the interval passes every 25 deltas
            assert len(sent.of("events")) == i // 25  # nothing is sent before it does
            assert manual_timers.fire() == 1
    batches = sent.of("events")
    assert "".join(e.get("text", "") for b in batches for e in b["events"]) == "a" * 100
    # one batch per interval while deltas arrive, not one per delta: one timer each, of the
    # view's interval, and the deltas of a batch merged into one
    assert len(batches) == 4 and manual_timers.intervals == [0.075] * 4
    assert [[e["kind"] for e in b["events"]] for b in batches] == [["run.start", "delta.text"]] + [["delta.text"]] * 3
    assert view.batches == len(batches)


def test_a_pending_event_goes_out_when_the_interval_passes(record):
    view = RunView(interval=0.01)
    sent = record(view)
    view.push({"kind": "run.start", "run_id": "r", "input": "x", "seq": 0})
    (batch,) = wait_until(lambda: sent.of("events"), what="the batch timer")  # a real timer, nothing else pushed
    assert [e["kind"] for e in batch["events"]] == ["run.start"]


def test_queue_and_controls_from_the_page(record):
    controller = sk.RunController()
    view = RunView(controller)
    controller.follow_up("later")
    controller.steer("now")
    assert view.queue["queued"] == 2
    assert [i["text"] for i in view.queue["items"]] == ["now", "later"]
    front(view, {"type": "steer", "text": "first!"})
    front(view, {"type": "follow_up", "text": "last"})
    assert [i["text"] for i in controller.items] == ["now", "first!", "later", "last"]
    front(view, {"type": "clear", "index": 0})
    assert [i["text"] for i in view.queue["items"]] == ["first!", "later", "last"]
    front(view, {"type": "clear", "index": 99})  # out of range: ignored
    assert view.controls
    view.detach()
    assert not view.controls
    controller.follow_up("unseen")
    assert view.queue["queued"] == 3


def test_bad_sources():
    with pytest.raises(TypeError):
        RunView(42)
    with pytest.raises(ValueError):
        RunView(interval=-1)
    with pytest.raises(TypeError):
        RunView().push("not an event")


def test_the_timeline_of_finished_runs_is_synced_and_an_empty_view_has_a_page(store, tmp_path):
    """The front end draws the timeline from the synced ``_timeline`` (run_view.js); a view with no
    finished run still writes its page."""
    empty = RunView()
    assert empty.has_trait("_timeline") and empty.trait_metadata("_timeline", "sync")
    assert empty._timeline == {"runs": []}
    assert "<html" in empty.to_html()
    s = store.session("t")
    result = _agent([{"text": "Hi.", "usage": {"in": 3, "out": 1}}]).run_sync("Hello", session=s)
    view = RunView(result)
    (run,) = view._timeline["runs"]
    assert run["run_id"] == result.run_id and run["status"] == "completed"
    assert [c["kind"] for c in run["calls"]] == ["model"]
    assert view.get_state("_timeline")["_timeline"] == view._timeline
    view.to_html(tmp_path / "run.html")
    assert result.run_id in (tmp_path / "run.html").read_text(encoding="utf-8")
