"""Event streams (H3): SSE across runs, Last-Event-ID resume, the gap notice, WebSocket."""

from __future__ import annotations

import json
import time

import pytest
from helpers import wait_until
from live_server import AUTH, HANG, Gate, echo, echo_agent, seqs, wait_idle
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

import sessionkit as sk
from sessionkit.testing import ScriptedModel


def run_ends(frames) -> list[dict]:
    return [d for _, d in frames if d.get("kind") == "run.end"]


@pytest.mark.slow
def test_one_stream_stays_open_across_two_runs_with_idle_time_between(serve, store, sse):
    live = serve(echo_agent(), store)
    live.app.state.sessionkit.keepalive = 0.5  # idle streams get comment lines
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
        reader = sse(f"{live.url}/sessions/s/events")
        assert c.post("/sessions/s/messages", json={"text": "first"}).json()["runId"] == "s.1"
        reader.wait_runs_ended(1)
        # the stream sits idle between the runs: two keep-alive comments arrive, and it stays open
        idle_from = reader.comments
        wait_until(lambda: reader.comments >= idle_from + 2, what="two keep-alive comments on the idle stream")
        assert not reader.ended.is_set()
        assert c.post("/sessions/s/messages", json={"text": "second"}).json() == {"runId": "s.2", "queued": False}
        frames = reader.wait_runs_ended(2)
    assert not reader.ended.is_set()
    events = [d for _, d in frames]
    assert seqs(events) == list(range(len(events)))  # one stream, seq continuing across runs
    assert [i for i, _ in frames] == seqs(events)  # the SSE id is the seq
    assert [e["run_id"] for e in events if e["kind"] == "run.start"] == ["s.1", "s.2"]
    assert [e["input"] for e in events if e["kind"] == "run.start"] == ["first", "second"]
    assert all(e["session_id"] == "s" and e["v"] == 1 for e in events)
    assert events == store.events("s")  # exactly what the store recorded
    assert reader.comments >= 2


def test_a_new_stream_replays_the_retained_window_first(serve, store, sse):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
        c.post("/sessions/s/messages", json={"text": "earlier"})
        wait_idle(c, "s")
    reader = sse(f"{live.url}/sessions/s/events")
    frames = reader.wait_runs_ended(1)
    assert [d for _, d in frames] == store.events("s")


def test_reconnecting_with_last_event_id_gets_each_frame_exactly_once(serve, store, sse):
    gate = Gate()
    model = ScriptedModel(
        ["one", {"text": "thinking", "tool_calls": [{"name": "hold", "arguments": {}}]}, "two", "three"]
    )
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "r"})
        first = sse(f"{live.url}/sessions/r/events")
        c.post("/sessions/r/messages", json={"text": "run one"})
        first.wait_runs_ended(1)
        c.post("/sessions/r/messages", json={"text": "run two"})
        assert gate.entered.wait(HANG)  # run two is held in the middle
        got = first.wait(lambda fs: any(d.get("kind") == "tool.call" for _, d in fs))
        first.close()
        middle = got[len(got) // 2][0]
        # disconnect mid-run, resume after a frame in the middle: the rest, then live
        second = sse(f"{live.url}/sessions/r/events", {**AUTH, "Last-Event-ID": str(middle)})
        resumed = second.wait(lambda fs: fs and fs[-1][0] == got[-1][0])
        gate.opened.set()
        resumed = second.wait_runs_ended(1)
        wait_idle(c, "r")
        assert [i for i, _ in resumed][0] == middle + 1
        combined = [i for i, _ in got if i <= middle] + [i for i, _ in resumed]
        everything = seqs(store.events("r"))
        assert combined == everything  # each frame exactly once, in order, nothing missing
        assert run_ends(resumed)[0]["run_id"] == "r.2"
        # resuming from the very end, with the query parameter, gets nothing old: its first
        # frame is the first event of the next run
        last = resumed[-1][0]
        third = sse(f"{live.url}/sessions/r/events?lastEventId={last}")
        c.post("/sessions/r/messages", json={"text": "run three"})
        frames = third.wait_runs_ended(1)
    assert [i for i, _ in frames] == list(range(last + 1, last + 1 + len(frames)))
    assert frames[0][1]["kind"] == "run.start" and frames[0][1]["run_id"] == "r.3"


def test_last_event_id_after_every_event_then_live(serve, store, sse):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "l"})
        c.post("/sessions/l/messages", json={"text": "a"})
        wait_idle(c, "l")
        last = store.events("l")[-1]["seq"]
        reader = sse(f"{live.url}/sessions/l/events", {**AUTH, "Last-Event-ID": str(last)})
        c.post("/sessions/l/messages", json={"text": "b"})
        frames = reader.wait_runs_ended(1)
    assert [i for i, _ in frames] == list(range(last + 1, last + 1 + len(frames)))
    assert frames[0][1]["kind"] == "run.start" and frames[0][1]["run_id"] == "l.2"


def test_a_resume_older_than_the_window_gets_the_gap_notice_then_the_window(serve, store, sse):
    live = serve(echo_agent(), store, events_window=5)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "g"})
        for text in ("one two three", "four five six"):
            c.post("/sessions/g/messages", json={"text": text})
            wait_idle(c, "g")
        stored = store.events("g")
        last = stored[-1]["seq"]
        earliest = last - 4
        assert earliest > 2
        gap = sse(f"{live.url}/sessions/g/events", {**AUTH, "Last-Event-ID": "1"})
        frames = gap.wait(lambda fs: len(fs) >= 6)
        assert frames[0] == (None, {"error": "events_gap", "requestedSeq": 2, "earliestSeq": earliest})
        assert [i for i, _ in frames[1:]] == list(range(earliest, last + 1))
        assert [d for _, d in frames[1:]] == stored[-5:]
        # a new stream without Last-Event-ID: just the window, no notice
        fresh = sse(f"{live.url}/sessions/g/events")
        # resuming right before the window loses nothing: no notice
        edge = sse(f"{live.url}/sessions/g/events", {**AUTH, "Last-Event-ID": str(earliest - 1)})
        for stream in (fresh, edge):
            assert [i for i, _ in stream.wait(lambda fs: len(fs) >= 5)] == list(range(earliest, last + 1))
        # live events keep flowing to every stream, right after what each was sent before: the
        # two without a notice got the window and nothing else, the one with it the notice first
        c.post("/sessions/g/messages", json={"text": "seven"})
        for stream, notice in ((gap, 1), (fresh, 0), (edge, 0)):
            frames = stream.wait(lambda fs: any(d.get("kind") == "run.end" and d["run_id"] == "g.3" for _, d in fs))
            assert [i for i, _ in frames[notice:]] == list(range(earliest, store.events("g")[-1]["seq"] + 1))


def test_a_session_created_again_never_repeats_an_event_id(serve, store, sse):
    """After DELETE and creation again, the new session's event ids go on after the deleted
    one's: a reader resuming with an id it got from the earlier session is sent the new
    session from its start (not what follows that id), and ids name one event for good."""
    live = serve(echo_agent(), store)
    lives: list[list[tuple[int, dict]]] = []
    with live.client() as c:
        for life in range(3):
            c.post("/sessions", json={"sessionId": "again"})
            reader = sse(f"{live.url}/sessions/again/events")
            c.post("/sessions/again/messages", json={"text": f"life {life}"})
            frames = reader.wait_runs_ended(1)
            reader.close()
            assert all(d["seq"] == i for i, d in frames)  # the frame's id is its event's seq
            stored = store.events("again")
            assert [d["kind"] for _, d in frames] == [e["kind"] for e in stored]
            lives.append(frames)
            if life < 2:
                assert c.delete("/sessions/again").status_code == 202
        ids = [[i for i, _ in frames] for frames in lives]
        assert ids[0][0] == 0
        for before, after in zip(ids, ids[1:], strict=False):
            assert after == list(range(before[-1] + 1, before[-1] + 1 + len(after)))
        new = lives[2]
        # a stale Last-Event-ID from either deleted session: the whole new session, no notice
        for stale in (ids[1][-1], ids[1][2], ids[0][-1]):
            resumed = sse(f"{live.url}/sessions/again/events", {**AUTH, "Last-Event-ID": str(stale)})
            assert resumed.wait(lambda fs: len(fs) >= len(new)) == new, stale
        # a resume inside the new session's ids is the documented one
        mid = sse(f"{live.url}/sessions/again/events", {**AUTH, "Last-Event-ID": str(ids[2][2])})
        assert mid.wait(lambda fs: len(fs) >= len(new) - 3) == new[3:]
        # beyond the last event: the gap notice, then the window
        beyond = sse(f"{live.url}/sessions/again/events", {**AUTH, "Last-Event-ID": str(ids[2][-1] + 5)})
        frames = beyond.wait(lambda fs: len(fs) >= len(new) + 1)
        assert frames[0] == (None, {"error": "events_gap", "requestedSeq": ids[2][-1] + 6, "earliestSeq": ids[2][0]})
        assert frames[1:] == new
        # the WebSocket numbers its frames the same way, and resumes the same way
        with connect(f"{live.ws_url}/sessions/again/ws?lastEventId={ids[1][-1]}", additional_headers=AUTH) as ws:
            got = [json.loads(ws.recv(timeout=HANG)) for _ in new]
        assert got == [d for _, d in new]
    # a server started afresh over the same store numbers them as the first did
    live.stop()
    again = serve(echo_agent(), store)
    resumed = sse(f"{again.url}/sessions/again/events", {**AUTH, "Last-Event-ID": str(ids[1][-1])})
    assert resumed.wait(lambda fs: len(fs) >= len(new)) == new


def test_a_malformed_last_event_id_is_400(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "m"})
        for value in ("abc", "-2", "1.5", "9" * 30):
            r = c.get("/sessions/m/events", headers={"Last-Event-ID": value})
            assert (r.status_code, r.json()) == (400, {"error": "last_event_id_invalid"}), value


def test_websocket_sends_frames_and_takes_messages(serve, store, sse):
    gate = Gate()  # holds the run over the socket until the steering message has joined it
    model = ScriptedModel(
        [echo(), {"text": "checking", "tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10
    )
    live = serve(sk.Agent("ws", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "w"})
        c.post("/sessions/w/messages", json={"text": "before"})
        wait_idle(c, "w")
    reader = sse(f"{live.url}/sessions/w/events")
    received: list[dict] = []
    with connect(f"{live.ws_url}/sessions/w/ws", additional_headers=AUTH, open_timeout=HANG) as ws:

        def until(predicate, timeout=HANG):
            deadline = time.monotonic() + timeout
            while not predicate():
                received.append(json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic()))))

        before = len(store.events("w"))
        until(lambda: len(received) >= before)  # the retained window first
        assert received == store.events("w")
        ws.send(json.dumps({"text": "over the socket", "author": "wes"}))
        until(lambda: any("runId" in f for f in received))
        reply = [f for f in received if "runId" in f]
        assert reply == [{"runId": "w.2", "queued": False}]
        ws.send(json.dumps({"text": "steer it", "mode": "steer"}))
        until(lambda: len([f for f in received if "runId" in f]) == 2)
        assert [f for f in received if "runId" in f][1] == {"runId": "w.2", "queued": True}
        gate.opened.set()
        until(lambda: any(f.get("kind") == "run.end" and f["run_id"] == "w.2" for f in received))
        bad_frames = [
            "not json",
            json.dumps({"text": ""}),
            json.dumps({"text": "x", "mode": "now"}),
            json.dumps([1]),
            json.dumps({"text": "x", "author": 3}),
        ]
        for i, bad in enumerate(bad_frames, 1):
            ws.send(bad)
            until(lambda i=i: len([f for f in received if "error" in f and "seq" not in f]) == i)
        assert [f["error"] for f in received if "error" in f and "seq" not in f] == ["invalid_body"] * len(bad_frames)
    events = [f for f in received if "seq" in f]
    assert seqs(events) == list(range(len(events)))  # each event once, in order
    assert events == store.events("w")
    reader.wait_runs_ended(2)
    assert [d for _, d in reader.frames] == events  # the same frames as the event stream
    users = [m for m in store.session("w").get_history() if m["role"] == "user"]
    assert [m["parts"][0]["text"] for m in users] == ["before", "over the socket", "steer it"]
    assert users[1]["metadata"]["author"] == "wes"


def test_websocket_resumes_with_last_event_id_and_refuses_strangers(serve, store):
    live = serve(echo_agent(), store, max_body_bytes=2_000)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "w"})
        c.post("/sessions/w/messages", json={"text": "x"})
        wait_idle(c, "w")
    last = store.events("w")[-1]["seq"]
    with connect(f"{live.ws_url}/sessions/w/ws?lastEventId={last - 2}", additional_headers=AUTH) as ws:
        frames = [json.loads(ws.recv(timeout=HANG)) for _ in range(2)]
        assert seqs(frames) == [last - 1, last]
        ws.send(json.dumps({"text": "y" * 5_000}))
        assert json.loads(ws.recv(timeout=HANG)) == {"error": "body_too_large"}
    with pytest.raises(InvalidStatus) as info:
        connect(f"{live.ws_url}/sessions/w/ws?lastEventId=x", additional_headers=AUTH, open_timeout=HANG)
    assert info.value.response.status_code == 400


def test_websocket_closes_when_the_session_is_deleted(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "w"})
        with connect(f"{live.ws_url}/sessions/w/ws", additional_headers=AUTH) as ws:
            assert c.delete("/sessions/w").status_code == 202
            with pytest.raises(ConnectionClosed) as info:
                ws.recv(timeout=HANG)
            assert info.value.rcvd.code == 4404
