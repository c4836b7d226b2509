"""The store's internal records, where the server keeps its tables (one test per store variant that has them)."""

from __future__ import annotations

import pytest

import sessionkit as sk


@pytest.fixture
def any_store(store_variant, new_store):
    """Every store variant of the matrix (tests/conftest.py)."""
    return new_store(store_variant)


def test_records_are_upserted_listed_by_number_and_kept_per_session_and_kind(any_store):
    st = any_store
    assert st.session_records.get("s", "server.message") == []
    st.session_records.put("s", "server.message", [(2, {"text": "b"}), (1, {"text": "a"})])
    st.session_records.put("s", "server.session", [(0, {"digest": "x"})])
    st.session_records.put("t", "server.message", [(1, {"text": "other session"})])
    assert st.session_records.get("s", "server.message") == [(1, {"text": "a"}), (2, {"text": "b"})]
    st.session_records.put("s", "server.message", [(1, {"text": "A", "run": 3})])  # replace
    assert st.session_records.get("s", "server.message") == [(1, {"text": "A", "run": 3}), (2, {"text": "b"})]
    assert st.session_records.get("s", "server.session") == [(0, {"digest": "x"})]
    assert st.session_records.get("t", "server.message") == [(1, {"text": "other session"})]
    with pytest.raises(TypeError):
        st.session_records.put("s", "k", [(1, {1, 2})])  # not JSON
    with pytest.raises(TypeError):
        st.session_records.put("s", "k", [("1", {})])
    assert st.session_records.get("s", "k") == []


def test_a_session_holding_only_records_exists_and_delete_session_removes_them(any_store):
    st = any_store
    st.session_records.put("only", "server.session", [(0, {"createdAt": "now"})])
    assert st.list_sessions() == []  # list_sessions counts sessions holding messages (docs/stores.md)
    st.delete_session("only")
    assert st.session_records.get("only", "server.session") == []
    with pytest.raises(sk.SessionNotFound):
        st.delete_session("only")
    st.session("full").append({"id": "m", "role": "user", "parts": []})
    st.session_records.put("full", "server.message", [(1, {"text": "hi"})])
    st.delete_session("full")
    assert st.session_records.get("full", "server.message") == [] and len(st.session("full")) == 0


def test_records_survive_reopening(tmp_path):
    path = tmp_path / "keep.db"
    with sk.open_store(path) as st:
        st.session_records.put("s", "server.session", [(0, {"digest": "abc", "lastSeq": 7})])
    with sk.open_store(path) as st:
        assert st.session_records.get("s", "server.session") == [(0, {"digest": "abc", "lastSeq": 7})]


def test_reopen_run_marks_a_finished_run_running_again_and_keeps_its_events(any_store):
    st = any_store
    st.run_log.begin("s", "s.1", "hello")
    st.run_log.append_events("s", [{"run_id": "s.1", "kind": "run.start"}])
    st.run_log.end("s.1", status="interrupted", error="the server stopped", usage={"in": 1})
    (before,) = st.runs("s")
    st.run_log.reopen("s.1")
    (again,) = st.runs("s")
    assert (again.status, again.error, again.ended_at, again.usage) == ("running", None, None, None)
    assert (again.run_id, again.input, again.started_at) == ("s.1", "hello", before.started_at)
    assert [e["kind"] for e in st.events("s")] == ["run.start"]
    st.run_log.end("s.1", status="completed")
    assert st.runs("s")[0].status == "completed"
    st.run_log.reopen("nobody")  # an unknown run: nothing happens
    assert [r.run_id for r in st.runs("s")] == ["s.1"]
    with pytest.raises(TypeError):
        st.run_log.reopen(5)
