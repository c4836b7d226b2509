"""Every route and its answers (docs/server.md, H1, H2), against a real uvicorn server."""

from __future__ import annotations

import json
import threading
from urllib.parse import quote

import httpx
import pytest
from helpers import wait_until
from live_server import AUTH, HANG, TOKEN, Gate, echo, echo_agent, wait_idle
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import sessionkit as sk
from sessionkit.testing import ScriptedModel


def test_create_session_201_then_200_and_a_minted_id(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        r = c.post("/sessions", json={"sessionId": "chat-1"})
        assert r.status_code == 201 and r.json() == {"sessionId": "chat-1"}
        r = c.post("/sessions", json={"sessionId": "chat-1"})
        assert r.status_code == 200 and r.json() == {"sessionId": "chat-1"}
        minted = c.post("/sessions")
        assert minted.status_code == 201
        new_id = minted.json()["sessionId"]
        assert c.get(f"/sessions/{new_id}").status_code == 200
        state = c.get("/sessions/chat-1").json()
        assert state == {"sessionId": "chat-1", "runs": [], "active": None, "queued": 0, "messages": []}


BAD_IDS = [
    "-lead",
    ".dot",
    "_under",
    "a" * 127,
    "sp ace",
    "semi;colon",
    "slash/inside",
    "ümlaut",
    "a%b",
    "new\nline",
    "trailing\n",
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_malformed_session_ids_get_400_on_every_route(serve, store, bad):
    live = serve(echo_agent(), store)
    path_id = quote(bad, safe="")
    with live.client() as c:
        r = c.post("/sessions", json={"sessionId": bad})
        assert (r.status_code, r.json()) == (400, {"error": "session_id_invalid"})
        for method, suffix, body in [
            ("GET", "", None),
            ("DELETE", "", None),
            ("POST", "/messages", {"text": "x"}),
            ("GET", "/events", None),
        ]:
            r = c.request(method, f"/sessions/{path_id}{suffix}", json=body)
            assert (r.status_code, r.json()) == (400, {"error": "session_id_invalid"}), (method, suffix, bad)
    with pytest.raises(InvalidStatus) as info:
        connect(f"{live.ws_url}/sessions/{path_id}/ws", additional_headers=AUTH, open_timeout=HANG)
    assert info.value.response.status_code == 400
    assert json.loads(info.value.response.body) == {"error": "session_id_invalid"}


def test_longest_and_shortest_valid_ids_are_accepted(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        for good in ["a", "Z9", "a" * 126, "a.b-c_d"]:
            assert c.post("/sessions", json={"sessionId": good}).status_code == 201
            assert c.get(f"/sessions/{good}").status_code == 200


def test_unknown_and_deleted_sessions_get_404_on_every_route(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.post("/sessions", json={"sessionId": "gone"}).status_code == 201
        assert c.delete("/sessions/gone").status_code == 202
        for sid in ("never", "gone"):
            for method, suffix, body in [
                ("GET", "", None),
                ("DELETE", "", None),
                ("POST", "/messages", {"text": "x"}),
                ("GET", "/events", None),
            ]:
                r = c.request(method, f"/sessions/{sid}{suffix}", json=body)
                assert (r.status_code, r.json()) == (404, {"error": "session_not_found"}), (sid, method, suffix)
            with pytest.raises(InvalidStatus) as info:
                connect(f"{live.ws_url}/sessions/{sid}/ws", additional_headers=AUTH, open_timeout=HANG)
            assert info.value.response.status_code == 404


def test_a_session_in_the_store_that_the_server_never_created_is_404_until_created(serve, store):
    store.session("imported").append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "old"}]})
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.get("/sessions/imported").status_code == 404
        assert c.post("/sessions", json={"sessionId": "imported"}).status_code == 201
        r = c.post("/sessions/imported/messages", json={"text": "new"})
        assert r.status_code == 202 and r.json() == {"runId": "imported.1", "queued": False}
        wait_idle(c, "imported")
    texts = [m["parts"][0]["text"] for m in store.session("imported").get_history()]
    assert texts == ["old", "new", "echo: new"]


def test_unknown_paths_and_methods(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
        r = c.get("/nothing")
        assert (r.status_code, r.json()) == (404, {"error": "not_found"})
        assert c.get("/sessions/s/other").status_code == 404
        assert c.get("/sessions/s/events/x").status_code == 404
        r = c.put("/sessions/s")
        assert r.status_code == 405 and r.json() == {"error": "method_not_allowed"}
        assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "DELETE"}
        r = c.delete("/sessions")
        assert r.status_code == 405 and set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
        assert c.get("/sessions/s/messages").status_code == 405
        assert c.post("/sessions/s/events").status_code == 405
        r = c.get("/sessions/s/ws")  # plain HTTP on the WebSocket route
        assert (r.status_code, r.json()) == (426, {"error": "upgrade_required"})


def test_a_message_starts_a_run_and_the_session_describes_it(serve, store):
    model = ScriptedModel([echo()] * 10)
    live = serve(sk.Agent("echo", "SECRET SYSTEM PROMPT", model), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "chat"})
        r = c.post("/sessions/chat/messages", json={"text": "hello there", "author": "ada"})
        assert r.status_code == 202 and r.json() == {"runId": "chat.1", "queued": False}
        state = wait_idle(c, "chat")
        r = c.post("/sessions/chat/messages", json={"text": "second", "mode": "steer"})
        assert r.json() == {"runId": "chat.2", "queued": False}
        state = wait_idle(c, "chat")
        raw = c.get("/sessions/chat").text
    assert state["sessionId"] == "chat" and state["active"] is None and state["queued"] == 0
    assert [(r["runId"], r["status"], r["input"]) for r in state["runs"]] == [
        ("chat.1", "completed", "hello there"),
        ("chat.2", "completed", "second"),
    ]
    assert all(r["startedAt"].endswith("Z") for r in state["runs"])
    msgs = state["messages"]
    assert [(m["runId"], m["text"], m["mode"], m["queued"]) for m in msgs] == [
        ("chat.1", "hello there", "followUp", False),
        ("chat.2", "second", "steer", False),
    ]
    assert msgs[0]["author"] == "ada" and "author" not in msgs[1] and msgs[0]["at"].endswith("Z")
    # the author is kept in the user message's metadata; the model input never leaves the server
    first_user = store.session("chat").get_history()[0]
    assert first_user["metadata"]["author"] == "ada"
    assert "SECRET SYSTEM PROMPT" not in raw and "system" not in raw


def test_bad_message_bodies_get_400(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
        bodies = [
            b"not json",
            b"[1,2]",
            b'"text"',
            b"{}",
            b'{"text": ""}',
            b'{"text": 5}',
            b'{"text": "x", "mode": "later"}',
            b'{"text": "x", "author": 7}',
        ]
        for body in bodies:
            r = c.post("/sessions/s/messages", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and r.json()["error"] == "invalid_body", body
        r = c.post("/sessions", content=b"[]", headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        for blank in (b"\n", b"  "):  # whitespace is a body, and not JSON: only no body mints an id
            r = c.post("/sessions", content=blank, headers={"Content-Type": "application/json"})
            assert (r.status_code, r.json()["error"]) == (400, "invalid_body"), blank
        assert c.get("/sessions/s").json()["messages"] == []


def test_messages_to_a_busy_session_join_the_active_run_steers_first(serve, store):
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "q"})
        assert c.post("/sessions/q/messages", json={"text": "start"}).json() == {"runId": "q.1", "queued": False}
        assert gate.entered.wait(HANG)
        answers = [
            c.post("/sessions/q/messages", json=body).json()
            for body in (
                {"text": "follow 1"},
                {"text": "steer 1", "mode": "steer", "author": "bob"},
                {"text": "follow 2", "mode": "followUp"},
            )
        ]
        assert answers == [{"runId": "q.1", "queued": True}] * 3
        busy = c.get("/sessions/q").json()
        assert busy["active"] == "q.1" and busy["queued"] == 3
        gate.opened.set()
        state = wait_idle(c, "q")
    assert [r["runId"] for r in state["runs"]] == ["q.1"]
    assert [(m["text"], m["mode"], m["queued"], m["runId"]) for m in state["messages"]] == [
        ("start", "followUp", False, "q.1"),
        ("follow 1", "followUp", True, "q.1"),
        ("steer 1", "steer", True, "q.1"),
        ("follow 2", "followUp", True, "q.1"),
    ]
    users = [m for m in store.session("q").get_history() if m["role"] == "user"]
    assert [m["parts"][0]["text"] for m in users] == ["start", "steer 1", "follow 1", "follow 2"]
    assert users[1]["metadata"]["author"] == "bob"


def test_a_message_after_the_last_turn_boundary_opens_the_next_run(serve, store):
    """Once the run gave its final reply it takes no more (here its output guardrail holds it
    before it saves): the answer names the next run."""
    checking, release = threading.Event(), threading.Event()

    def slow_check(messages):
        checking.set()
        release.wait(HANG)

    agent = sk.Agent("echo", "", ScriptedModel([echo()] * 5), output_guardrails=[slow_check])
    live = serve(agent, store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "late"})
        assert c.post("/sessions/late/messages", json={"text": "one"}).json()["runId"] == "late.1"
        assert checking.wait(HANG)
        answer = c.post("/sessions/late/messages", json={"text": "two"}).json()
        assert answer == {"runId": "late.2", "queued": True}
        release.set()
        state = wait_idle(c, "late")
    assert [(r["runId"], r["input"], r["status"]) for r in state["runs"]] == [
        ("late.1", "one", "completed"),
        ("late.2", "two", "completed"),
    ]
    texts = [m["parts"][0]["text"] for m in store.session("late").get_history()]
    assert texts == ["one", "echo: one", "two", "echo: two"]


def test_a_run_takes_queued_messages_for_a_while_then_the_next_run_takes_the_rest(serve, store):
    """A long exchange is saved in steps: after ``run_messages`` queued messages, later ones open the next run."""
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 20)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    live.app.state.sessionkit.scheduler.run_messages = 2
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "long"})
        assert c.post("/sessions/long/messages", json={"text": "start"}).json() == {"runId": "long.1", "queued": False}
        assert gate.entered.wait(HANG)
        answers = [c.post("/sessions/long/messages", json={"text": f"more {i}"}).json()["runId"] for i in range(4)]
        assert answers == ["long.1", "long.1", "long.2", "long.2"]
        gate.opened.set()
        state = wait_idle(c, "long")
    assert [(r["runId"], r["input"], r["status"]) for r in state["runs"]] == [
        ("long.1", "start", "completed"),
        ("long.2", "more 2", "completed"),
    ]
    users = [m["parts"][0]["text"] for m in store.session("long").get_history() if m["role"] == "user"]
    assert users == ["start", "more 0", "more 1", "more 2", "more 3"]


def test_delete_during_a_run_cancels_it_and_drops_the_queue(serve, store, sse):
    # a provider that takes 30 s to answer: the DELETE comes (after turn.start) while the model
    # call is in flight, which is what must be interrupted; no run here waits for the 30 s
    model = ScriptedModel([echo(delay=30)] + [echo()] * 5)
    live = serve(sk.Agent("slow", "", model), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "d"})
        reader = sse(f"{live.url}/sessions/d/events")
        assert c.post("/sessions/d/messages", json={"text": "long"}).json() == {"runId": "d.1", "queued": False}
        assert c.post("/sessions/d/messages", json={"text": "queued"}).json() == {"runId": "d.1", "queued": True}
        reader.wait(lambda fs: any(d.get("kind") == "turn.start" for _, d in fs))
        r = c.delete("/sessions/d")
        assert r.status_code == 202 and r.json() == {"sessionId": "d", "status": "deleted"}
        ended = reader.wait_runs_ended(1)
        run_end = [d for _, d in ended if d.get("kind") == "run.end"][0]
        assert run_end["status"] == "interrupted" and run_end["run_id"] == "d.1"
        assert reader.ended.wait(HANG), "the event stream of a deleted session ends"
        assert c.get("/sessions/d").status_code == 404
        assert "d" not in [s.id for s in store.list_sessions()] and store.runs("d") == [] and store.events("d") == []
        assert len(model.calls) == 1  # the queued message never ran
        # the id can be used again, from scratch; its run ids are never used again (a tombstone remembers)
        assert c.post("/sessions", json={"sessionId": "d"}).status_code == 201
        assert c.post("/sessions/d/messages", json={"text": "fresh"}).json() == {"runId": "d.2", "queued": False}
        state = wait_idle(c, "d")
        assert [m["text"] for m in state["messages"]] == ["fresh"]


@pytest.mark.slow
def test_a_delete_does_not_wait_for_a_run_that_is_going_idle_behind_its_hold(serve, new_store, monkeypatch, caplog):
    # On PostgreSQL a DELETE holds the session's ``accept`` hold while it stops the session's
    # task; a task whose run just ended waits for that hold to go idle. It gives way at once
    # instead of leaving the DELETE to time out on it (10 s, then cancelled with a warning).
    import asyncio
    import logging

    from sessionkit.server._coordinate import SharedCoordinator

    store = new_store("postgresql")
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 5)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    server = live.app.state.sessionkit
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "g"})
        c.post("/sessions/g/messages", json={"text": "start"})
        assert gate.entered.wait(HANG)
        accept = SharedCoordinator._name("accept", "g")
        assert store.coordination.try_hold(accept)  # as a DELETE does, before it stops the session's task
        refused: list[str] = []  # the server's attempts at the hold while the test has it
        try_hold = store.coordination.try_hold

        def watched_try_hold(name: str) -> bool:
            got = try_hold(name)
            if name == accept and not got:
                refused.append(name)
            return got

        monkeypatch.setattr(store.coordination, "try_hold", watched_try_hold)
        try:
            gate.opened.set()
            wait_until(lambda: store.runs("g") and store.runs("g")[0].status == "completed", what="run g.1 to end")
            # the task now waits for the hold, to look for queued messages: it keeps asking for it
            after_run = len(refused)
            wait_until(lambda: len(refused) > after_run, what="the session's task to ask for the hold")
            session = server.sessions.states["g"]
            task = session.task
            assert task is not None and not task.done()
            caplog.set_level(logging.WARNING, logger="sessionkit.server")
            asyncio.run_coroutine_threadsafe(server.scheduler.stop(session), server.sessions.loop).result(HANG)
            # it ended by giving way, not by running out the stop's grace time and being cancelled
            assert task.done() and not task.cancelled()
            assert not [r for r in caplog.records if "did not stop" in r.getMessage()], caplog.text
            assert session.task is None
        finally:
            store.coordination.release_hold(accept)
        assert c.delete("/sessions/g").status_code == 202
        assert c.get("/sessions/g").status_code == 404


def test_a_failed_run_is_reported_and_the_session_goes_on(serve, store, sse):
    model = ScriptedModel([{"error": RuntimeError("provider down")}, echo()])
    live = serve(sk.Agent("flaky", "", model), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "f"})
        reader = sse(f"{live.url}/sessions/f/events")
        c.post("/sessions/f/messages", json={"text": "one"})
        reader.wait_runs_ended(1)
        c.post("/sessions/f/messages", json={"text": "two"})
        reader.wait_runs_ended(2)
        state = wait_idle(c, "f")
    assert [(r["runId"], r["status"]) for r in state["runs"]] == [("f.1", "failed"), ("f.2", "completed")]
    ends = [d for d in reader.events() if d["kind"] == "run.end"]
    assert "provider down" in ends[0]["error"]


def test_openapi_document_describes_every_route_without_a_token(serve, store):
    live = serve(echo_agent(), store)
    r = httpx.get(f"{live.url}/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    assert set(paths) == {
        "/openapi.json",
        "/sessions",
        "/sessions/{sessionId}",
        "/sessions/{sessionId}/messages",
        "/sessions/{sessionId}/conversation",
        "/sessions/{sessionId}/events",
        "/sessions/{sessionId}/ws",
    }
    assert set(paths["/sessions/{sessionId}"]) >= {"get", "delete"}
    assert set(paths["/sessions"]) == {"get", "post"}
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert paths["/openapi.json"]["get"]["security"] == []
    assert "429" in paths["/sessions/{sessionId}/messages"]["post"]["responses"]
    assert "409" in paths["/sessions/{sessionId}/messages"]["post"]["responses"]
    assert TOKEN not in r.text


def test_messages_a_failed_run_did_not_take_open_the_next_run(serve, store):
    gate = Gate()
    model = ScriptedModel(
        [{"tool_calls": [{"name": "hold", "arguments": {}}]}, {"error": RuntimeError("provider down")}] + [echo()] * 5
    )
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "f"})
        c.post("/sessions/f/messages", json={"text": "start"})
        assert gate.entered.wait(HANG)
        assert c.post("/sessions/f/messages", json={"text": "q1"}).json() == {"runId": "f.1", "queued": True}
        assert c.post("/sessions/f/messages", json={"text": "q2", "author": "zoe"}).json() == {
            "runId": "f.1",
            "queued": True,
        }
        gate.opened.set()  # q1 joins run 1, whose next model call fails; q2 is left over
        state = wait_idle(c, "f")
    assert [(r["runId"], r["status"], r["input"]) for r in state["runs"]] == [
        ("f.1", "failed", "start"),
        ("f.2", "completed", "q2"),
    ]
    assert [(m["text"], m["runId"]) for m in state["messages"]] == [("start", "f.1"), ("q1", "f.1"), ("q2", "f.2")]
    history = store.session("f").get_history()
    assert [m["parts"][0]["text"] for m in history] == ["q2", "echo: q2"]
    assert history[0]["metadata"]["author"] == "zoe"
