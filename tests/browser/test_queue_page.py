"""Annotation queues in the served viewer (``sessionkit view --write --annotator``,
docs/annotation.md), worked in Chromium by two annotators at once on every engine: every
unit ends labelled ``per_unit`` times, and the page's progress and agreement are what the
store's own SQL counts."""

from __future__ import annotations

import sys

import pytest
from servers import launcher
from test_viewer import Watched, _env

import sessionkit as sk

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: a server process and chromium

ANA = "ana-token-0123456789abcdef"
BO = "bo-token-0123456789abcdefgh"
UNITS = 4


def _ready(page) -> dict:
    page.wait_for_selector(".skq[data-ready='1']:not([data-loading])")
    return page.evaluate(
        "() => { const r = document.querySelector('.skq'); const u = r.querySelector('.skq-unit');"
        " return {finished: r.dataset.finished === '1', n: u.dataset.n === undefined ? null : Number(u.dataset.n)}; }"
    )


def test_two_annotators_work_one_queue_at_once(engine, new_store, browser, tmp_path):
    store = new_store(engine)
    with store.transaction():
        for i in range(UNITS):
            s = store.session(f"s{i}")
            s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": f"what is {i} + {i}?"}]})
            s.append({"id": "r", "role": "assistant", "parts": [{"type": "text", "text": f"{2 * i}"}]})
    store.queue(
        "check",
        units=[(f"s{i}", "r") for i in range(UNITS)],
        rubric={"tags": ["right", "wrong"], "instructions": "Is the sum right?"},
        annotators=["ana", "bo"],
        per_unit=2,
    )
    target = str(store.path)
    store.close()  # the viewer's process has the store to itself (a DuckDB file takes one)
    argv = [sys.executable, "-m", "sessionkit", "view", target, "--port", "0", "--write"]
    argv += ["--annotator", f"ana={ANA}", "--annotator", f"bo={BO}"]
    with launcher(argv, cwd=tmp_path, env=_env(), pattern=r" at (http://127\.0\.0\.1:\d+/)\S*", timeout=120) as run:
        base = run.match.group(1)
        people = {"ana": Watched(browser), "bo": Watched(browser)}
        for who, token in (("ana", ANA), ("bo", BO)):
            people[who].page.goto(f"{base}?token={token}#/q/check")
        # both pages submit before either waits: their claims and submissions interleave
        working = dict(people)
        while working:
            shown = {who: _ready(w.page) for who, w in working.items()}
            for who, now in shown.items():
                if now["finished"]:
                    del working[who]
                    continue
                page = working[who].page
                tag = "wrong" if who == "bo" and now["n"] % 2 else "right"
                page.click(f".skq-tag[data-tag='{tag}']")
                page.click(".skq-submit")
            for who, now in shown.items():
                if who in working:
                    working[who].page.wait_for_function(
                        "n => { const r = document.querySelector('.skq');"
                        " return !r.dataset.loading && (r.dataset.finished === '1'"
                        " || r.querySelector('.skq-unit').dataset.n !== String(n)); }",
                        arg=now["n"],
                    )
        page = people["ana"].page
        page.reload()
        _ready(page)
        page.wait_for_selector(".skq-agreement")
        done = {
            row.get_attribute("data-annotator"): int(row.query_selector(".skq-done").inner_text())
            for row in page.query_selector_all(".skq-progress tr[data-annotator]")
        }
        pair = page.query_selector(".skq-agreement tr[data-pair='ana|bo']")
        shown_n = int(pair.query_selector(".skq-n").inner_text())
        shown_observed = float(pair.query_selector(".skq-observed").get_attribute("data-value"))
        for w in people.values():
            assert w.errors == [] and w.foreign(base) == []
    with sk.open_store(target) as again:
        per_unit = again.sql(
            "SELECT session_id, count(*) AS n, count(DISTINCT author) AS people FROM labels"
            " WHERE source = 'human' GROUP BY 1"
        )
        assert len(per_unit) == UNITS and set(per_unit["n"]) == {2} and set(per_unit["people"]) == {2}
        by_author = again.sql("SELECT author, count(*) AS n FROM labels GROUP BY author")
        assert done == dict(zip(by_author["author"], map(int, by_author["n"])))
        same = again.sql(
            "SELECT count(*) AS n, avg(CASE WHEN a.tag = b.tag THEN 1.0 ELSE 0.0 END) AS observed FROM labels a"
            " JOIN labels b ON a.session_id = b.session_id AND a.message_id = b.message_id"
            " WHERE a.author = 'ana' AND b.author = 'bo'"
        )
        assert (shown_n, shown_observed) == (int(same["n"][0]), pytest.approx(float(same["observed"][0])))
        assert again.queue_progress("check").complete == UNITS
