"""store.import_runs / import_events / import_embeddings: facts stored as they are (ids, times,
seqs kept), importing twice adding nothing, bad items refused with an error naming them and
nothing written; store.scan("embeddings") reads the vectors back."""

from __future__ import annotations

import pytest
from helpers import msg

import sessionkit as sk

T0, T1 = "2030-01-01T00:00:00.000Z", "2030-01-01T00:00:02.500Z"


def _run(**fields):
    base = {"run_id": "r1", "session_id": "s", "status": "completed", "started_at": T0, "ended_at": T1}
    return {**base, **fields}


def test_runs_are_stored_as_given_in_order_and_once(engine, new_store):
    store = new_store(engine)
    store.run_log.begin("s", "live", "already here")
    given = [
        sk.RunRecord("r1", "s", "completed", None, T0, T1, {"in": 3, "cost_usd": 0.25}, "hi", {"variant": "v"}),
        _run(run_id="r2", status="failed", error="boom", ended_at=None, input=None, meta={"replay": "x"}),
    ]
    assert store.import_runs(iter(given)) == 2
    assert store.import_runs(given) == 0  # twice: nothing added
    runs = store.runs("s")
    assert [r.run_id for r in runs] == ["live", "r1", "r2"]  # numbered after what the session held
    assert runs[1] == given[0]
    assert (runs[2].status, runs[2].error, runs[2].ended_at, runs[2].meta) == ("failed", "boom", None, {"replay": "x"})
    view = store.sql_arrow("SELECT run_id, run_number, variant, cost_usd FROM runs ORDER BY run_number")
    assert view.to_pylist() == [
        {"run_id": "live", "run_number": 1, "variant": None, "cost_usd": None},
        {"run_id": "r1", "run_number": 2, "variant": "v", "cost_usd": 0.25},
        {"run_id": "r2", "run_number": 3, "variant": None, "cost_usd": None},
    ]


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        ("not a run", TypeError, "RunRecord or a dict"),
        (_run(run_id=7), TypeError, "run_id must be a str"),
        (_run(started_at="yesterday"), ValueError, "run 'r1': started_at"),
        (_run(usage=[1]), TypeError, "run 'r1': usage must be a dict"),
        (_run(meta={"x": float("nan")}), TypeError, "run 'r1': meta"),
        (_run(colour="red"), ValueError, "no field 'colour'"),
    ],
)
def test_a_bad_run_is_refused_naming_it_and_nothing_is_written(new_store, bad, error, words):
    store = new_store("sqlite", memory=True)
    with pytest.raises(error, match=words):
        store.import_runs([_run(run_id="good"), bad])
    assert store.runs("s") == []


def test_a_run_id_of_another_session_is_refused(new_store):
    store = new_store("sqlite", memory=True)
    store.import_runs([_run()])
    with pytest.raises(ValueError, match="run 'r1' is stored in session 's', not 'other'"):
        store.import_runs([_run(session_id="other")])
    assert store.runs("other") == []


def test_events_keep_their_seqs_and_payloads(engine, new_store):
    store = new_store(engine)
    events = [
        {"session_id": "s", "seq": 5, "kind": "run.start", "run_id": "r1", "ts": T0, "v": 1},
        {"session_id": "s", "seq": 9, "kind": "text", "data": {"delta": "😀\x01"}, "ts": T1, "v": 1},
        {"session_id": "t", "seq": 0, "kind": "note", "ts": T0, "v": 1},
    ]
    assert store.import_events(iter(events)) == 3
    assert store.import_events(events) == 0
    assert store.events("s") == events[:2]
    assert store.events("t") == events[2:]
    stored = store.run_log.append_events("s", [{"kind": "after"}])  # live events go on after them
    assert stored[0]["seq"] == 10
    with pytest.raises(ValueError, match="session 's' holds another event at seq 5"):
        store.import_events([{**events[0], "kind": "other"}])
    assert len(store.events("s")) == 3


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        ([1], TypeError, "an event must be a dict"),
        ({"seq": 1}, TypeError, "session_id must be a str"),
        ({"session_id": "s", "seq": -1}, ValueError, "needs its seq"),
        ({"session_id": "s", "seq": True}, ValueError, "needs its seq"),
        ({"session_id": "s", "seq": 1, "x": {1, 2}}, TypeError, "event 1 of session 's'"),
    ],
)
def test_a_bad_event_is_refused_and_nothing_is_written(new_store, bad, error, words):
    store = new_store("sqlite", memory=True)
    with pytest.raises(error, match=words):
        store.import_events([{"session_id": "s", "seq": 0, "kind": "fine"}, bad])
    assert store.events("s") == []


def _letters(texts):
    return [[float(t.count(c)) + 0.5 for c in "aeiou"] for t in texts]


def test_vectors_are_stored_as_embed_stores_them_and_read_back_by_scan(engine, new_store):
    src, dst = new_store(engine), new_store(engine)
    for store in (src, dst):
        store.session("s").append_many([msg("m1", "a piece of text"), msg("m2", "another one", "assistant")])
    assert src.embed(_letters) == 2
    rows = [dict(row, session_id=sid) for batch in src.scan("embeddings", batch_size=1) for sid, row in batch]
    assert [(r["session_id"], r["message_id"], r["model"]) for r in rows] == [
        ("s", "m1", "_letters"),
        ("s", "m2", "_letters"),
    ]
    assert dst.import_embeddings(iter(rows)) == 2
    assert dst.import_embeddings(rows) == 0
    assert dst.embed(_letters) == 0  # the messages hold a vector of that model already
    query = "a piece"
    assert dst.similar(query, embedder=_letters, k=2) == src.similar(query, embedder=_letters, k=2)
    same = "SELECT session_id, message_id, model, dim, vector FROM embeddings ORDER BY message_id"
    assert dst.sql_arrow(same).to_pylist() == src.sql_arrow(same).to_pylist()


@pytest.mark.parametrize(
    ("bad", "error", "words"),
    [
        ({"session_id": "s", "message_id": "nope", "model": "m", "vector": [1.0]}, sk.MessageNotFound, "'nope'"),
        ({"session_id": "s", "message_id": "m1", "model": "m", "vector": []}, ValueError, "the vector is empty"),
        ({"session_id": "s", "message_id": "m1", "model": "m", "vector": [float("nan")]}, ValueError, "NaN"),
        ({"session_id": "s", "message_id": "m1", "model": " ", "vector": [1.0]}, ValueError, "empty model name"),
        ({"session_id": "s", "message_id": "m1", "model": "m", "vector": [1.0, 2.0]}, ValueError, "of 1 and of 2"),
        ({"session_id": "s", "message_id": "m1", "model": "m", "vector": [1.0], "dim": 3}, ValueError, "dim 3"),
    ],
)
def test_a_bad_vector_is_refused_and_nothing_is_written(new_store, bad, error, words):
    store = new_store("sqlite", memory=True)
    store.session("s").append(msg("m1", "text"))
    with pytest.raises(error, match=words):
        store.import_embeddings([{"session_id": "s", "message_id": "m1", "model": "m", "vector": [0.5]}, bad])
    assert store.sql("SELECT count(*) AS n FROM embeddings")["n"][0] == 0
