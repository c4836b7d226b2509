"""The store viewer's annotation queues (``sessionkit view --write``, docs/annotation.md) over
real HTTP on 127.0.0.1: each annotator by a token of their own, two of them submitting at
once from threads, a claim left midway handed out again after its lease, and the page's
numbers against the store's own SQL and ``sk.analysis.agreement``."""

from __future__ import annotations

import threading

import pytest
from helpers import wait_until
from live_server import HANG, TOKEN, LiveServer

import sessionkit as sk
from sessionkit.server import create_view_app

ANA = "ana-token-0123456789abcdef"
BO = "bo-token-0123456789abcdefgh"


def _fill(store, sessions: int) -> list[tuple[str, str]]:
    replies = []
    with store.transaction():
        for i in range(sessions):
            s = store.session(f"s{i}")
            s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": f"question {i}"}]})
            s.append({"id": "r", "role": "assistant", "parts": [{"type": "text", "text": f"answer {i}"}]})
            replies.append((f"s{i}", "r"))
    return replies


@pytest.fixture
def served(new_store):
    store = new_store("sqlite", name="queues")
    replies = _fill(store, 6)
    store.queue(
        "check",
        units=replies,
        rubric={"tags": ["good", "bad"], "rating": (1, 3), "instructions": "Right?"},
        annotators=["ana", "bo"],
        per_unit=2,
        lease_seconds=60,
    )
    live = LiveServer(create_view_app(store, token=TOKEN, write=True, annotators={"ana": ANA, "bo": BO})).start()
    yield store, live
    live.stop()


def _post(client, msg: dict, name: str = "check"):
    return client.post("/api/queue", params={"name": name}, json=msg)


def test_two_annotators_at_once_and_the_numbers_shown(served):
    store, live = served
    failures: list[str] = []
    barrier = threading.Barrier(2)

    def work(token: str) -> None:
        with live.client({"Authorization": f"Bearer {token}"}) as c:
            barrier.wait(HANG)  # both start together: their claims and submissions interleave
            while True:
                unit = _post(c, {"type": "next"}).json()["unit"]
                if unit is None:
                    return
                assert unit["messages"][-1]["id"] == unit["message_id"] == "r"
                tag = "good" if unit["n"] % 2 or token == ANA else "bad"
                answer = _post(c, {"type": "submit", "n": unit["n"], "tag": tag, "rating": 1 + unit["n"] % 3})
                if answer.status_code != 200:
                    failures.append(answer.text)
                    return

    threads = [threading.Thread(target=work, args=(t,)) for t in (ANA, BO)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG)
    assert failures == []
    per_unit = store.sql(
        "SELECT session_id, count(*) AS n, count(DISTINCT author) AS people FROM labels"
        " WHERE source = 'human' AND message_id = 'r' GROUP BY 1"
    )
    assert len(per_unit) == 6 and set(per_unit["n"]) == {2} and set(per_unit["people"]) == {2}

    with live.client({"Authorization": f"Bearer {ANA}"}) as c:
        state = _post(c, {"type": "state"}).json()
        assert state["annotator"] == "ana"
        assert _post(c, {"type": "next"}).json()["unit"] is None
        # an annotator's token reads but cannot delete
        assert c.delete("/api/session", params={"id": "s0"}).status_code == 403
    by_author = store.sql("SELECT author, count(*) AS n FROM labels WHERE source = 'human' GROUP BY author")
    assert state["progress"]["done"] == dict(zip(by_author["author"], map(int, by_author["n"])))
    assert state["progress"]["complete"] == 6 and state["progress"]["remaining"] == 0
    [pair] = state["agreement"]
    same = store.sql(
        "SELECT count(*) AS n, avg(CASE WHEN a.tag = b.tag THEN 1.0 ELSE 0.0 END) AS observed FROM labels a"
        " JOIN labels b ON a.session_id = b.session_id AND a.message_id = b.message_id"
        " WHERE a.author = 'ana' AND b.author = 'bo'"
    )
    assert (pair["a"], pair["b"], pair["n"]) == ("ana", "bo", int(same["n"][0]))
    assert pair["observed"] == pytest.approx(float(same["observed"][0]))
    kappa = sk.analysis.agreement(store, {"author": "ana"}, {"author": "bo"}).kappa
    assert pair["kappa"] == (None if kappa != kappa else pytest.approx(kappa))
    assert pair["rating_n"] == 6 and pair["rating_observed"] == 1.0


def test_a_claim_left_midway_goes_back_after_its_lease(new_store):
    store = new_store("sqlite", name="lapse")
    store.queue("one", units=_fill(store, 1), rubric=["ok", "no"], lease_seconds=0.3)
    live = LiveServer(create_view_app(store, token=TOKEN, write=True, annotators={"ana": ANA, "bo": BO})).start()
    try:
        with (
            live.client({"Authorization": f"Bearer {ANA}"}) as ana,
            live.client({"Authorization": f"Bearer {BO}"}) as bo,
        ):
            assert _post(ana, {"type": "next"}, "one").json()["unit"]["n"] == 0  # ana's browser closes here
            assert _post(bo, {"type": "next"}, "one").json()["unit"] is None  # held by ana, for now
            unit = wait_until(lambda: _post(bo, {"type": "next"}, "one").json()["unit"], what="ana's lease to end")
            assert unit["n"] == 0 and unit["annotator"] == "bo"
            assert _post(bo, {"type": "submit", "n": 0, "tag": "ok"}, "one").status_code == 200
            late = _post(ana, {"type": "submit", "n": 0, "tag": "no"}, "one")
            assert late.status_code == 400 and "not open to 'ana'" in late.json()["detail"]
        assert [x.author for x in store.labels(source="human")] == ["bo"]
    finally:
        live.stop()


def test_who_may_work_a_queue(served):
    store, live = served
    with live.client() as owner:  # the main token: the request names its annotator
        assert owner.get("/api/queues").json()["queues"][0]["name"] == "check"
        assert _post(owner, {"type": "next"}).json()["detail"] == "say who you are: the annotator's name"
        assert _post(owner, {"type": "next", "annotator": "bo"}).json()["unit"]["annotator"] == "bo"
        refused = _post(owner, {"type": "next", "annotator": "eve"})
        assert refused.status_code == 400 and "not an annotator" in refused.json()["detail"]
        assert _post(owner, {"type": "state"}, name="none").status_code == 404
        bad = _post(owner, {"type": "submit", "n": 0, "tag": "meh", "rating": 1, "annotator": "bo"})
        assert bad.status_code == 400 and "not one of the rubric's tags" in bad.json()["detail"]
    with live.client(None) as nobody:
        assert _post(nobody, {"type": "state"}).status_code == 401
    with live.client({"Authorization": f"Bearer {BO}"}) as bo:
        # bo's token says who bo is, whatever the request claims
        assert _post(bo, {"type": "next", "annotator": "ana"}).json()["unit"]["annotator"] == "bo"
    assert store.labels(source="human") == []
    with pytest.raises(ValueError, match="need write=True"):
        create_view_app(store, annotators={"ana": ANA})
    with pytest.raises(ValueError, match="another's"):
        create_view_app(store, write=True, token=TOKEN, annotators={"ana": TOKEN})
    read_only = LiveServer(create_view_app(store)).start()
    try:
        with read_only.client(None) as c:
            assert _post(c, {"type": "state"}).status_code == 404  # no queue routes without write
    finally:
        read_only.stop()


def test_the_command_checks_its_annotators(tmp_path, monkeypatch):
    import contextlib
    import io

    from sessionkit.cli import main

    monkeypatch.delenv("SESSIONKIT_TOKEN", raising=False)
    path = tmp_path / "q.db"
    sk.open_store(path).close()
    for extra, words in (
        (["--annotator", "ana"], "need --write"),
        (["--write", "--annotator", "ana=short"], "shorter than 16 characters"),
        (["--write", "--annotator", "ana", "--annotator", "ana"], "give each annotator once"),
        (["--write", "--annotator", "=x" * 9], "give each annotator once"),
        (
            ["--bundle", str(tmp_path / "b"), "--annotator", "ana"],
            "--annotator and --poll apply to the served viewer only",
        ),
    ):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            status = main(["view", str(path), "--port", "0", *extra])
        assert status != 0 and words in err.getvalue(), (extra, err.getvalue())
    assert not (tmp_path / "b").exists()
