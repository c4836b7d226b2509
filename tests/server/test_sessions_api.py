"""H7 and H9 against a real server: GET /sessions, context, agentId and attempts, stored keys, tombstones."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import quote

import httpx
from live_server import HANG, Gate, echo, echo_agent, user_of, wait_idle

import sessionkit as sk
from sessionkit.testing import ScriptedModel


def test_get_sessions_lists_the_callers_sessions_newest_activity_first(serve, store):
    gate = Gate()
    model = ScriptedModel([echo(), echo(), {"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10)
    live = serve(sk.Agent("lister", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        assert c.get("/sessions").json() == {"sessions": []}
        for sid in ("old", "middle", "busy"):
            assert c.post("/sessions", json={"sessionId": sid}).status_code == 201
        c.post("/sessions/old/messages", json={"text": "first"})
        wait_idle(c, "old")
        c.post("/sessions/middle/messages", json={"text": "second"})
        wait_idle(c, "middle")
        c.post("/sessions/busy/messages", json={"text": "hold"})
        assert gate.entered.wait(HANG)
        c.post("/sessions/busy/messages", json={"text": "waiting"})
        listed = c.get("/sessions").json()["sessions"]
        assert [s["sessionId"] for s in listed] == ["busy", "middle", "old"]
        assert listed[0] == {
            "sessionId": "busy",
            "runs": 1,
            "active": "busy.1",
            "queued": 1,
            "updatedAt": listed[0]["updatedAt"],
        }
        assert listed[1]["runs"] == 1 and listed[1]["active"] is None and listed[1]["queued"] == 0
        assert all(s["updatedAt"].endswith("Z") for s in listed)
        gate.opened.set()
        wait_idle(c, "busy")
        c.post("/sessions/old/messages", json={"text": "again"})  # activity moves it to the top
        wait_idle(c, "old")
        listed = c.get("/sessions").json()["sessions"]
        assert [(s["sessionId"], s["runs"]) for s in listed] == [("old", 2), ("busy", 1), ("middle", 1)]
        assert c.delete("/sessions/middle").status_code == 202
        assert [s["sessionId"] for s in c.get("/sessions").json()["sessions"]] == ["old", "busy"]


def test_get_sessions_shows_each_principal_only_its_own(serve, store):
    live = serve(echo_agent(), store, authenticate=user_of)
    ann = live.client(headers={"X-User": "ann@example.org"})
    bob = live.client(headers={"X-User": "bob"})
    ann.post("/sessions", json={"sessionId": "a1"})
    ann.post("/sessions", json={"sessionId": "shared-name"})
    bob.post("/sessions", json={"sessionId": "shared-name"})
    assert sorted(s["sessionId"] for s in ann.get("/sessions").json()["sessions"]) == ["a1", "shared-name"]
    assert [s["sessionId"] for s in bob.get("/sessions").json()["sessions"]] == ["shared-name"]
    assert bob.get("/sessions/a1").status_code == 404
    assert httpx.get(f"{live.url}/sessions").status_code == 401
    ann.close()
    bob.close()


def test_context_reaches_the_model_and_tools_and_is_never_stored_or_returned(serve, store, sse):
    seen_by_tool = []

    def whoami(context: dict) -> str:
        """Who is asking."""
        seen_by_tool.append(context)
        return context["user"]

    model = ScriptedModel([{"tool_calls": [{"name": "whoami", "arguments": {}}]}, "hello Zed", echo()])
    live = serve(sk.Agent("ctx", "", model, tools=[whoami]), store)
    marker = "TOP-SECRET-CONTEXT-42"
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "ctx"})
        reader = sse(f"{live.url}/sessions/ctx/events")
        r = c.post("/sessions/ctx/messages", json={"text": "who am I?", "context": {"user": "Zed", "note": marker}})
        assert r.status_code == 202 and r.json() == {"runId": "ctx.1", "queued": False}
        state = wait_idle(c, "ctx")
        frames = reader.wait_runs_ended(1)
        described, listed = c.get("/sessions/ctx").text, c.get("/sessions").text
        for bad in ([1], "text", 5):
            r = c.post("/sessions/ctx/messages", json={"text": "x", "context": bad})
            assert (r.status_code, r.json()["error"]) == (400, "invalid_body"), bad
    assert seen_by_tool == [{"user": "Zed", "note": marker}]  # the tool asked for it
    assert marker in json.dumps(model.calls[0])  # the model saw it beside the message
    assert state["runs"][0]["status"] == "completed"
    history = store.session("ctx").get_history()
    assert history[0]["parts"] == [{"type": "text", "text": "who am I?"}]  # the stored message is the prompt
    for text in (described, listed, json.dumps(frames), json.dumps(history)):
        assert marker not in text
    for kind in ("server.message", "server.run", "server.session", "server.digest"):
        assert marker not in json.dumps(store.session_records.get("ctx", kind))
    assert marker not in json.dumps(store.events("ctx"))


def test_a_message_with_context_to_a_busy_session_opens_a_run_of_its_own(serve, store):
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}] + [echo()] * 10)
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "q"})
        c.post("/sessions/q/messages", json={"text": "start"})
        assert gate.entered.wait(HANG)
        assert c.post("/sessions/q/messages", json={"text": "plain"}).json() == {"runId": "q.1", "queued": True}
        assert c.post("/sessions/q/messages", json={"text": "with", "context": {"k": 1}}).json() == {
            "runId": "q.2",
            "queued": True,
        }
        assert c.post("/sessions/q/messages", json={"text": "after"}).json() == {"runId": "q.2", "queued": True}
        gate.opened.set()
        state = wait_idle(c, "q")
    assert [(r["runId"], r["input"]) for r in state["runs"]] == [("q.1", "start"), ("q.2", "with")]
    shown = [
        part["text"]
        for m in model.calls[2]
        if m["role"] == "user" and isinstance(m["content"], list)
        for part in m["content"]
    ]
    assert any('{"k": 1}' in text for text in shown)  # the run it opened showed its context


def test_run_entries_carry_the_agent_id_and_attempts(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "r"})
        c.post("/sessions/r/messages", json={"text": "hi"})
        state = wait_idle(c, "r")
    assert [(r["runId"], r["agentId"], r["attempts"]) for r in state["runs"]] == [("r.1", "echo", 1)]


def test_principals_are_stored_under_a_hash_never_their_id(serve, store):
    principal = "carol@example.org"
    live = serve(echo_agent(), store, authenticate=user_of)
    with live.client(headers={"X-User": principal}) as c:
        c.post("/sessions", json={"sessionId": "chat"})
        c.post("/sessions/chat/messages", json={"text": "hello"})
        wait_idle(c, "chat")
    prefix = hashlib.sha256(principal.encode()).hexdigest()[:16]
    assert [s.id for s in store.list_sessions()] == [f"{prefix}/chat"]
    everything = json.dumps(
        [
            store.session_records.get(f"{prefix}/chat", k)
            for k in ("server.session", "server.message", "server.run", "server.digest")
        ]
    )
    everything += json.dumps(store.events(f"{prefix}/chat")) + json.dumps(
        [r.run_id for r in store.runs(f"{prefix}/chat")]
    )
    assert "carol" not in everything and "example.org" not in everything


def test_a_session_stored_under_the_principal_itself_is_no_principals(tmp_path, serve):
    """Sessions are found only under ``<hash of the principal>/<id>``: one stored under the
    principal's own (escaped) id, the layout that would let a principal named like another's
    key reach that principal's sessions, is reached by no one and left as it is."""
    path = tmp_path / "old.db"
    principal = "dave@example.org"
    unhashed = f"{quote(principal, safe='')}/chat"
    with sk.open_store(path) as old:
        old.session(unhashed).append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "earlier"}]})
        old.session_records.put(
            unhashed,
            "server.session",
            [
                (
                    0,
                    {
                        "createdAt": "2026-01-01T00:00:00.000Z",
                        "digest": hashlib.sha256(b"").hexdigest(),
                        "lastSeq": None,
                    },
                )
            ],
        )
    store = sk.open_store(path)
    live = serve(echo_agent(), store, authenticate=user_of)
    with live.client(headers={"X-User": principal}) as c:
        assert c.get("/sessions/chat").json() == {"error": "session_not_found"}
        assert c.get("/sessions").json()["sessions"] == []
        assert c.post("/sessions", json={"sessionId": "chat"}).status_code == 201  # a new session of its own
        assert c.post("/sessions/chat/messages", json={"text": "later"}).json() == {"runId": "chat.1", "queued": False}
        wait_idle(c, "chat")
        assert [m["text"] for m in c.get("/sessions/chat").json()["messages"]] == ["later"]
    assert [m["parts"][0]["text"] for m in store.session(unhashed).get_history()] == ["earlier"]
    with live.client(headers={"X-User": "someone else"}) as other:
        assert other.get("/sessions/chat").status_code == 404


def test_run_ids_are_never_reused_after_delete_also_across_a_restart(tmp_path, serve):
    path = tmp_path / "tomb.db"
    store = sk.open_store(path)
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "t"})
        for text in ("one", "two"):
            c.post("/sessions/t/messages", json={"text": text})
            wait_idle(c, "t")
        assert c.delete("/sessions/t").status_code == 202
        assert c.get("/sessions/t").status_code == 404  # a tombstone is not a session
    live.stop()
    store.close()
    store = sk.open_store(path)
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.get("/sessions/t").status_code == 404
        assert c.post("/sessions/t/messages", json={"text": "x"}).status_code == 404
        assert c.post("/sessions", json={"sessionId": "t"}).status_code == 201
        assert c.post("/sessions/t/messages", json={"text": "three"}).json() == {"runId": "t.3", "queued": False}
        state = wait_idle(c, "t")
        assert [r["runId"] for r in state["runs"]] == ["t.3"]
        assert c.get("/sessions").json()["sessions"][0]["runs"] == 1
        c.delete("/sessions/t")
        c.post("/sessions", json={"sessionId": "t"})
        assert c.post("/sessions/t/messages", json={"text": "four"}).json()["runId"] == "t.4"
        wait_idle(c, "t")
    assert sorted(r.run_id for r in store.runs("t")) == ["t.4"]
