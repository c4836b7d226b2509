"""The plumbing of the agent, the server and the importers lives on store.run_log,
store.session_records and store.coordination, not on Store itself."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import sessionkit as sk
from sessionkit.agent.events import RunLog
from sessionkit.aio import AsyncCoordination, AsyncRunLog, AsyncSessionRecords, AsyncStore
from sessionkit.store import Coordination, SessionRecords, StoreRunLog

#: Where each name that left Store lives now.
MOVED = {
    "begin_run": ("run_log", "begin"),
    "end_run": ("run_log", "end"),
    "reopen_run": ("run_log", "reopen"),
    "append_events": ("run_log", "append_events"),
    "records": ("session_records", "get"),
    "put_records": ("session_records", "put"),
    "try_hold": ("coordination", "try_hold"),
    "hold_taken": ("coordination", "hold_taken"),
    "release_hold": ("coordination", "release_hold"),
    "signal": ("coordination", "signal"),
    "on_signal": ("coordination", "on_signal"),
}
PARTS = {"run_log": StoreRunLog, "session_records": SessionRecords, "coordination": Coordination}
ASYNC_PARTS = {"run_log": AsyncRunLog, "session_records": AsyncSessionRecords, "coordination": AsyncCoordination}


def _public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_")}


@pytest.mark.parametrize("cls", [sk.Store, AsyncStore])
def test_no_moved_name_is_a_public_member_of_the_store(cls):
    assert not set(MOVED) & _public(cls), sorted(set(MOVED) & _public(cls))
    assert set(PARTS) <= _public(cls)


@pytest.mark.parametrize("parts", [PARTS, ASYNC_PARTS])
def test_each_moved_name_has_its_home_with_the_same_arguments(parts):
    for old, (part, new) in MOVED.items():
        assert new in _public(parts[part]), f"{old}: no {part}.{new}"
    # the async twins take what the sync objects take
    for part, cls in PARTS.items():
        for name in _public(cls):
            twin = getattr(ASYNC_PARTS[part], name)
            assert inspect.iscoroutinefunction(twin), f"{part}.{name}"
            want = [(p.name, p.kind, p.default) for p in inspect.signature(getattr(cls, name)).parameters.values()]
            got = [(p.name, p.kind, p.default) for p in inspect.signature(twin).parameters.values()]
            assert got == want, f"{part}.{name}"


def test_the_parts_of_a_store(new_store, engine):
    store = new_store(engine)
    assert isinstance(store.run_log, RunLog)  # what the agent checks
    assert store.run_log is store.run_log and store.session_records is store.session_records
    assert (store.coordination is None) is (not store.capabilities.coordination)
    store.run_log.begin("s", "s.1", "hi", meta={"variant": "v"})
    stored = store.run_log.append_events("s", [{"kind": "run.start", "run_id": "s.1"}])
    store.run_log.end("s.1", status="failed", error="boom")
    store.run_log.reopen("s.1")
    assert [(r.run_id, r.status, r.error, r.meta) for r in store.runs("s")] == [
        ("s.1", "running", None, {"variant": "v"})
    ]
    assert store.run_log.runs("s") == store.runs("s")
    assert store.run_log.events("s") == store.events("s") == stored
    store.session_records.put("s", "k", [(2, {"x": 1}), (1, "one")])
    assert store.session_records.get("s", "k") == [(1, "one"), (2, {"x": 1})]
    store.close()
    with pytest.raises(sk.StoreClosed):
        store.session_records.get("s", "k")
    with pytest.raises(sk.StoreClosed):
        store.run_log.begin("s", "s.2", "again")


def test_an_agent_records_its_runs_on_the_store_run_log(new_store):
    from sessionkit.testing import ScriptedModel

    store = new_store("sqlite")
    result = sk.Agent("a", "", ScriptedModel(["hello"])).run_sync("hi", session=store.session("chat"))
    assert [r.run_id for r in store.run_log.runs("chat")] == [result.run_id]
    kinds = [e["kind"] for e in store.run_log.events("chat")]
    assert kinds[0] == "run.start" and kinds[-1] == "run.end"


def test_the_async_parts(tmp_path):
    async def main():
        async with sk.aio.open_store(str(tmp_path / "a.db")) as store:
            assert store.coordination is None  # SQLite: one process serves it
            await store.run_log.begin("s", "s.1", "hi")
            await store.run_log.append_events("s", [{"kind": "note"}])
            await store.run_log.end("s.1", status="completed")
            await store.session_records.put("s", "k", [(0, "v")])
            return (
                [r.status for r in await store.run_log.runs("s")],
                [e["kind"] for e in await store.events("s")],
                await store.session_records.get("s", "k"),
            )

    assert asyncio.run(main()) == (["completed"], ["note"], [(0, "v")])
