"""The conversation digest (H5): a conversation changed behind the server's back answers 409."""

from __future__ import annotations

from live_server import echo_agent, wait_idle

import sessionkit as sk


def _started(c, sid: str) -> None:
    c.post("/sessions", json={"sessionId": sid})
    assert c.post(f"/sessions/{sid}/messages", json={"text": "hello"}).status_code == 202
    wait_idle(c, sid)


def test_an_append_behind_the_servers_back_answers_409(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        _started(c, "chat")
        store.session("chat").append({"id": "intruder", "role": "user", "parts": [{"type": "text", "text": "psst"}]})
        r = c.post("/sessions/chat/messages", json={"text": "next"})
        assert (r.status_code, r.json()) == (409, {"error": "conversation_unrecoverable"})
        r = c.post("/sessions/chat/messages", json={"text": "again"})
        assert r.status_code == 409  # it stays refused
        assert c.get("/sessions/chat").status_code == 200  # reading still works
        assert [m["text"] for m in c.get("/sessions/chat").json()["messages"]] == ["hello"]
        # deleting and creating the session again starts over (run ids are never reused: chat.2)
        assert c.delete("/sessions/chat").status_code == 202
        assert c.post("/sessions", json={"sessionId": "chat"}).status_code == 201
        assert c.post("/sessions/chat/messages", json={"text": "fresh"}).json() == {"runId": "chat.2", "queued": False}
        wait_idle(c, "chat")


def test_an_edit_behind_the_servers_back_answers_409(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        _started(c, "chat")
        session = store.session("chat")
        reply = session.get_history()[-1]
        session.update(dict(reply, parts=[{"type": "text", "text": "something else"}]))
        r = c.post("/sessions/chat/messages", json={"text": "next"})
        assert (r.status_code, r.json()) == (409, {"error": "conversation_unrecoverable"})


def test_a_change_before_the_first_run_answers_409(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "chat"})
        store.session("chat").append({"id": "early", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        assert c.post("/sessions/chat/messages", json={"text": "x"}).status_code == 409


def test_compaction_and_the_servers_own_runs_keep_the_digest(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:
        _started(c, "chat")
        session = store.session("chat")
        session.on_compaction(lambda msgs, ctx: sk.CompactionResult(msgs[0]["id"], msgs[1]["id"], "they said hello"))
        assert session.compact() is not None  # a summary changes what the model sees, not the conversation
        for text in ("two", "three"):
            assert c.post("/sessions/chat/messages", json={"text": text}).status_code == 202
            wait_idle(c, "chat")
    assert len(session.get_history(compacted=False)) == 6
