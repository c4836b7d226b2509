"""The store viewer (``sessionkit view``) on the every-fact store (seams/facts.py), served by the
real command on 127.0.0.1 and written as a bundle opened from file://, in Chromium: every
session listed, each opens, its labels and its runs' timeline shown, no JavaScript error, and
nothing fetched from elsewhere. Expected values come from the library's reads."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import quote

import pytest
from servers import launcher

from sessionkit.widgets.viewer import write_bundle

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: a server process and chromium


@pytest.fixture(scope="module")
def facts(every_fact_store):
    """Built before Playwright starts (its loop would refuse the builder's asyncio.run)."""
    return every_fact_store("sqlite")


@pytest.fixture(scope="module", params=["served", "bundle"])
def where(request, facts, tmp_path_factory):
    """``(address of the viewer, what its requests may start with, the sessions it holds)``."""
    store, notes = facts
    if request.param == "bundle":
        folder = write_bundle(store, tmp_path_factory.mktemp("bundle") / "bundle")  # the whole store
        yield (folder / "index.html").as_uri(), "file://", notes["sessions"]
        return
    env = {k: v for k, v in os.environ.items() if k != "SESSIONKIT_TOKEN"}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_OFFLINE_MODE="true", PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "sessionkit", "view", str(store.path), "--port", "0"]
    with launcher(
        argv, cwd=Path(store.path).parent, env=env, pattern=r" at (http://127\.0\.0\.1:\d+/\S*)", timeout=120
    ) as run:
        yield run.match.group(1), "http://127.0.0.1:", notes["sessions"]


def test_viewer_lists_and_opens_every_session_with_its_labels_and_runs(facts, where, browser):
    store, notes = facts
    address, allowed, sessions = where
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    urls: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(address)
        page.wait_for_selector(".skv-sessions[data-rows]:not([data-loading])")
        listed = page.eval_on_selector_all(".skv-table tbody tr", "rows => rows.map(r => r.dataset.session)")
        assert sorted(listed) == sorted(sessions)
        assert {info.id for info in store.list_sessions()} <= set(listed)
        base = address.split("#")[0]
        for sid in sessions:
            page.goto(base + "#/s/" + quote(sid, safe=""))
            page.wait_for_selector(".skv-session[data-ready='1']")
            page.wait_for_function(
                "sid => document.querySelector('.skv-session')?.dataset.session === sid "
                "|| document.querySelector('.skv-title')?.innerText.includes(sid)",
                arg=sid,
            )
            view = page.locator(".skv-session")
            if store.session(sid).nodes():
                latest = store.session(sid).latest_leaf()["id"]
                page.wait_for_selector(f".sk-tree-view[data-selected='{latest}']")
            for label in store.labels(session_id=sid):  # opened at the labelled message
                page.goto(base + "#/s/" + quote(sid, safe="") + "/m/" + quote(label.message_id, safe=""))
                page.wait_for_selector(f".sk-tree-view[data-selected='{label.message_id}']")
                page.wait_for_selector(f".sk-transcript-view .sk-msg[data-id='{label.message_id}']:not(.sk-loading)")
                assert label.tag in view.inner_text(), (sid, label)
            runs = store.runs(sid)
            if runs:
                page.wait_for_selector(".skv-session .sk-run-view")
                assert page.locator(".skv-session .sk-run-view .skr-turn").count() >= 1, sid
            assert errors == [], (sid, errors)
        assert [u for u in urls if not u.startswith((allowed, "blob:", "data:"))] == []
    finally:
        context.close()


def test_viewer_opens_a_session_of_run_events_alone(facts, where, browser):
    """An empty transcript beside the session's run events, whole-store bundle included."""
    store, _ = facts
    address, _, held = where
    events = store.events("events-only")
    assert "events-only" in held and events and not store.session("events-only").nodes()
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(address.split("#")[0] + "#/s/events-only")
        page.wait_for_selector(".skv-session[data-ready='1']")
        assert page.locator(".skv-session").get_attribute("data-session") in (None, "events-only")
        assert page.locator(".skv-session .sk-transcript-view .sk-msg").count() == 0
        page.wait_for_selector(".skv-session .sk-run-view .skr-run")
        assert "events outside any run" in page.locator(".skv-session .sk-run-view").inner_text()
        assert errors == []
    finally:
        context.close()


def test_a_bundle_of_a_session_of_run_events_alone(facts, tmp_path):
    """(A bundle of the whole store, that session included, is the ``where`` fixture's.)"""
    store, _ = facts
    alone = write_bundle(store, tmp_path / "alone", session_ids=["events-only"])
    (one,) = [p for p in (alone / "data").iterdir() if re.fullmatch(r"s\d+\.js", p.name)]
    assert '\\"kind\\":\\"note\\"' in one.read_text(encoding="utf-8")
