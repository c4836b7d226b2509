"""``store.score``: every unit scored once, nothing scored twice, a changed unit scored
again, a run killed midway finished by the next one; the built-in code scorers."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import pytest
from helpers import msg, wait_until

import sessionkit as sk

ENGINES = ["sqlite", pytest.param("duckdb", marks=pytest.mark.slow), pytest.param("postgresql", marks=pytest.mark.slow)]

SESSIONS, TURNS = 100, 10  # 1,000 turns


def build(store, sessions: int = SESSIONS, turns: int = TURNS) -> None:
    """``sessions`` sessions of ``turns`` turns each (user, assistant), every third reply with a tool call."""
    for n in range(sessions):
        chain = []
        for t in range(turns):
            chain.append(msg(f"u{t}", f"question {t} of {n}"))
            reply = msg(f"a{t}", f"answer {t} of {n}", "assistant")
            if t % 3 == 0:
                reply["parts"].append(
                    {
                        "type": "tool-lookup",
                        "toolCallId": f"c{t}",
                        "state": "output-available",
                        "input": {},
                        "output": 1,
                    }
                )
            chain.append(reply)
        store.session(f"s{n:03}").append_many(chain)


class Counting:
    """A scorer that counts its calls (thread-safe) and tags every unit ``seen``."""

    def __init__(self, name: str = "counting", version: int = 1):
        self.name, self.version = name, version
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, unit: sk.scorers.Unit):
        with self.lock:
            self.calls.append((unit.session_id, unit.message_id))
        return sk.Score("seen", rating=len(unit.messages), rationale=f"{len(unit.messages)} messages")


def _target(kind, request, tmp_path) -> str:
    """Where a store of ``kind`` can be opened by another process too."""
    if kind == "postgresql":
        return request.getfixturevalue("pg_store_url")()
    return str(tmp_path / ("s.db" if kind == "sqlite" else "s.duckdb"))


@pytest.mark.parametrize("kind", ENGINES)
def test_every_turn_is_scored_once_then_only_what_changed(kind, new_store):
    store = new_store(kind)
    build(store)
    scorer = Counting()
    first = store.score(scorer, progress=False)
    assert first == {"units": 1000, "skipped": 0, "scored": 1000, "labelled": 1000, "replaced": 0}
    assert len(scorer.calls) == len(set(scorer.calls)) == 1000
    labels = store.labels(scorer="counting@1")
    assert len(labels) == 1000 and {(x.session_id, x.message_id) for x in labels} == set(scorer.calls)
    assert {(x.source, x.tag, x.target, x.rating) for x in labels} == {("code", "seen", "message", 2.0)}
    assert {x.message_id for x in labels} == {f"a{t}" for t in range(TURNS)}  # on each turn's reply

    again = store.score(scorer, progress=False)
    assert again == {"units": 1000, "skipped": 1000, "scored": 0, "labelled": 0, "replaced": 0}
    assert len(scorer.calls) == 1000

    s = store.session("s042")
    s.update(dict(s.get("a5"), parts=[{"type": "text", "text": "a better answer"}]))
    changed = store.score(scorer, progress=False)
    assert changed == {"units": 1000, "skipped": 999, "scored": 1, "labelled": 1, "replaced": 1}
    assert scorer.calls[1000:] == [("s042", "a5")]
    now = store.labels(scorer="counting")
    assert len(now) == 1000 and len({x.fingerprint for x in now}) == 1000
    (relabelled,) = s.labels("a5", scorer="counting@1")
    assert relabelled.fingerprint not in {x.fingerprint for x in labels}

    # another version is another scorer: it scores everything again, beside the first's labels
    v2 = Counting(version=2)
    assert store.score(v2, sessions=["s001", "s002"], progress=False)["labelled"] == 20
    assert len(store.labels(scorer="counting")) == 1020 and len(store.labels(scorer="counting@2")) == 20
    # the SQL condition picks units of the view
    tools = Counting("tools")
    assert store.score(tools, where="tool_calls > 0", level="turn", progress=False)["labelled"] == 400
    assert {mid for _, mid in tools.calls} == {"a0", "a3", "a6", "a9"}


@pytest.mark.parametrize("kind", ENGINES)
def test_levels_put_the_label_where_the_unit_ends(kind, new_store):
    store = new_store(kind)
    build(store, sessions=2, turns=2)
    store.session("s000").append(msg("a1b", "another answer", "assistant"), parent_id="u1")
    seen: dict[str, list] = {}

    def spans(unit):
        seen.setdefault(unit.level, []).append(unit)
        return f"{unit.level}-{len(unit.messages)}"

    for level in ("message", "path", "session"):
        store.score(sk.scorers.scorer(spans, name=f"spans_{level}"), level=level, concurrency=1, progress=False)
    assert len(seen["message"]) == 9 and {u.target for u in seen["message"]} == {"message"}
    assert sorted((u.session_id, u.message_id) for u in seen["path"]) == [
        ("s000", "a1"),
        ("s000", "a1b"),
        ("s001", "a1"),
    ]
    assert {u.target for u in seen["path"] + seen["session"]} == {"branch"}
    assert sorted((u.session_id, u.message_id, len(u.messages)) for u in seen["session"]) == [
        ("s000", "a1b", 4),
        ("s001", "a1", 4),
    ]
    u = next(u for u in seen["message"] if (u.session_id, u.message_id) == ("s001", "u1"))
    assert [m["id"] for m in u.history] == ["u0", "a0"] and u.row["role"] == "user"
    assert [x.tag for x in store.labels(scorer="spans_path")] == ["path-4", "path-4", "path-4"]


def test_the_built_in_code_scorers(new_store):
    store = new_store("sqlite")
    s = store.session("s")
    s.append(msg("u1", "look it up"))
    s.append(
        {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {
                    "type": "tool-lookup",
                    "toolCallId": "c1",
                    "state": "output-error",
                    "input": {},
                    "errorText": "timeout",
                }
            ],
        }
    )
    s.append(msg("u2", "and now?"))
    s.append({"id": "a2", "role": "assistant", "parts": []})
    s.append(msg("u3", "please"))
    s.append(msg("a3b", "Here it is.", "assistant"))
    s.append(msg("a3", "I’m sorry, but I can’t share that.", "assistant"), parent_id="u3")  # the newer reply
    s.append(msg("u4", "thanks"))
    for fn in (sk.scorers.tool_error, sk.scorers.empty_reply, sk.scorers.regenerated, sk.scorers.refusal):
        store.score(fn, progress=False)
    got = sorted((x.message_id, x.tag, x.scorer, x.rationale) for x in store.labels())
    assert got == [
        ("a1", "tool-error", "tool_error@1", "lookup: timeout"),
        ("a2", "empty-reply", "empty_reply@1", "assistant message 'a2' has no text and calls no tool"),
        ("a3", "refusal", "refusal@1", "says \"i'm sorry, but i can't\""),
        ("a3", "regenerated", "regenerated@1", "the user message has two replies or more"),
        ("u4", "empty-reply", "empty_reply@1", "no assistant message answers"),
    ]
    with pytest.raises(ValueError, match="not single messages") as info:
        store.score(sk.scorers.regenerated, level="message", progress=False)
    assert "regenerated@1" in "".join(info.value.__notes__)


def test_bad_scorers_and_arguments_are_refused_and_an_error_keeps_what_was_done(new_store):
    store = new_store("sqlite")
    build(store, sessions=3, turns=2)
    with pytest.raises(ValueError, match="level is one of"):
        store.score(Counting(), level="word")
    with pytest.raises(ValueError, match="name"):
        store.score(lambda unit: "x")
    with pytest.raises(ValueError, match="concurrency"):
        store.score(Counting(), concurrency=0)
    with pytest.raises(TypeError, match="must be callable"):
        store.score("judge")

    @sk.scorers.scorer(name="wrong", version="2b")
    def wrong(unit):
        return 42

    with pytest.raises(TypeError, match="wrong@2b answered int"):
        store.score(wrong, progress=False)

    @sk.scorers.scorer(name="fails")
    def fails(unit):
        if unit.session_id == "s001":
            raise RuntimeError("no")
        return "ok"

    with pytest.raises(RuntimeError, match="no"):
        store.score(fails, concurrency=1, progress=False)
    assert {x.session_id for x in store.labels(scorer="fails")} == {"s000"}  # what was done before is kept
    assert store.labels(scorer="wrong") == [] and store.labels(scorer="counting") == []


def test_a_scorer_changing_its_unit_changes_no_fingerprint_nor_the_store(new_store):
    """The units of a session are read together and share its messages: the fingerprints
    are taken from the messages as stored, whatever a scorer does with the dicts it is handed
    (here two paths through the same first three messages)."""
    store = new_store("sqlite", memory=True)
    build(store, sessions=2, turns=2)
    store.session("s000").append(msg("a1b", "another answer", "assistant"), parent_id="u1")

    @sk.scorers.scorer(name="scribbler", version=1)
    def scribbler(unit):
        for m in (*unit.history, *unit.messages):
            m["parts"].append({"type": "text", "text": "scribbled"})
            m["metadata"] = {"seen": True}
        return "seen"

    first = store.score(scribbler, level="path", concurrency=1, progress=False)
    assert first == {"units": 3, "skipped": 0, "scored": 3, "labelled": 3, "replaced": 0}
    again = store.score(scribbler, level="path", progress=False)
    assert again == {"units": 3, "skipped": 3, "scored": 0, "labelled": 0, "replaced": 0}
    for leaf in ("a1", "a1b"):
        path = store.session("s000").get_history(leaf_id=leaf)
        assert len(path) == 4 and all(len(m["parts"]) <= 2 and "metadata" not in m for m in path)


# ---------------------------------------------------------------------------
# killed midway

CHILD = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    import sessionkit as sk

    target, calls, done = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    lock = threading.Lock()
    stuck = threading.Event()  # never set: the scorer hangs after its sixth answer

    @sk.scorers.scorer(name="slow", version=1)
    def slow(unit):
        with lock:
            with calls.open("a") as fh:
                fh.write(f"{unit.session_id} {unit.message_id}\\n")
            n = len(calls.read_text().splitlines())
        if n > 6:
            stuck.wait()
        return "seen"

    def progress(n, total):
        done.write_text(str(n))

    store = sk.open_store(target)
    store.score(slow, concurrency=2, progress=progress)
    """
)


@pytest.mark.kill
@pytest.mark.parametrize("kind", ENGINES)
def test_a_run_killed_midway_is_finished_by_the_next_without_asking_again(kind, tmp_path, request):
    target = _target(kind, request, tmp_path)
    with sk.open_store(target) as store:
        build(store, sessions=5, turns=4)
    calls, done = tmp_path / "calls.txt", tmp_path / "done.txt"
    child = subprocess.Popen([sys.executable, "-c", CHILD, target, str(calls), str(done)], stderr=subprocess.PIPE)
    try:

        def stuck_midway():
            if child.poll() is not None:
                return True
            answers = int(done.read_text() or 0) if done.exists() else 0
            return answers >= 4 and calls.exists() and len(calls.read_text().splitlines()) >= 7

        wait_until(stuck_midway, what="four answers stored and the scorer stuck on the seventh unit")
        assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    asked_before = calls.read_text().splitlines()
    store = sk.open_store(target)
    try:
        kept = {(x.session_id, x.message_id) for x in store.labels(scorer="slow@1")}
        assert len(kept) >= 4 and len(asked_before) >= 7

        rerun: list[tuple[str, str]] = []

        @sk.scorers.scorer(name="slow", version=1)
        def slow(unit):
            rerun.append((unit.session_id, unit.message_id))
            return "seen"

        counts = store.score(slow, concurrency=1, progress=False)
        assert counts["skipped"] == len(kept) and counts["scored"] == 20 - len(kept)
        assert not kept & set(rerun) and len(rerun) == len(set(rerun)) == 20 - len(kept)
        labels = store.labels(scorer="slow@1")
        assert len(labels) == 20 and len({(x.session_id, x.message_id) for x in labels}) == 20
    finally:
        store.close()
