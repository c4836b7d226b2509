"""A store holding every kind of fact (seams/facts.py) goes through each surface that moves a
store -- the JSONL export and import, the Parquet export and import, the copy between
engines -- and the store it arrives in answers every public read exactly as the source.

The copy runs between every pair of engines. The files of an export are the same whatever
engine wrote them, so the JSONL and Parquet round trips run on a cycle of pairs in which each
engine exports once and imports once, and on SQLite to SQLite."""

from __future__ import annotations

import itertools

import pytest

import sessionkit as sk
from seams.facts import assert_same_reads

ENGINES = ("sqlite", "duckdb", "postgresql")
PAIRS = [
    pytest.param(a, b, id=f"{a}-to-{b}", marks=() if (a, b) == ("sqlite", "sqlite") else pytest.mark.slow)
    for a, b in itertools.product(ENGINES, ENGINES)
]
#: Each engine once as the source and once as the destination of an export.
CYCLE = [
    pytest.param(a, b, id=f"{a}-to-{b}", marks=() if (a, b) == ("sqlite", "sqlite") else pytest.mark.slow)
    for a, b in [("sqlite", "sqlite"), ("sqlite", "duckdb"), ("duckdb", "postgresql"), ("postgresql", "sqlite")]
]


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize(("src_engine", "dst_engine"), CYCLE)
def test_jsonl_export_then_import_keeps_every_fact(src_engine, dst_engine, every_fact_store, new_store, tmp_path):
    src, notes = every_fact_store(src_engine)
    path = tmp_path / "every-fact.jsonl.gz"
    counts = sk.io.export_jsonl(src, path)
    assert counts["runs"] == sum(len(src.runs(sid)) for sid in notes["sessions"]) and counts["embeddings"] > 0
    assert counts["events"] == sum(len(src.events(sid)) for sid in notes["sessions"])
    dst = new_store(dst_engine)
    sessions = sk.io.import_jsonl(dst, path)
    assert {s.session_id for s in sessions} == set(notes["sessions"])
    assert_same_reads(src, dst, notes)
    before = dst.stats()
    sk.io.import_jsonl(dst, path)  # again: nothing added
    assert dst.stats() == before
    assert_same_reads(src, dst, notes)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize(("src_engine", "dst_engine"), CYCLE)
def test_parquet_export_then_import_keeps_every_fact(src_engine, dst_engine, every_fact_store, new_store, tmp_path):
    src, notes = every_fact_store(src_engine)
    paths = sk.io.export_parquet(src, tmp_path / "pq")
    assert set(paths) == set(sk.io.parquet.PARQUET_FILES)
    assert sk.io.detect_format(tmp_path / "pq") == "parquet"
    dst = new_store(dst_engine)
    sk.io.import_parquet(dst, tmp_path / "pq")
    assert_same_reads(src, dst, notes)
    before = dst.stats()
    sk.io.import_parquet(dst, tmp_path / "pq")
    assert dst.stats() == before
    assert_same_reads(src, dst, notes)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize(("src_engine", "dst_engine"), PAIRS)
def test_copy_keeps_every_fact(src_engine, dst_engine, every_fact_store, new_store):
    src, notes = every_fact_store(src_engine)
    dst = new_store(dst_engine)
    seen: list[tuple[int, int | None]] = []
    counts = sk.io.copy_store(src, dst, progress=lambda done, total: seen.append((done, total)))
    assert counts["sessions"] == len(notes["sessions"])
    assert counts["messages"] == src.stats()["messages"]
    assert seen and seen[-1] == (src.stats()["messages"], src.stats()["messages"])
    assert_same_reads(src, dst, notes)
    with pytest.raises(sk.UsageError, match="already holds sessions"):
        sk.io.copy_store(src, dst)
    again = sk.io.copy_store(src, dst, merge=True)
    assert not any(again.values()), again
    assert_same_reads(src, dst, notes)
