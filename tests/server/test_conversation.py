"""Running from an earlier message over HTTP (the body's ``at``) and reading a conversation a page at a time."""

from __future__ import annotations

import pytest
from live_server import HANG, Gate, echo, wait_idle

import sessionkit as sk
from sessionkit.server._records import conversation_digest
from sessionkit.testing import ScriptedModel


def _texts(messages: list[dict]) -> list[str]:
    return [" ".join(p.get("text", "") for p in m["parts"] if p["type"] == "text") for m in messages]


def test_a_message_at_an_earlier_message_branches_there_and_later_runs_continue_it(serve, store):
    model = ScriptedModel([echo()] * 6)
    live = serve(sk.Agent("echo", "", model), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "w"})
        for text in ("one", "two"):
            c.post("/sessions/w/messages", json={"text": text})
            wait_idle(c, "w")
        first = c.get("/sessions/w/conversation").json()
        assert _texts(first["messages"]) == ["one", "echo: one", "two", "echo: two"]
        old_leaf = first["leaf"]
        answer_one = first["messages"][1]["id"]

        sent = c.post("/sessions/w/messages", json={"text": "two bis", "at": answer_one})
        assert sent.status_code == 202 and sent.json() == {"runId": "w.3", "queued": False}
        wait_idle(c, "w")
        assert [m["content"] for m in model.calls[2]] == ["one", "echo: one", "two bis"]
        latest = c.get("/sessions/w/conversation").json()
        assert _texts(latest["messages"]) == ["one", "echo: one", "two bis", "echo: two bis"]
        assert latest["messages"][:2] == first["messages"][:2]
        assert c.get("/sessions/w/conversation", params={"leaf": old_leaf}).json() == first  # the old branch

        # the next plain message continues the new branch: the server's view of the conversation followed
        assert c.post("/sessions/w/messages", json={"text": "three"}).status_code == 202
        state = wait_idle(c, "w")
        assert [r["status"] for r in state["runs"]] == ["completed"] * 4
        assert [m.get("node") for m in state["messages"]] == [None, None, answer_one, None]
        assert _texts(c.get("/sessions/w/conversation").json()["messages"])[2:] == [
            "two bis",
            "echo: two bis",
            "three",
            "echo: three",
        ]

        # an id the session does not have, or not an id: refused, nothing recorded
        other = c.post("/sessions", json={"sessionId": "other"})
        assert other.status_code == 201
        for nope in ("msg_nope", "nul\x00id"):
            missing = c.post("/sessions/w/messages", json={"text": "x", "at": nope})
            assert (missing.status_code, missing.json()) == (404, {"error": "message_not_found"})
        assert c.post("/sessions/other/messages", json={"text": "x", "at": answer_one}).status_code == 404
        bad = c.post("/sessions/w/messages", json={"text": "x", "at": 5})
        assert bad.status_code == 400 and "'at'" in bad.json()["detail"]
        after = c.get("/sessions/w").json()
        assert len(after["runs"]) == 4 and len(after["messages"]) == 4
    assert len(store.runs("w")) == 4 and model.remaining == 2
    starts = [e["at"] for e in store.events("w") if e["kind"] == "run.start"]
    assert starts[2] == answer_one
    assert [r.meta for r in store.runs("w")] == [{"at": at} for at in starts]  # the run records say it too


def test_a_message_at_a_node_to_a_busy_session_waits_for_a_run_of_its_own(serve, store):
    gate = Gate()
    model = ScriptedModel([{"tool_calls": [{"name": "hold", "arguments": {}}]}, echo()])
    live = serve(sk.Agent("a", "", model, tools=[gate.tool()]), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
        c.post("/sessions/b/messages", json={"text": "start"})
        assert gate.entered.wait(HANG)
        root = c.get("/sessions/b/conversation").json()  # nothing saved while the run holds
        assert root["messages"] == [] and root["leaf"] is None
        gate.opened.set()
        wait_idle(c, "b")
        start_id = c.get("/sessions/b/conversation").json()["messages"][0]["id"]
        gate.opened.clear()
        gate.entered.clear()
        model.add({"tool_calls": [{"name": "hold", "arguments": {}}]}, echo(), echo())
        # hold a second run, then send one plain message and one from the first user message
        c.post("/sessions/b/messages", json={"text": "again"})
        assert gate.entered.wait(HANG)
        assert c.post("/sessions/b/messages", json={"text": "joins"}).json() == {"runId": "b.2", "queued": True}
        assert c.post("/sessions/b/messages", json={"text": "alt", "at": start_id}).json() == {
            "runId": "b.3",
            "queued": True,
        }
        gate.opened.set()
        state = wait_idle(c, "b")
    assert [(r["runId"], r["input"], r["status"]) for r in state["runs"]] == [
        ("b.1", "start", "completed"),
        ("b.2", "again", "completed"),
        ("b.3", "alt", "completed"),
    ]
    session = store.session("b")
    assert [m["parts"][0]["text"] for m in session.branches(start_id) if m["role"] == "user"] == ["alt"]
    assert _texts(session.get_history())[-2:] == ["alt", "echo: alt"]


def test_the_conversation_pages_compacted_or_not_and_a_cursor_stays_on_its_path(serve, new_store):
    store = new_store("sqlite", name="pages")
    model = ScriptedModel([echo()] * 8)
    live = serve(sk.Agent("echo", "", model), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "p"})
        for n in range(3):
            c.post("/sessions/p/messages", json={"text": f"q{n}"})
            wait_idle(c, "p")
        full = c.get("/sessions/p/conversation", params={"compacted": "false"}).json()
        assert full["total"] == 6 and full["nextCursor"] is None and full["compacted"] is False
        ids = [m["id"] for m in full["messages"]]
        store.session("p").import_compaction(
            sk.Compaction("c1", ids[0], ids[3], "SUMMARY of q0 and q1", "2026-01-01T00:00:00Z", 40, 5)
        )
        seen = c.get("/sessions/p/conversation").json()
        assert seen["compacted"] is True and seen["total"] == 3
        assert _texts(seen["messages"]) == ["SUMMARY of q0 and q1", "q2", "echo: q2"]
        assert c.get("/sessions/p/conversation", params={"compacted": "false"}).json()["messages"] == full["messages"]

        # pages of two, uncompacted: the cursor pins the path while a new run moves the latest leaf
        page = c.get("/sessions/p/conversation", params={"compacted": "false", "limit": "2"}).json()
        pages = [page]
        c.post("/sessions/p/messages", json={"text": "q3"})
        wait_idle(c, "p")
        while page["nextCursor"]:
            page = c.get("/sessions/p/conversation", params={"cursor": page["nextCursor"], "limit": "2"}).json()
            pages.append(page)
        assert [len(p["messages"]) for p in pages] == [2, 2, 2]
        assert [m for p in pages for m in p["messages"]] == full["messages"]
        assert c.get("/sessions/p/conversation", params={"compacted": "false"}).json()["total"] == 8

        def refused(params):
            answer = c.get("/sessions/p/conversation", params=params)
            return answer.status_code, answer.json()["error"]

        cursor = pages[0]["nextCursor"]
        for params in (
            {"limit": "0"},
            {"limit": "1001"},
            {"limit": "two"},
            {"compacted": "yes"},
            {"cursor": "not-a-cursor"},
            {"cursor": cursor, "leaf": ids[1]},
            {"cursor": cursor, "compacted": "true"},
        ):
            assert refused(params) == (400, "invalid_query"), params
        assert refused({"leaf": "msg_nope"}) == (404, "message_not_found")
        assert refused({"leaf": "nul\x00id"}) == (404, "message_not_found")
        assert c.get("/sessions/nobody/conversation").status_code == 404


def test_a_run_from_a_message_cut_short_by_a_stop_runs_again_from_that_message(serve, store):
    """The records a server killed during a run from an earlier message leaves (written here
    through the store's public API, as tests/server/test_recovery.py does): the next server
    runs it again from the same message."""
    session = store.session("re")
    session.append_many(
        [
            {"id": m, "role": role, "parts": [{"type": "text", "text": m.upper()}]}
            for m, role in (("u1", "user"), ("a1", "assistant"), ("u2", "user"), ("a2", "assistant"))
        ],
        parent_id=None,
    )
    digest = conversation_digest(session.get_history(compacted=False))
    store.session_records.put("re", "server.session", [(0, {"createdAt": "2026-12-01T00:00:00.000Z"})])
    store.session_records.put("re", "server.digest", [(0, {"digest": digest, "lastSeq": None})])
    value = {
        "run": 1,
        "text": "alt",
        "mode": "followUp",
        "queued": False,
        "at": "2026-12-01T00:00:00.000Z",
        "node": "a1",
    }
    store.session_records.put("re", "server.message", [(1, value)])
    store.session_records.put("re", "server.run", [(1, {"attempts": 1, "agentId": "echo", "state": "running"})])
    store.run_log.begin("re", "re.1", "alt")
    store.run_log.append_events("re", [{"run_id": "re.1", "kind": "run.start", "input": "alt", "at": "a1"}])
    store.session_records.put("~sessionkit/busy", "server.busy", [(7, {"key": "re"})])

    model = ScriptedModel([echo()] * 2)
    live = serve(sk.Agent("echo", "", model), store)
    with live.client() as c:
        state = wait_idle(c, "re")
        assert [(r["runId"], r["status"], r["attempts"]) for r in state["runs"]] == [("re.1", "completed", 2)]
        assert state["messages"][0]["node"] == "a1"
    assert [m["content"] for m in model.calls[0]] == ["U1", "A1", "alt"]
    assert _texts(session.get_history()) == ["U1", "A1", "alt", "echo: alt"]
    assert [m["id"] for m in session.branches("a1")][0] == "u2"


def test_a_forged_cursor_too_far_or_too_deep_is_a_bad_query_not_a_server_error(serve, new_store):
    """A cursor is opaque but arrives from the client: an offset past any index Python can
    slice to, or JSON nested past the parser's depth, is 400 ``invalid_query`` like any other
    cursor this server did not give."""
    import base64
    import json
    import sys

    store = new_store("sqlite", name="forged")
    live = serve(sk.Agent("echo", "", ScriptedModel([echo()])), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "f"})
        c.post("/sessions/f/messages", json={"text": "q"})
        wait_idle(c, "f")
        leaf = c.get("/sessions/f/conversation").json()["leaf"]

        def forged(raw: bytes) -> str:
            return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

        cursors = [
            forged(json.dumps([leaf, True, sys.maxsize + 1]).encode()),
            forged(json.dumps([leaf, False, sys.maxsize + 1]).encode()),
            forged(json.dumps([leaf, True, 10**400]).encode()),
            forged(b"[" * 10_000 + b"]" * 10_000),
        ]
        for cursor in cursors:
            answer = c.get("/sessions/f/conversation", params={"cursor": cursor})
            assert (answer.status_code, answer.json()["error"]) == (400, "invalid_query"), cursor[:40]
        # a real cursor still pages
        c.post("/sessions/f/messages", json={"text": "q2"})
        wait_idle(c, "f")
        first = c.get("/sessions/f/conversation", params={"limit": "1"}).json()
        second = c.get("/sessions/f/conversation", params={"cursor": first["nextCursor"], "limit": "1"}).json()
        assert second["messages"][0]["id"] != first["messages"][0]["id"]


def _page_through(c, session_id: str, limit: int, **params) -> tuple[list[dict], int]:
    """Every message of a listing, following ``nextCursor``; and how many pages it took."""
    seen: list[dict] = []
    cursor = None
    pages = 0
    while True:
        query = {"limit": str(limit), **params} if cursor is None else {"limit": str(limit), "cursor": cursor}
        body = c.get(f"/sessions/{session_id}/conversation", params=query).json()
        seen += body["messages"]
        pages += 1
        cursor = body["nextCursor"]
        if cursor is None:
            return seen, pages


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_paging_gives_exactly_the_history_on_branches_with_and_without_a_compaction(serve, store):
    live = serve(sk.Agent("echo", "", ScriptedModel([])), store)
    with live.client() as c:
        assert c.post("/sessions", json={"sessionId": "long"}).status_code == 201
        session = store.session("long")
        roles = ("user", "assistant")
        session.append_many(
            {"id": f"m{i}", "role": roles[i % 2], "parts": [{"type": "text", "text": f"t{i}"}]} for i in range(90)
        )
        side = {"id": "side0", "role": "user", "parts": [{"type": "text", "text": "side"}]}
        session.append_many(
            [side]
            + [
                {"id": f"side{i}", "role": roles[(i + 0) % 2], "parts": [{"type": "text", "text": f"s{i}"}]}
                for i in range(1, 40)
            ],
            parent_id="m30",
        )
        leaves = [None, "side39", "m60"]
        for leaf in leaves:  # no compaction yet: raw and compacted agree
            want = session.get_history(leaf_id=leaf)
            for limit in (1, 7, 25, 1000):
                got, pages = _page_through(c, "long", limit, **({"leaf": leaf} if leaf else {}))
                assert got == want and pages == max(1, -(-len(want) // limit)), (leaf, limit)
        session.import_compaction(sk.Compaction("c1", "m3", "m20", "SUMMARY", "2026-01-01T00:00:00Z", 40, 5))
        for leaf in leaves:
            for compacted in ("true", "false"):
                want = session.get_history(leaf_id=leaf, compacted=compacted == "true")
                for limit in (7, 1000):
                    params = {"compacted": compacted, **({"leaf": leaf} if leaf else {})}
                    got, _ = _page_through(c, "long", limit, **params)
                    assert got == want, (leaf, compacted, limit)
            assert len(session.get_history(leaf_id=leaf)) < len(session.get_history(leaf_id=leaf, compacted=False))


def test_a_cursor_without_anchors_still_pages(serve, new_store):
    import base64
    import json

    store = new_store("sqlite", name="old-cursor")
    live = serve(sk.Agent("echo", "", ScriptedModel([])), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "o"})
        session = store.session("o")
        session.append_many(
            {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"t{i}"}]} for i in range(12)
        )
        plain = base64.urlsafe_b64encode(json.dumps(["m11", True, 5]).encode()).decode().rstrip("=")
        body = c.get("/sessions/o/conversation", params={"cursor": plain, "limit": "4"}).json()
        assert [m["id"] for m in body["messages"]] == ["m5", "m6", "m7", "m8"]
        rest, _ = _page_through(c, "o", 4)
        assert [m["id"] for m in rest] == [f"m{i}" for i in range(12)]
        first = c.get("/sessions/o/conversation", params={"limit": "2"}).json()
        nxt = c.get("/sessions/o/conversation", params={"cursor": first["nextCursor"], "limit": "2"}).json()
        assert [m["id"] for m in nxt["messages"]] == ["m2", "m3"]
        for forged in (
            [["m11", True, 2, "x"]],
            [["m11", True, 2, [[1, "m1"]]]],
            [["m11", True, 2, [[5, "m5"], [4, "m4"]]]],
        ):
            raw = base64.urlsafe_b64encode(json.dumps(forged[0]).encode()).decode().rstrip("=")
            bad = c.get("/sessions/o/conversation", params={"cursor": raw})
            assert bad.status_code == 400 and bad.json()["error"] == "invalid_query"
