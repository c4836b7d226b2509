"""What docs/search.md promises across engines: a query finds the same messages on SQLite,
DuckDB and PostgreSQL (one tokenizer and stemmer everywhere); only the ranking differs
(FTS5's bm25, sessionkit's own BM25 on DuckDB, PostgreSQL's ts_rank_cd), so the order of
hits of equal relevance and the scores are not compared."""

from __future__ import annotations

from pathlib import Path

import pytest

import sessionkit as sk

DATA = Path(__file__).resolve().parent.parent / "data"
QUERIES = ["water", "deploying", "python code", '"machine learning"', "recipe", "Zürich", "the cat", "qwertyuiop"]


@pytest.mark.postgres
@pytest.mark.slow  # (an OpenAssistant file imported on three engines)
def test_a_query_finds_the_same_messages_on_every_engine(new_store):
    found = {}
    for engine in ("sqlite", "duckdb", "postgresql"):
        store = new_store(engine) if engine == "postgresql" else new_store(engine, memory=True)
        sk.io.import_oasst(store, DATA / "en_100_tree.jsonl", progress=False)
        assert store.stats()["messages"] < store.settings.search_candidates  # every match is ranked
        found[engine] = {q: {(h.session_id, h.id) for h in store.search(q, limit=10_000)} for q in QUERIES}
        for q in QUERIES:  # best first, on each engine by its own score
            scores = [h.score for h in store.search(q, limit=10_000)]
            assert scores == sorted(scores, reverse=True), (engine, q)
    assert found["sqlite"] == found["duckdb"] == found["postgresql"]
    assert sum(1 for q in QUERIES if found["sqlite"][q]) >= 5  # the queries do find something
