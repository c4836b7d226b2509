"""Annotation queues (docs/annotation.md): units handed to annotators with a rubric, claims
with a lease, submissions as labels; on every engine where it is the engine's doing."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from helpers import wait_until

import sessionkit as sk
from sessionkit.store._schema import MIGRATIONS, SCHEMA_VERSION

RUBRIC = {"tags": ["good", "bad"], "rating": (1, 5), "instructions": "Is the reply right?"}


def _m(mid: str, role: str, text: str) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def _fill(store, sessions: int = 3) -> list[tuple[str, str]]:
    """``sessions`` sessions of two turns each; the replies' (session_id, message_id)."""
    replies = []
    with store.transaction():
        for i in range(sessions):
            s = store.session(f"s{i}")
            for t in range(2):
                s.append(_m(f"u{t}", "user", f"question {t} of {i}"))
                s.append(_m(f"r{t}", "assistant", f"answer {t} of {i}"))
                replies.append((f"s{i}", f"r{t}"))
    return replies


def test_a_queue_is_defined_listed_and_refused_when_wrong(new_store):
    store = new_store("sqlite")
    replies = _fill(store)
    info = store.queue("check", units=replies[:4], rubric=RUBRIC, annotators=["ana", "bo"], per_unit=2)
    assert (info.name, info.level, info.target, info.unit_count, info.per_unit) == ("check", "turn", "message", 4, 2)
    assert info.rubric == sk.Rubric(("good", "bad"), (1.0, 5.0), "Is the reply right?")
    assert store.queues() == [info] and store.queue_info("check") == info
    assert store.queue_units("check") == [(n, sid, mid) for n, (sid, mid) in enumerate(replies[:4])]
    by_query = store.queue(
        "by-query", query="SELECT session_id, reply_id AS message_id FROM turns WHERE session_id = 's1'", rubric=["ok"]
    )
    assert (by_query.unit_count, by_query.source, by_query.annotators) == (2, by_query.source, None)
    sessions = store.queue("whole", units=["s0", "s2"], level="session", rubric=["ok"])
    assert sessions.target == "branch" and store.queue_units("whole") == [(0, "s0", "r1"), (1, "s2", "r1")]
    store.dataset("frozen", units=replies[4:])
    from_dataset = store.queue("from-ds", dataset="frozen", rubric=["ok"])
    assert (from_dataset.unit_count, from_dataset.source) == (2, "frozen@1".join(["dataset:", ""]))

    refused = [
        (dict(units=replies, rubric=RUBRIC), "stored already"),
        (dict(units=replies, rubric={"tags": []}), "at least one tag"),
        (dict(units=replies, rubric={"tags": ["a"], "rating": (5, 1)}), "low < high"),
        (dict(units=replies, rubric={"tags": ["a"], "colour": 1}), "'colour'"),
        (dict(units=replies, rubric=["a"], annotators=["ana"], per_unit=2), "names 1 annotator"),
        (dict(units=[("s0", "nope")], rubric=["a"]), "'nope' is not in session 's0'"),
        (dict(units=replies, query="SELECT 1", rubric=["a"]), "one of units=, query= or dataset="),
        (dict(units=replies), "needs a rubric"),
        (dict(dataset="none", rubric=["a"]), "no dataset named 'none'"),
    ]
    for kwargs, words in refused:
        with pytest.raises(sk.InvalidQueue, match=words):
            store.queue("check" if "stored" in words else "other", **kwargs)
    assert [q.name for q in store.queues()] == ["by-query", "check", "from-ds", "whole"]
    with pytest.raises(sk.QueueNotFound):
        store.queue_info("other")
    assert store.delete_queue("whole") and not store.delete_queue("whole")


def test_claims_submissions_and_progress(new_store):
    store = new_store("sqlite")
    replies = _fill(store, sessions=1)
    store.queue("q", units=replies, rubric=RUBRIC, annotators=["ana", "bo", "cy"], per_unit=2)
    a = store.next_unit("q", "ana")
    assert (a.n, a.session_id, a.message_id, a.target, a.annotator) == (0, "s0", "r0", "message", "ana")
    assert store.next_unit("q", "ana") == a  # asked again: the claim held, not a new one
    b = store.next_unit("q", "bo")
    assert b.n == 0  # the unit needs two labels: a second annotator gets it too
    c = store.next_unit("q", "cy")
    assert c.n == 1  # ... but not a third while both places are held
    assert store.queue_progress("q").claimed == 3

    with pytest.raises(sk.InvalidQueue, match="not one of the rubric's tags"):
        store.submit_label("q", "ana", 0, "meh", rating=3)
    with pytest.raises(sk.InvalidQueue, match="asks for a rating"):
        store.submit_label("q", "ana", 0, "good")
    with pytest.raises(sk.InvalidQueue, match="outside the rubric's scale"):
        store.submit_label("q", "ana", 0, "good", rating=6)
    with pytest.raises(sk.InvalidQueue, match="not an annotator"):
        store.next_unit("q", "dee")
    label = store.submit_label("q", "ana", 0, "good", rating=4, note="fine")
    assert (label.author, label.source, label.target, label.rating, label.note) == (
        "ana",
        "human",
        "message",
        4.0,
        "fine",
    )
    assert store.labels(session_id="s0", message_id="r0") == [label]
    with pytest.raises(sk.InvalidQueue, match="already"):
        store.submit_label("q", "ana", 0, "bad", rating=1)
    # cy holds unit 1 and unit 0 has both its places taken (ana done, bo holding): cy may not label 0
    with pytest.raises(sk.InvalidQueue, match="not open to 'cy'"):
        store.submit_label("q", "cy", 0, "bad", rating=1)
    assert store.next_unit("q", "ana").n == 1
    assert store.release_unit("q", "ana", 1) and not store.release_unit("q", "ana", 1)
    store.submit_label("q", "bo", 0, "bad", rating=2)
    progress = store.queue_progress("q")
    assert (progress.units, progress.complete, progress.submitted, progress.remaining) == (2, 1, 2, 2)
    assert progress.done == {"ana": 1, "bo": 1, "cy": 0}
    assert [x.author for x in store.queue_labels("q")] == ["ana", "bo"]
    assert store.next_unit("q", "ana").n == 1
    assert store.next_unit("q", "bo") is None  # unit 1's two places are held, by cy and ana
    store.submit_label("q", "cy", 1, "good", rating=5)
    store.submit_label("q", "ana", 1, "good", rating=5)
    assert store.next_unit("q", "bo") is None  # every unit has its two labels
    assert store.queue_progress("q").complete == 2
    assert store.delete_queue("q") and len(store.labels(source="human")) == 4  # the labels stay


def test_a_lapsed_claim_goes_to_the_next_annotator(new_store):
    store = new_store("sqlite")
    replies = _fill(store, sessions=1)
    store.queue("q", units=replies[:1], rubric=["ok", "no"], lease_seconds=0.2)
    assert store.next_unit("q", "ana").n == 0
    assert store.next_unit("q", "bo", lease_seconds=60) is None  # held by ana
    got = wait_until(lambda: store.next_unit("q", "bo", lease_seconds=60), what="ana's claim to lapse")
    assert got.n == 0
    store.submit_label("q", "bo", 0, "ok")
    # ana comes back after her lease: the unit has its label, hers is refused and nothing is added
    with pytest.raises(sk.InvalidQueue, match="not open to 'ana'"):
        store.submit_label("q", "ana", 0, "no")
    assert [x.author for x in store.labels(source="human")] == ["bo"]


def test_two_annotators_at_once_label_every_unit_per_unit_times(engine, new_store):
    store = new_store(engine)
    replies = _fill(store, sessions=2)
    store.queue("q", units=replies, rubric=["good", "bad"], per_unit=2)
    errors: list[BaseException] = []

    def work(who: str) -> None:
        try:
            while (unit := store.next_unit("q", who)) is not None:
                store.submit_label("q", who, unit.n, "good" if (unit.n + len(who)) % 3 else "bad")
        except BaseException as exc:  # reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(who,)) for who in ("ana", "bo", "cyd")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = store.sql(
        "SELECT session_id, message_id, count(*) AS n, count(DISTINCT author) AS people FROM labels"
        " WHERE source = 'human' GROUP BY 1, 2"
    )
    assert len(counts) == len(replies) and set(counts["n"]) == {2} and set(counts["people"]) == {2}
    progress = store.queue_progress("q")
    assert progress.complete == len(replies) and progress.remaining == 0
    by_author = store.sql("SELECT author, count(*) AS n FROM labels GROUP BY author")
    assert dict(zip(by_author["author"], by_author["n"])) == {k: v for k, v in progress.done.items() if v}


def test_a_queue_goes_with_a_copy(new_store, tmp_path):
    store = new_store("sqlite")
    replies = _fill(store, sessions=1)
    store.queue("q", units=replies, rubric=RUBRIC, annotators=["ana", "bo"], per_unit=2)
    store.next_unit("q", "ana")
    store.submit_label("q", "ana", 0, "good", rating=3)
    store.next_unit("q", "bo")  # a claim running: a lease, not a fact, so not copied
    assert sk.io.copy_store(store, tmp_path / "copy.db")["queues"] == 1
    with sk.open_store(tmp_path / "copy.db") as copy:
        assert copy.queue_info("q") == store.queue_info("q")
        assert copy.export_queue("q") == store.export_queue("q")
        assert copy.queue_labels("q") == store.queue_labels("q")
        assert copy.queue_progress("q") == dataclasses.replace(store.queue_progress("q"), claimed=0)
        assert copy.next_unit("q", "ana").n == 1 and copy.next_unit("q", "bo").n == 0
        assert copy.import_queues([store.export_queue("q")]) == 0  # stored already: left alone
    with pytest.raises(sk.InvalidQueue, match="expected fields"):
        store.import_queues([{"name": "x"}])
    broken = {**store.export_queue("q"), "name": "x", "submissions": [{"n": 9, "annotator": "ana"}]}
    with pytest.raises(sk.InvalidQueue, match="names unit 9, of 2"):
        store.import_queues([broken])
    assert [q.name for q in store.queues()] == ["q"]


QUEUES = next(m.version for m in MIGRATIONS if "sessionkit_queues" in m.note)


def test_a_store_from_before_queues_gains_them(engine, new_store):
    store = new_store(engine)
    replies = _fill(store, sessions=1)
    eng = store._engine
    with eng.write():
        for table in ("queue_claims", "queue_units", "queues"):
            eng.execute(eng.compile(f"DROP TABLE {{{table}}}"))
        eng.execute(eng.compile("DELETE FROM {migrations} WHERE version >= ?"), (QUEUES,))
        eng.execute(eng.sql["meta_put"], ("schema_version", str(QUEUES - 1)))
    target = store.path
    store.close()
    with sk.open_store(target) as again:
        assert again.stats()["schema_version"] == SCHEMA_VERSION
        assert again.queues() == []
        again.queue("after", units=replies, rubric=["ok"])
        assert again.next_unit("after", "ana").message_id == "r0"
