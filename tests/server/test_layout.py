"""The layout version of the server's records (docs/server.md): stamped on a store the server
is created on, a store written before the version was kept read as layout 1, a newer layout
refused before anything is written; on every engine."""

from __future__ import annotations

import pytest
from live_server import echo_agent, wait_idle

import sessionkit as sk
from sessionkit.server import _records as R
from sessionkit.server import create_app
from sessionkit.store._schema import MIGRATIONS, SCHEMA_VERSION


def stored_records(store) -> list[tuple]:
    """Every record of the store, as stored (what "nothing is written" compares)."""
    eng = store._engine
    rows = eng.fetch(eng.compile("SELECT session_id, kind, n, data FROM {records} ORDER BY 1, 2, 3"))
    return [tuple(r) for r in rows]


def layout_record(store) -> list[tuple[int, object]]:
    return store.session_records.get(R.LAYOUT_KEY, R.LAYOUT)


def test_a_new_store_is_stamped_when_the_server_is_created_on_it(store):
    assert layout_record(store) == [] and stored_records(store) == []
    app = create_app(echo_agent(), store, token="t" * 16)
    try:
        assert layout_record(store) == [(0, {"version": R.LAYOUT_VERSION})]
        assert R.stored_layout(store) == R.LAYOUT_VERSION == 1
        assert store.list_sessions() == []  # a reserved key, never a session
    finally:
        app.state.sessionkit.close()


def test_a_store_written_before_the_version_was_kept_is_layout_1_and_gets_stamped(store, serve):
    live = serve(echo_agent(), store)
    with live.client() as c:
        assert c.post("/sessions", json={"sessionId": "kept"}).status_code == 201
        c.post("/sessions/kept/messages", json={"text": "hello"})
        wait_idle(c, "kept")
    live.stop()
    store.delete_session(R.LAYOUT_KEY)  # the store as a server without the version left it
    before = stored_records(store)
    assert before and R.stored_layout(store) is None
    assert {kind for _, kind, _, _ in before} >= {R.SESSION, R.DIGEST, R.MESSAGE, R.RUN, R.INDEX, R.BUSY}

    live = serve(echo_agent(), store)
    assert layout_record(store) == [(0, {"version": 1})]
    assert [r for r in stored_records(store) if r[0] != R.LAYOUT_KEY] == before  # read as they are
    with live.client() as c:
        assert [s["sessionId"] for s in c.get("/sessions").json()["sessions"]] == ["kept"]
        state = c.get("/sessions/kept").json()
        assert [(r["runId"], r["status"]) for r in state["runs"]] == [("kept.1", "completed")]
        assert c.post("/sessions/kept/messages", json={"text": "again"}).json()["runId"] == "kept.2"
        wait_idle(c, "kept")


def test_a_store_of_a_newer_layout_is_refused_and_nothing_is_written(store):
    newer = R.LAYOUT_VERSION + 1
    store.session_records.put(R.LAYOUT_KEY, R.LAYOUT, [(0, {"version": newer})])
    store.session_records.put("s", R.SESSION, [(0, {"createdAt": "2026-01-01T00:00:00.000Z", "eventBase": 0})])
    before = stored_records(store)
    with pytest.raises(sk.SchemaVersionError) as refused:
        create_app(echo_agent(), store, token="t" * 16)
    assert f"layout {newer}" in str(refused.value) and f"layout {R.LAYOUT_VERSION}" in str(refused.value)
    assert stored_records(store) == before
    # the lease was not taken either: once the store is back at this layout a server starts on it
    store.session_records.put(R.LAYOUT_KEY, R.LAYOUT, [(0, {"version": R.LAYOUT_VERSION})])
    create_app(echo_agent(), store, token="t" * 16).state.sessionkit.close()


@pytest.mark.parametrize("value", [{"version": "1"}, {"version": 0}, {"version": True}, {}, [1], None])
def test_a_malformed_layout_version_is_refused_as_corrupt(new_store, value):
    store = new_store("sqlite")
    store.session_records.put(R.LAYOUT_KEY, R.LAYOUT, [(0, value)])
    before = stored_records(store)
    with pytest.raises(sk.StoreCorrupt, match="malformed layout version"):
        create_app(echo_agent(), store, token="t" * 16)
    assert stored_records(store) == before


def test_the_schema_ledger_notes_the_layout(new_store):
    (step,) = [m for m in MIGRATIONS if R.LAYOUT in m.note]
    assert R.LAYOUT_KEY in step.note and f"layout {R.LAYOUT_VERSION}" in step.note
    assert step.steps == {}  # no table changes: the records live in sessionkit_records
    assert step.version <= SCHEMA_VERSION
    ledger = new_store("sqlite")._engine.ledger()
    assert (step.version, step.note) in [(v, note) for v, note, _ in ledger]
