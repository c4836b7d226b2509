"""The server's shape: one route table behind dispatch and /openapi.json; no store call on the event loop."""

from __future__ import annotations

import functools
import threading

import httpx
from live_server import HANG, echo_agent, wait_idle

import sessionkit as sk
from sessionkit.server._routes import ROUTES
from sessionkit.store import Session, SessionRecords, Store, StoreRunLog


def test_every_route_of_the_table_is_in_the_document_and_dispatched(serve, store):
    live = serve(echo_agent(), store)
    doc = httpx.get(f"{live.url}/openapi.json").json()
    documented = {
        (method.upper(), path) for path, item in doc["paths"].items() for method in item if method != "parameters"
    }
    assert documented == {(r.method, r.path) for r in ROUTES}
    assert len({r.operation for r in ROUTES}) == len(ROUTES)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "s"})
        for route in sorted(ROUTES, key=lambda r: r.method == "DELETE"):  # the delete last
            if route.path.endswith("/events"):
                continue  # a stream: covered by test_events.py
            path = route.path.replace("{sessionId}", "s")
            body = {"text": "hi"} if route.operation == "sendMessage" else None
            r = c.request(route.method, path, json=body)
            assert r.status_code not in (404, 405), (route.operation, r.status_code, r.text)


def test_no_store_call_runs_on_the_event_loop(serve, store, monkeypatch, sse):
    on_loop: list[str] = []

    def watch(cls, name):
        original = getattr(cls, name)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            if threading.current_thread().name.startswith("uvicorn:"):  # the LiveServer's loop thread
                on_loop.append(f"{cls.__name__}.{name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(cls, name, wrapper)

    for name in ("runs", "events", "transaction", "delete_session", "list_sessions"):
        watch(Store, name)
    for name in ("begin", "end", "reopen", "append_events"):
        watch(StoreRunLog, name)
    for name in ("get", "put"):
        watch(SessionRecords, name)
    for name in ("append", "append_many", "get_history", "history", "latest_leaf", "get_many", "compactions"):
        watch(Session, name)
    live = serve(echo_agent(), store)
    with live.client() as c:
        c.post("/sessions", json={"sessionId": "a"})
        reader = sse(f"{live.url}/sessions/a/events")
        for text in ("one", "two"):
            assert c.post("/sessions/a/messages", json={"text": text}).status_code == 202
        c.post("/sessions/a/messages", json={"text": "three", "context": {"k": 1}})
        wait_idle(c, "a")
        reader.wait_runs_ended(2)
        c.get("/sessions")
        c.get("/sessions/a")
        c.delete("/sessions/a")
    assert on_loop == []


def test_a_write_whose_caller_was_cancelled_is_committed_and_the_writer_goes_on(tmp_path):
    # a task stopped while it awaits a write (a run cancelled by DELETE or shutdown): the write
    # still commits, and the writer keeps serving the writes after it
    import asyncio
    import contextlib

    from sessionkit.server._storeio import StoreIO

    store = sk.open_store(tmp_path / "io.db")
    busy, release = threading.Event(), threading.Event()

    def hold_the_writer() -> None:
        busy.set()
        release.wait(HANG)

    async def main():
        io = StoreIO(store)
        io.start()
        try:
            io.submit(hold_the_writer)  # the writer is inside this job until the next write is cancelled
            assert await asyncio.to_thread(busy.wait, HANG)
            task = asyncio.ensure_future(io.write(lambda: store.session_records.put("s", "k", [(1, "cancelled")])))
            await asyncio.sleep(0)  # one turn of the loop: the task submits its job, then awaits it
            assert not task.done()
            task.cancel()
            release.set()
            return await asyncio.wait_for(
                io.write(lambda: store.session_records.put("s", "k", [(2, "after")]) or "ok"), HANG
            )
        finally:
            release.set()
            with contextlib.suppress(TimeoutError):  # a writer that died never flushes
                await asyncio.wait_for(io.close(), HANG)

    assert asyncio.run(main()) == "ok"
    assert store.session_records.get("s", "k") == [(1, "cancelled"), (2, "after")]
    store.close()
