"""H8, one kind of half-finished run at a time: the records a killed server leaves, and what the next one does.

Each test writes, through the store's public API, exactly what a server killed at one
moment leaves behind (the fault test, test_faults.py, does it for real at random
moments), then starts a server on the store and checks it finishes the work without
any request: a run cut short runs again under its id (``attempts`` + 1), a saved run
is recorded completed without running again, a run on its last attempt is recorded
failed with the reason, and a conversation changed while the server was down is
not continued.
"""

from __future__ import annotations

import pytest
from helpers import wait_until
from live_server import echo, echo_agent, wait_idle

import sessionkit as sk
from sessionkit.server import _records as R
from sessionkit.server._records import conversation_digest
from sessionkit.server._sessions import _in_flight
from sessionkit.testing import ScriptedModel


def _left_behind(
    store, sid: str, *, runs: dict, messages: list, conversation: list | None = None, recorded: dict | None = None
) -> None:
    """Records of a session as a killed server leaves them.

    ``runs``: n -> server.run value; ``messages``: (run, text) accepted, in order;
    ``conversation``: messages already saved; ``recorded``: n -> status of the run record.
    """
    session = store.session(sid)
    for message in conversation or []:
        session.append(message)
    store.session_records.put(sid, "server.session", [(0, {"createdAt": "2026-12-01T00:00:00.000Z"})])
    path = session.get_history(compacted=False)
    store.session_records.put(sid, "server.digest", [(0, {"digest": conversation_digest(path), "lastSeq": None})])
    store.session_records.put(
        sid,
        "server.message",
        [
            (i, {"run": run, "text": text, "mode": "followUp", "queued": i > 1, "at": "2026-12-01T00:00:00.000Z"})
            for i, (run, text) in enumerate(messages, 1)
        ],
    )
    store.session_records.put(sid, "server.run", list(runs.items()))
    for n, status in (recorded or {}).items():
        store.run_log.begin(sid, f"{sid}.{n}", next(t for r, t in messages if r == n))
        store.run_log.append_events(sid, [{"run_id": f"{sid}.{n}", "kind": "run.start"}])
        if status != "running":
            store.run_log.end(f"{sid}.{n}", status=status)
    store.session_records.put("~sessionkit/busy", "server.busy", [(abs(hash(sid)) % 1000, {"key": sid})])


def _settled(store, sid: str) -> None:
    """Until no run of the session is running and every server.run is done (read from the store only)."""

    def settled() -> bool:
        runs = dict(store.session_records.get(sid, "server.run"))
        return (
            bool(runs)
            and all(v.get("state") == "done" for v in runs.values())
            and all(r.status != "running" for r in store.runs(sid))
        )

    wait_until(settled, interval=0.02, what=f"the runs of {sid} to settle")


def _texts(store, sid: str) -> list[str]:
    return [m["parts"][0]["text"] for m in store.session(sid).get_history() if m["parts"]]


def test_a_run_cut_short_runs_again_with_every_message_accepted_for_it(serve, store):
    _left_behind(
        store,
        "cut",
        runs={1: {"attempts": 1, "agentId": "echo", "state": "running"}},
        messages=[(1, "first"), (1, "joined at a turn boundary")],
        recorded={1: "running"},
    )
    model = ScriptedModel([echo()] * 5)
    live = serve(sk.Agent("echo", "", model), store)
    _settled(store, "cut")  # nobody asked: the server found it at start
    assert _texts(store, "cut") == [
        "first",
        "echo: first",
        "joined at a turn boundary",
        "echo: joined at a turn boundary",
    ]
    with live.client() as c:
        state = wait_idle(c, "cut")
    assert [(r["runId"], r["status"], r["attempts"]) for r in state["runs"]] == [("cut.1", "completed", 2)]
    ends = [(e["status"], e["error_type"]) for e in store.events("cut") if e["kind"] == "run.end"]
    assert ends == [("interrupted", "ServerStopped"), ("completed", None)]
    assert [e["seq"] for e in store.events("cut")] == list(range(len(store.events("cut"))))


def test_a_run_saved_before_the_kill_is_recorded_completed_not_run_again(serve, store):
    saved = [
        {
            "id": "u1",
            "role": "user",
            "parts": [{"type": "text", "text": "done already"}],
            "metadata": {"run_id": "saved.1"},
        },
        {
            "id": "a1",
            "role": "assistant",
            "parts": [{"type": "text", "text": "echo: done already"}],
            "metadata": {"run_id": "saved.1"},
        },
    ]
    _left_behind(
        store,
        "saved",
        runs={1: {"attempts": 1, "agentId": "echo", "state": "saved"}},
        messages=[(1, "done already")],
        conversation=saved,
        recorded={1: "running"},
    )
    model = ScriptedModel([echo()] * 5)
    live = serve(sk.Agent("echo", "", model), store)
    _settled(store, "saved")
    assert model.calls == []  # not run again
    with live.client() as c:
        assert [(r["status"], r["attempts"]) for r in wait_idle(c, "saved")["runs"]] == [("completed", 1)]
        assert c.post("/sessions/saved/messages", json={"text": "next"}).json() == {
            "runId": "saved.2",
            "queued": False,
        }  # no 409
        wait_idle(c, "saved")
    assert _texts(store, "saved") == ["done already", "echo: done already", "next", "echo: next"]


def test_a_run_on_its_last_attempt_is_recorded_failed_with_the_reason(serve, store):
    _left_behind(
        store,
        "doomed",
        runs={1: {"attempts": 3, "agentId": "echo", "state": "running"}},
        messages=[(1, "poison")],
        recorded={1: "running"},
    )
    model = ScriptedModel([echo()] * 5)
    live = serve(sk.Agent("echo", "", model), store)
    _settled(store, "doomed")
    assert model.calls == []
    (record,) = store.runs("doomed")
    assert record.status == "failed" and "3 times" in record.error
    with live.client() as c:
        state = wait_idle(c, "doomed")
        assert [(r["status"], r["attempts"]) for r in state["runs"]] == [("failed", 3)]
        assert state["messages"][0]["runId"] == "doomed.1"
        assert c.post("/sessions/doomed/messages", json={"text": "fine"}).json()["runId"] == "doomed.2"
        wait_idle(c, "doomed")
    assert _texts(store, "doomed") == ["fine", "echo: fine"]


def test_a_run_that_was_waiting_starts_after_the_one_that_was_running(serve, store):
    _left_behind(
        store,
        "two",
        runs={
            1: {"attempts": 1, "agentId": "echo", "state": "running"},
            2: {"attempts": 0, "agentId": "echo", "state": "queued"},
        },
        messages=[(1, "one"), (2, "two"), (2, "three")],
        recorded={1: "running"},
    )
    live = serve(sk.Agent("echo", "", ScriptedModel([echo()] * 10)), store)
    _settled(store, "two")
    assert _texts(store, "two") == ["one", "echo: one", "two", "echo: two", "three", "echo: three"]
    with live.client() as c:
        state = wait_idle(c, "two")
    assert [(r["runId"], r["status"], r["attempts"], r["input"]) for r in state["runs"]] == [
        ("two.1", "completed", 2, "one"),
        ("two.2", "completed", 1, "two"),
    ]


def test_a_conversation_changed_while_the_server_was_down_is_not_continued(serve, store):
    _left_behind(
        store,
        "changed",
        runs={1: {"attempts": 1, "agentId": "echo", "state": "running"}},
        messages=[(1, "hello")],
        recorded={1: "running"},
    )
    store.session("changed").append({"id": "x", "role": "user", "parts": [{"type": "text", "text": "intruder"}]})
    model = ScriptedModel([echo()] * 5)
    live = serve(sk.Agent("echo", "", model), store)
    _settled(store, "changed")
    assert model.calls == []
    (record,) = store.runs("changed")
    assert record.status == "failed" and "behind the server's back" in record.error
    with live.client() as c:
        r = c.post("/sessions/changed/messages", json={"text": "more"})
        assert (r.status_code, r.json()) == (409, {"error": "conversation_unrecoverable"})


def test_a_run_the_agent_refuses_before_it_starts_is_recorded_failed_not_retried(tmp_path, serve):
    class Broken:
        name = "broken"

        async def run(self, prompt, **options):
            raise ValueError("misconfigured agent")

    path = tmp_path / "broken.db"
    store = sk.open_store(path)
    live = serve(Broken(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "b"})
        assert c.post("/sessions/b/messages", json={"text": "hi"}).status_code == 202
        state = wait_idle(c, "b")
    assert [(r["status"], r["agentId"]) for r in state["runs"]] == [("failed", "broken")]
    assert "misconfigured agent" in store.runs("b")[0].error
    live.stop()
    live = serve(echo_agent(n=5), store)  # a new server does not run it again
    with live.client() as c:
        assert [r["status"] for r in wait_idle(c, "b")["runs"]] == ["failed"]
    assert store.session("b").get_history() == []


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("duckdb", marks=pytest.mark.slow)])
def test_a_server_starting_on_a_store_with_many_idle_entries_compacts_the_busy_index(serve, new_store, kind):
    # one process serves a SQLite or DuckDB file, so nobody writes the index meanwhile (on
    # PostgreSQL other processes may: the index is left as it is there)
    store = new_store(kind, name="server")
    store.session_records.put("~sessionkit/busy", "server.busy", [(n, None) for n in range(1, 1_500)])
    _left_behind(
        store,
        "cut",
        runs={1: {"attempts": 1, "agentId": "echo", "state": "running"}},
        messages=[(1, "first")],
        recorded={1: "running"},
    )
    serve(echo_agent(n=5), store)
    _settled(store, "cut")
    assert _texts(store, "cut") == ["first", "echo: first"]
    assert len(store.session_records.get("~sessionkit/busy", "server.busy")) < 10


def test_a_run_closed_by_the_recovery_and_not_yet_started_again_is_in_flight(store):
    """Between the recovery's transaction (the run recorded ``interrupted``, its server.run
    still ``running``: it runs again) and the run starting again, ``GET /sessions/{id}``
    shows it running, not a session at rest; a client waiting for the session to be idle
    would otherwise stop there and see the run interrupted for good."""
    _left_behind(
        store,
        "gap",
        runs={1: {"attempts": 1, "agentId": "echo", "state": "running"}},
        messages=[(1, "hi")],
        recorded={1: "interrupted"},
    )
    assert _in_flight(R.read_snapshot(store, "gap")) == [1]
    # given up by the recovery (done, with its reason): at rest
    given_up = {"attempts": 3, "agentId": "echo", "state": "done", "error": "the server stopped 3 times"}
    store.session_records.put("gap", "server.run", [(1, given_up)])
    assert _in_flight(R.read_snapshot(store, "gap")) == []
