"""One store file opened in one process through two names (a hard link; bind mounts and
case-insensitive file systems give a file two names as well) is one store: appends
through both store objects are all kept, and the file stays whole."""

from __future__ import annotations

import os
import threading

import pytest
from helpers import msg

import sessionkit as sk

THREADS = 2
APPENDS = 200  # per store object


@pytest.fixture(params=["duckdb", "sqlite"])
def two_names(request, tmp_path):
    if request.param == "duckdb":
        pytest.importorskip("duckdb")
    first = tmp_path / f"a.{'duckdb' if request.param == 'duckdb' else 'db'}"
    sk.open_store(first).close()  # the file exists, so that it can be linked
    second = tmp_path / f"b{first.suffix}"
    try:
        os.link(first, second)
    except OSError as exc:  # a file system without hard links
        pytest.fail(f"cannot make a hard link in {tmp_path}: {exc}")
    return first, second


def test_appends_through_both_names_are_all_kept(two_names):
    first, second = two_names
    stores = [sk.open_store(first), sk.open_store(second)]
    start = threading.Barrier(THREADS)
    acked: list[list[str]] = [[] for _ in stores]
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            start.wait()
            for i in range(APPENDS):
                mid = f"w{k}-{i}"
                if stores[k].session(f"s{k}").append(msg(mid, f"text {i}")).inserted:
                    acked[k].append(mid)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert [len(a) for a in acked] == [APPENDS] * THREADS
    # each object sees the other's appends while both are open
    for st in stores:
        assert st.stats()["messages"] == THREADS * APPENDS
    for st in stores:
        st.close()
    for name in (first, second):
        st = sk.open_store(name)
        try:
            assert st.stats()["messages"] == THREADS * APPENDS
            for k in range(THREADS):
                assert [m["id"] for m in st.session(f"s{k}").get_history()] == acked[k]
        finally:
            st.close()


def test_one_store_through_two_names_shares_its_writes(two_names):
    first, second = two_names
    a, b = sk.open_store(first), sk.open_store(second)
    try:
        a.session("s").append(msg("m1", "one"))
        b.session("s").append(msg("m2", "two"))  # under m1: b sees a's append
        assert [m["id"] for m in a.session("s").get_history()] == ["m1", "m2"]
        assert not b.session("s").append(msg("m1", "again")).inserted  # the id is known through both
        a.close()
        b.session("s").append(msg("m3", "three"))
        assert [m["id"] for m in b.session("s").get_history()] == ["m1", "m2", "m3"]
    finally:
        a.close()
        b.close()
    st = sk.open_store(first)
    try:
        assert [m["id"] for m in st.session("s").get_history()] == ["m1", "m2", "m3"]
    finally:
        st.close()


def test_a_second_name_is_refused_once_the_first_no_longer_leads_to_the_file(two_names):
    first, second = two_names
    a = sk.open_store(first)
    moved = first.with_name("moved" + first.suffix)
    try:
        a.session("s").append(msg("m1", "one"))
        os.rename(first, moved)  # the file is still open here as `first`, a name now gone
        with pytest.raises(sk.StoreLocked) as err:
            sk.open_store(second)
        assert str(first) in str(err.value) and str(second) in str(err.value)
        assert [m["id"] for m in a.session("s").get_history()] == ["m1"]
    finally:
        a.close()
    # back under its name: SQLite keeps the -wal of a file moved while open by its old name
    os.rename(moved, first)
    st = sk.open_store(first)
    try:
        assert [m["id"] for m in st.session("s").get_history()] == ["m1"]
    finally:
        st.close()


def test_sql_through_both_names(two_names):
    first, second = two_names
    a, b = sk.open_store(first), sk.open_store(second)
    try:
        a.session("s").append(msg("m1", "one"))
        b.session("s").append(msg("m2", "two"))
        for st in (a, b):
            assert st.sql("SELECT count(*) AS n FROM messages")["n"].tolist() == [2]
    finally:
        a.close()
        b.close()
