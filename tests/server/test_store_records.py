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
    assert st.records("s", "server.message") == []
    st.put_records("s", "server.message", [(2, {"text": "b"}), (1, {"text": "a"})])
    st.put_records("s", "server.session", [(0, {"digest": "x"})])
    st.put_records("t", "server.message", [(1, {"text": "other session"})])
    assert st.records("s", "server.message") == [(1, {"text": "a"}), (2, {"text": "b"})]
    st.put_records("s", "server.message", [(1, {"text": "A", "run": 3})])  # replace
    assert st.records("s", "server.message") == [(1, {"text": "A", "run": 3}), (2, {"text": "b"})]
    assert st.records("s", "server.session") == [(0, {"digest": "x"})]
    assert st.records("t", "server.message") == [(1, {"text": "other session"})]
    with pytest.raises(TypeError):
        st.put_records("s", "k", [(1, {1, 2})])  # not JSON
    with pytest.raises(TypeError):
        st.put_records("s", "k", [("1", {})])
    assert st.records("s", "k") == []


def test_a_session_holding_only_records_exists_and_delete_session_removes_them(any_store):
    st = any_store
    st.put_records("only", "server.session", [(0, {"createdAt": "now"})])
    assert st.list_sessions() == []  # list_sessions counts sessions holding messages (docs/stores.md)
    st.delete_session("only")
    assert st.records("only", "server.session") == []
    with pytest.raises(sk.SessionNotFound):
        st.delete_session("only")
    st.session("full").append({"id": "m", "role": "user", "parts": []})
    st.put_records("full", "server.message", [(1, {"text": "hi"})])
    st.delete_session("full")
    assert st.records("full", "server.message") == [] and len(st.session("full")) == 0


def test_records_survive_reopening(tmp_path):
    path = tmp_path / "keep.db"
    with sk.open_store(path) as st:
        st.put_records("s", "server.session", [(0, {"digest": "abc", "lastSeq": 7})])
    with sk.open_store(path) as st:
        assert st.records("s", "server.session") == [(0, {"digest": "abc", "lastSeq": 7})]


def test_reopen_run_marks_a_finished_run_running_again_and_keeps_its_events(any_store):
    st = any_store
    st.begin_run("s", "s.1", "hello")
    st.append_events("s", [{"run_id": "s.1", "kind": "run.start"}])
    st.end_run("s.1", status="interrupted", error="the server stopped", usage={"in": 1})
    (before,) = st.runs("s")
    st.reopen_run("s.1")
    (again,) = st.runs("s")
    assert (again.status, again.error, again.ended_at, again.usage) == ("running", None, None, None)
    assert (again.run_id, again.input, again.started_at) == ("s.1", "hello", before.started_at)
    assert [e["kind"] for e in st.events("s")] == ["run.start"]
    st.end_run("s.1", status="completed")
    assert st.runs("s")[0].status == "completed"
    st.reopen_run("nobody")  # an unknown run: nothing happens
    assert [r.run_id for r in st.runs("s")] == ["s.1"]
    with pytest.raises(TypeError):
        st.reopen_run(5)
