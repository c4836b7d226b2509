"""copy_store and `sessionkit copy`: a store into another, refusing a destination that holds
sessions unless merging, never a store into itself, a missing source named."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import msg

import sessionkit as sk


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sessionkit", *args], capture_output=True, text=True, encoding="utf-8", timeout=120
    )


def _fill(store, sid="s", n=3):
    store.session(sid).append_many([msg(f"{sid}{i}", f"text {i}") for i in range(n)])


@pytest.mark.slow
def test_the_command_copies_refuses_a_full_destination_and_merges(tmp_path):
    src, dst = tmp_path / "src.db", tmp_path / "dst.duckdb"
    with sk.open_store(src) as store:
        _fill(store, "a")
        _fill(store, "b", 2)
        store.run_log.append_events("quiet", [{"kind": "note"}])
    done = _run("copy", str(src), str(dst))
    assert done.returncode == 0, done.stderr
    assert "copied 3 sessions" in done.stdout and "5 messages" in done.stdout and "1 run event" in done.stdout
    refused = _run("copy", str(src), str(dst))
    assert refused.returncode == 1
    assert "already holds sessions" in refused.stderr and "--merge" in refused.stderr
    with sk.open_store(src) as store:
        _fill(store, "c", 1)
    merged = _run("copy", "--merge", str(src), str(dst))
    assert merged.returncode == 0, merged.stderr
    assert "copied 1 session" in merged.stdout and "1 message," in merged.stdout
    with sk.open_store(dst) as copy, sk.open_store(src) as store:
        assert [(i.id, i.message_count) for i in copy.list_sessions()] == [
            (i.id, i.message_count) for i in store.list_sessions()
        ]
        assert copy.events("quiet") == store.events("quiet")


def test_the_command_names_a_missing_source_the_same_store_and_a_foreign_file(tmp_path):
    src = tmp_path / "src.db"
    with sk.open_store(src) as store:
        _fill(store)
    missing = _run("copy", str(tmp_path / "nope.db"), str(tmp_path / "x.db"))
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    assert not (tmp_path / "x.db").exists()
    same = _run("copy", str(src), str(src))
    assert same.returncode == 1 and "the same store" in same.stderr
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a store")
    refused = _run("copy", str(src), str(foreign))
    assert refused.returncode == 1 and foreign.read_text() == "not a store"


def test_copy_store_opens_paths_counts_and_reports_progress(tmp_path):
    src = tmp_path / "src.db"
    with sk.open_store(src) as store:
        _fill(store, "a", 4)
        store.add_label("a", "a1", "good")
        store.import_runs([{"run_id": "r", "session_id": "a", "status": "completed", "started_at": 0}])
    seen = []
    counts = sk.io.copy_store(src, tmp_path / "dst.db", progress=lambda done, total: seen.append((done, total)))
    assert counts == {
        "sessions": 1,
        "messages": 4,
        "compactions": 0,
        "labels": 1,
        "runs": 1,
        "events": 0,
        "embeddings": 0,
        "datasets": 0,
        "queues": 0,
    }
    assert seen[-1] == (4, 4)
    with sk.open_store(tmp_path / "dst.db") as dst, sk.open_store(src) as store:
        assert dst.runs("a") == store.runs("a") and dst.labels() == store.labels()
    with pytest.raises(TypeError, match="a sessionkit Store, a path or a PostgreSQL URL"):
        sk.io.copy_store(42, tmp_path / "other.db")
    with pytest.raises(TypeError, match="merge must be a bool"):
        sk.io.copy_store(src, tmp_path / "other.db", merge="yes")


def test_an_interrupted_copy_completes_when_merged(new_store):
    src, dst = new_store("sqlite", memory=True), new_store("sqlite", memory=True)
    _fill(src, "a", 3)
    _fill(src, "b", 3)
    # what an interrupted copy leaves: part of a session
    dst.session("a").import_many(
        [(m, None if i == 0 else f"a{i - 1}", None) for i, m in enumerate(src.session("a").get_history()[:2])]
    )
    counts = sk.io.copy_store(src, dst, merge=True)
    assert counts["messages"] == 4
    for sid in ("a", "b"):
        assert dst.session(sid).get_history() == src.session(sid).get_history()


@pytest.mark.slow
@pytest.mark.postgres
def test_the_command_copies_into_postgresql_by_url(tmp_path, new_store):
    target = new_store("postgresql")  # a fresh schema of the test server
    url = target.path
    src = tmp_path / "src.duckdb"
    with sk.open_store(src) as store:
        _fill(store, "a", 2)
    done = _run("copy", str(src), url)
    assert done.returncode == 0, done.stderr
    assert [(i.id, i.message_count) for i in target.list_sessions()] == [("a", 2)]


def test_a_damaged_source_is_copied_up_to_the_session_it_cannot_read(tmp_path):
    import sqlite3

    path = str(tmp_path / "damaged.db")
    with sk.open_store(path) as store:
        _fill(store, "a", 2)
        store.session("b").append(msg("b1", "y" * 3_000_000))  # its text goes to continuation rows
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sessionkit_chunks'").fetchone()[0]
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with open(path, "r+b") as fh:  # the continuation rows' b-tree can no longer be read
        fh.seek((root - 1) * page)
        fh.write(b"\xff" * page)
    with pytest.raises(sk.StoreCorrupt, match="while copying session 'b': the 1 sessions before it are copied"):
        sk.io.copy_store(path, tmp_path / "rescued.db")
    with sk.open_store(tmp_path / "rescued.db") as rescued:
        assert [(i.id, i.message_count) for i in rescued.list_sessions()] == [("a", 2)]
