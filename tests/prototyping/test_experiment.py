"""experiment(): every item of a dataset re-asked under each variant, the replies scored, the
experiment read back in SQL on every engine and through every export, and resumed after a
SIGKILL without asking an item/variant twice."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import pytest
from helpers import wait_until

import sessionkit as sk
from sessionkit.prototyping import EXPERIMENT_COLUMNS, experiment
from sessionkit.testing import ScriptedModel

QUESTIONS = ["What is 2 + 3?", "Name a colour.", "Say hello."]


def _dataset(store, n=3):
    """``n`` sessions of one turn each, frozen as the dataset ``qa``."""
    for k in range(n):
        store.session(f"s{k}").append_many(
            [
                {"id": "u", "role": "user", "parts": [{"type": "text", "text": QUESTIONS[k]}]},
                {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": f"Original {k}."}]},
            ],
            parent_id=None,
        )
    return store.dataset("qa", query="SELECT session_id, reply_id AS message_id FROM turns ORDER BY session_id")


def _say(prefix, log=None):
    """A scripted reply: the prefix and the question asked (written to ``log`` when given)."""

    def reply(messages):
        question = [m for m in messages if m["role"] == "user"][-1]["content"]
        if log is not None:
            with open(log, "a") as fh:
                fh.write(json.dumps([prefix, question]) + "\n")
        return {"text": f"{prefix} {question}", "usage": {"in": 7, "out": len(prefix), "cost_usd": 0.001}}

    return reply


@sk.scorers.scorer(name="length")
def length(unit):
    return sk.Score("scored", rating=float(len(sk.parts.text_of(unit.reply, ""))))


def _variants(n=3):
    return {
        "base": sk.Agent("a", "Be brief.", ScriptedModel([_say("B")] * n)),
        "long": sk.Agent("a", "Be long.", ScriptedModel([_say("LONGER")] * n)),
    }


def _idle():
    """Variants whose models would fail if asked anything."""
    return {"base": sk.Agent("a", "", ScriptedModel([])), "long": sk.Agent("a", "", ScriptedModel([]))}


def test_an_experiment_asks_each_item_under_each_variant_and_scores_the_replies(new_store):
    store = new_store("sqlite", memory=True)
    info = _dataset(store)
    heard: list[dict] = []
    result = asyncio.run(experiment(info, _variants(), [length], name="try", store=store, on_row=heard.append))

    assert (result.dataset, result.version, result.baseline, result.scorers) == ("qa", 1, "base", ["length"])
    assert [(r["item"], r["variant"], r["status"]) for r in result.rows] == [
        (k, v, "completed") for k in range(3) for v in ("base", "long")
    ]
    for row in result.rows:
        prefix = "B" if row["variant"] == "base" else "LONGER"
        assert row["reply"] == f"{prefix} {QUESTIONS[row['item']]}" and row["prompt"] == QUESTIONS[row["item"]]
        assert row["scores"] == {"length": float(len(row["reply"]))}
        assert (row["input_tokens"], row["output_tokens"], row["cost_usd"]) == (7, len(prefix), 0.001)
        # a sibling branch beside the original reply, its run labelled with the experiment
        session = store.session(row["session_id"])
        user, nodes = session.get(row["user_id"]), {n.id: n.parent_id for n in session.nodes()}
        assert nodes[row["user_id"]] is None and nodes[row["reply_id"]] == row["user_id"]  # beside u
        labels = user["metadata"]["labels"]
        assert (labels["experiment"], labels["dataset"], labels["item"], labels["variant"]) == (
            "try",
            "qa",
            row["item"],
            row["variant"],
        )
        label = store.labels(session_id=row["session_id"], message_id=row["reply_id"])[0]
        assert (label.scorer, label.source, label.rating) == ("length@1", "code", row["scores"]["length"])
    # each row was heard waiting, running, replied and scored
    assert {h["status"] for h in heard} == {"waiting", "running", "completed"}
    assert [h for h in heard if h["scores"]][-6:] and len(heard) == 6 * 4
    frame = result.to_pandas()
    assert list(frame.columns) == EXPERIMENT_COLUMNS and len(frame) == 6
    summary = result.summary().set_index("variant")
    assert summary.loc["long", "length"] - summary.loc["base", "length"] == pytest.approx(len("LONGER") - len("B"))

    # again under the same name: nothing is asked (the models have no reply), the same table
    again = asyncio.run(experiment("qa", _idle(), [length], name="try", store=store))
    assert all(r["resumed"] for r in again.rows)
    keep = ["item", "variant", "reply", "scores", "reply_id", "run_id", "output_tokens"]
    assert [{k: r[k] for k in keep} for r in again.rows] == [{k: r[k] for k in keep} for r in result.rows]
    assert len(store.labels(scorer="length@1")) == 6  # scored once


def test_a_failing_run_is_a_row_and_a_failing_scorer_stops_with_the_replies_kept(new_store):
    store = new_store("sqlite", memory=True)
    _dataset(store)
    variants = {
        "base": sk.Agent("a", "", ScriptedModel([_say("B")] * 3)),
        "broken": sk.Agent("a", "", ScriptedModel([{"error": RuntimeError("provider down")}] * 3)),
    }
    result = asyncio.run(experiment("qa", variants, [], name="fails", store=store, concurrency=1))
    assert [r["status"] for r in result.rows] == ["completed", "failed"] * 3
    assert all("provider down" in r["error"] for r in result.rows if r["variant"] == "broken")

    @sk.scorers.scorer(name="boom")
    def boom(unit):
        raise ZeroDivisionError("no score")

    with pytest.raises(sk.ScorerFailed, match="boom@1") as caught:
        asyncio.run(experiment("qa", _variants(), [boom], name="scored", store=store))
    assert isinstance(caught.value.__cause__, ZeroDivisionError)
    # the replies asked before the scorer failed stay: a rerun asks only the others and scores them all
    stored = [n for k in range(3) for n in store.session(f"s{k}").nodes() if n.id.startswith("scored:")]
    assert stored
    base, long = ScriptedModel([_say("B")] * 3), ScriptedModel([_say("LONGER")] * 3)
    again = asyncio.run(
        experiment(
            "qa",
            {"base": sk.Agent("a", "", base), "long": sk.Agent("a", "", long)},
            [length],
            name="scored",
            store=store,
        )
    )
    assert len(base.calls) + len(long.calls) == 6 - len(stored)
    assert sum(r["resumed"] for r in again.rows) == len(stored)
    assert all(r["scores"]["length"] == len(r["reply"]) for r in again.rows)


def test_bad_input_is_refused_before_anything_runs(new_store):
    store = new_store("sqlite", memory=True)
    _dataset(store)
    with pytest.raises(sk.DatasetNotFound, match="'nope'.*'qa'"):
        asyncio.run(experiment("nope", _variants(), name="x", store=store))
    with pytest.raises(sk.UsageError, match="variants"):
        asyncio.run(experiment("qa", {}, name="x", store=store))
    with pytest.raises(sk.UsageError, match="baseline"):
        asyncio.run(experiment("qa", _variants(), name="x", store=store, baseline="other"))
    with pytest.raises(ValueError, match="name"):
        asyncio.run(experiment("qa", _variants(), name="a:b", store=store))
    with pytest.raises(TypeError, match="scorer"):
        asyncio.run(experiment("qa", _variants(), ["not callable"], name="x", store=store))
    with pytest.raises(sk.UsageError, match="store"):
        asyncio.run(experiment("qa", _variants(), name="x", store="store.db"))
    assert not [n for n in store.session("s0").nodes() if n.id.startswith("x:")]
    # the same name over another dataset version is refused, naming both
    asyncio.run(experiment("qa", _variants(), name="v", store=store))
    store.dataset("qa", units=[("s0", "a")])
    with pytest.raises(sk.UsageError, match="version 1"):
        asyncio.run(experiment("qa", _idle(), name="v", store=store))


def test_the_experiment_view_shows_each_variant_against_the_baseline(new_store):
    pytest.importorskip("anywidget")
    store = new_store("sqlite", memory=True)
    _dataset(store)
    live = sk.widgets.ExperimentView(interval=0)
    result = asyncio.run(experiment("qa", _variants(), [length], name="try", store=store, on_row=live.on_row))
    done = sk.widgets.ExperimentView(result)
    for view in (live, done):
        assert view.baseline == "base" and len(view.items) == 3
        item = view.items[1]
        cells = {c["variant"]: c for c in item["cells"]}
        assert item["prompt"] == QUESTIONS[1]
        assert cells["long"]["scores"] == [
            {"name": "length", "value": float(len(result.row(1, "long")["reply"])), "delta": len("LONGER") - len("B")}
        ]
        assert cells["base"]["scores"][0]["delta"] is None
        assert cells["long"]["href"] == f"#/s/s1/m/{result.row(1, 'long')['reply_id']}"
    assert live.batches > 3  # it filled as the rows came
    html = done.snapshot_html()
    assert html.count('data-status="completed"') == 6 and html.count("(+5)") == 3


# -- the store's part: every engine, reopened and through every export -----------------------

COLUMNS = (
    "experiment, dataset, version, item, variant, session_id, item_message_id, run_id, status, reply_id, reply,"
    " tokens_in, tokens_out, cost_usd, latency_s, model, settings, scorer, tag, rating"
)
QUERY = f"SELECT {COLUMNS} FROM experiments ORDER BY experiment, item, variant, scorer"


def _target(engine, request, tmp_path, name="e"):
    if engine == "postgresql":
        return request.getfixturevalue("pg_store_url")()
    return str(tmp_path / (f"{name}.db" if engine == "sqlite" else f"{name}.duckdb"))


def _rows(store):
    return store.sql_arrow(QUERY).to_pylist()


@pytest.mark.slow  # slow: over a second (`sessionkit copy` in a process of its own); the fast suite leaves it out
def test_an_experiment_survives_reopening_and_every_export(engine, request, tmp_path):
    target = _target(engine, request, tmp_path)
    with sk.open_store(target) as store:
        _dataset(store)
        asyncio.run(experiment("qa", _variants(), [length], name="one", store=store))
        asyncio.run(experiment("qa", _variants(), [], name="two", store=store))
        before = _rows(store)
        # two experiments on the same dataset, compared in SQL
        diff = store.sql(
            """SELECT a.item, a.variant, a.reply = b.reply AS same FROM experiments a
               JOIN experiments b USING (dataset, version, item, variant)
               WHERE a.experiment = 'one' AND b.experiment = 'two' ORDER BY a.item, a.variant"""
        )
        assert len(diff) == 6 and diff["same"].all()
    assert len(before) == 12 and {r["scorer"] for r in before if r["experiment"] == "one"} == {"length@1"}
    assert all(r["status"] == "completed" and r["item_message_id"] == "a" for r in before)
    assert all(r["rating"] == len(r["reply"]) for r in before if r["experiment"] == "one")

    with sk.open_store(target) as store:
        assert _rows(store) == before
        sk.io.export_jsonl(store, tmp_path / "e.jsonl", progress=False)
        sk.io.export_parquet(store, tmp_path / "parquet")
    with sk.open_store() as back:
        sk.io.import_jsonl(back, tmp_path / "e.jsonl", progress=False)
        assert _rows(back) == before
    with sk.open_store() as back:
        sk.io.import_parquet(back, tmp_path / "parquet", progress=False)
        assert _rows(back) == before
    copied = tmp_path / "copied.db"
    done = subprocess.run(
        [sys.executable, "-m", "sessionkit", "copy", target, str(copied)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    with sk.open_store(copied) as back:
        assert _rows(back) == before
        # resumed from the copy: nothing asked again
        again = asyncio.run(experiment("qa", _idle(), [length], name="one", store=back))
        assert all(r["resumed"] and r["status"] == "completed" for r in again.rows)


CHILD = r"""
import asyncio, json, sys
import sessionkit as sk
from sessionkit.prototyping import experiment
from sessionkit.testing import ScriptedModel

target, log = sys.argv[1], sys.argv[2]

def say(prefix):
    def reply(messages):
        question = [m for m in messages if m["role"] == "user"][-1]["content"]
        with open(log, "a") as fh:
            fh.write(json.dumps([prefix, question]) + "\n")
        if prefix == "B" and question == "Say hello.":  # never answers: the test kills this process meanwhile
            return {"text": "never", "delay": 3600}
        return {"text": prefix + " " + question}
    return reply

store = sk.open_store(target)
variants = {"base": sk.Agent("a", "", ScriptedModel([say("B")] * 3)),
            "long": sk.Agent("a", "", ScriptedModel([say("LONGER")] * 3))}
asyncio.run(experiment("qa", variants, [], name="killed", store=store, progress=False))
"""


@pytest.mark.kill
@pytest.mark.slow  # slow: over a second (a process started and killed); the fast suite leaves it out
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_an_experiment_killed_midway_resumes_without_asking_a_pair_twice(tmp_path):
    target = str(tmp_path / "k.db")
    with sk.open_store(target) as store:
        _dataset(store)
    log = tmp_path / "asked.jsonl"
    log.touch()
    child = subprocess.Popen([sys.executable, "-c", CHILD, target, str(log)], stderr=subprocess.PIPE, text=True)
    try:
        with sk.open_store(target) as watch:

            def five_stored() -> bool:
                if child.poll() is not None:
                    return True
                ids = [n.id for k in range(3) for n in watch.session(f"s{k}").nodes() if n.role == "assistant"]
                # the originals and five replies, and the sixth pair asked (its model never answers)
                return len(ids) == 3 + 5 and len(log.read_text().splitlines()) == 6

            wait_until(five_stored, timeout=120)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(log.read_text().splitlines()) == 6  # every pair was asked once

    with sk.open_store(target) as store:
        base, long = ScriptedModel([_say("B")] * 3), ScriptedModel([_say("LONGER")] * 3)
        variants = {"base": sk.Agent("a", "", base), "long": sk.Agent("a", "", long)}
        result = asyncio.run(experiment("qa", variants, [length], name="killed", store=store, progress=False))
        asked = [[m for m in call if m["role"] == "user"][-1]["content"] for call in base.calls + long.calls]
        assert asked == ["Say hello."]  # only the pair that never answered
        assert [(r["item"], r["variant"]) for r in result.rows if not r["resumed"]] == [(2, "base")]
        assert all(r["status"] == "completed" and r["scores"]["length"] == len(r["reply"]) for r in result.rows)
        nodes = [n for k in range(3) for n in store.session(f"s{k}").nodes()]
        users = {n.id for n in nodes if n.id.startswith("killed:")}
        assert len(users) == 6 and len([n for n in nodes if n.parent_id in users]) == 6  # one reply each
        rows = store.sql("SELECT item, variant, status FROM experiments WHERE experiment = 'killed'")
        assert len(rows) == 6 and (rows["status"] == "completed").all()


def test_a_run_whose_reply_is_stored_but_not_its_end_is_completed_when_resumed(new_store):
    """The process that ran a pair may stop between storing its reply and recording the run's
    end: resuming asks nothing again and records that run completed."""
    store = new_store("sqlite", memory=True)
    _dataset(store)
    first = asyncio.run(experiment("qa", _variants(), [length], name="cut", store=store, progress=False))
    cut = next(r for r in first.rows if (r["item"], r["variant"]) == (1, "long"))
    store.run_log.reopen(cut["run_id"])  # as the stopped process left it: running, its reply stored
    assert store.sql("SELECT count(*) AS n FROM experiments WHERE status = 'running'")["n"][0] == 1

    again = asyncio.run(experiment("qa", _idle(), [length], name="cut", store=store, progress=False))
    assert all(r["resumed"] and r["status"] == "completed" for r in again.rows)
    rows = store.sql("SELECT item, variant, status, reply FROM experiments WHERE experiment = 'cut'")
    assert len(rows) == 6 and (rows["status"] == "completed").all()
    assert rows.set_index(["item", "variant"]).loc[(1, "long"), "reply"] == cut["reply"]


def test_an_experiment_runs_over_an_async_store():
    async def main():
        store = await sk.aio.open_store()
        try:
            await store.session("s0").append_many(
                [
                    {"id": "u", "role": "user", "parts": [{"type": "text", "text": QUESTIONS[0]}]},
                    {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "Original 0."}]},
                ],
                parent_id=None,
            )
            await store.dataset("qa", units=[("s0", "a")])
            result = await experiment("qa", _variants(1), [length], name="aio", store=store)
            labels = await store.labels(scorer="length@1")
            return result, labels
        finally:
            await store.close()

    result, labels = asyncio.run(main())
    assert [(r["variant"], r["reply"]) for r in result.rows] == [
        ("base", "B " + QUESTIONS[0]),
        ("long", "LONGER " + QUESTIONS[0]),
    ]
    assert sorted(label.message_id for label in labels) == sorted(r["reply_id"] for r in result.rows)
