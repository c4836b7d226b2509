"""``open_store(target, create=False)``: open a store that exists, create and change nothing else."""

from __future__ import annotations

import sqlite3

import pytest

import sessionkit as sk


@pytest.mark.parametrize("ext", ["db", "duckdb"])
def test_an_existing_store_opens(tmp_path, ext):
    path = tmp_path / f"s.{ext}"
    with sk.open_store(path) as st:
        st.session("s").append({"id": "a", "role": "user", "parts": []})
    with sk.open_store(path, create=False) as st:
        assert len(st.session("s")) == 1
        assert st.stats()["schema_version"] >= 1
    with sk.open_store(f"{'sqlite' if ext == 'db' else 'duckdb'}:///{path}", create=False) as st:
        assert len(st.session("s")) == 1


@pytest.mark.parametrize(
    "target, words",
    [
        ("missing.db", "no store at"),
        ("missing.duckdb", "no store at"),
        ("missing.txt", "no store at"),  # a missing file is reported as such whatever its name
        ("sqlite:///missing.db", "no store at"),
        (":memory:", "in-memory"),
        ("duckdb:///:memory:", "in-memory"),
        (".", "is a folder"),
    ],
)
def test_nothing_to_open_is_a_value_error_naming_it(tmp_path, monkeypatch, target, words):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=words) as info:
        sk.open_store(target, create=False)
    assert repr(target) in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_another_programs_database_is_left_alone(tmp_path):
    foreign = tmp_path / "notes.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    empty_sqlite, empty_duckdb = tmp_path / "empty.db", tmp_path / "empty.duckdb"
    empty_sqlite.write_bytes(b"")
    empty_duckdb.write_bytes(b"")
    for path in (foreign, empty_sqlite, empty_duckdb):
        with pytest.raises(ValueError, match="not a sessionkit store"):
            sk.open_store(path, create=False)
    db = sqlite3.connect(foreign)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
    db.close()
    assert empty_sqlite.read_bytes() == b"" and empty_duckdb.read_bytes() == b""
    duck = pytest.importorskip("duckdb")
    other = tmp_path / "other.duckdb"
    con = duck.connect(str(other))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(ValueError, match="not a sessionkit store"):
        sk.open_store(other, create=False)
    con = duck.connect(str(other), read_only=True)
    assert [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["t"]
    con.close()


def test_a_file_that_is_no_database_is_named_by_opening(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    with pytest.raises(ValueError, match="not a SQLite database"):
        sk.open_store(junk, create=False)
