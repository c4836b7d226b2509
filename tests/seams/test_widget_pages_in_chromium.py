"""The widgets' offline pages of every session of the every-fact store (seams/facts.py) render in
a real Chromium, offline, with no JavaScript error: the ids ``constructor`` and ``__proto__``
(names of JavaScript's own objects) and the hostile texts included."""

from __future__ import annotations

import pytest

import sessionkit as sk

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: starts chromium


@pytest.fixture(scope="module")
def facts(every_fact_store):
    """Built before Playwright starts (its loop would refuse the builder's asyncio.run)."""
    return every_fact_store("sqlite")


@pytest.fixture
def page(facts, browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800}, offline=True)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.errors = errors
    yield pg
    context.close()


def test_offline_pages_render_every_session_without_errors(facts, page, tmp_path):
    store, notes = facts
    opened = 0
    for sid in notes["sessions"]:
        session = store.session(sid)
        views = [sk.widgets.RunView(session)] if store.runs(sid) else []
        if session.nodes():
            views += [sk.widgets.BranchTree(session, collapse=False), sk.widgets.Transcript(session, mode="full")]
        for k, view in enumerate(views):
            path = view.to_html(tmp_path / f"{k}-{len(sid)}-{opened}.html")
            page.goto(path.as_uri())
            page.wait_for_selector("#sk-view[data-ready='1']")
            assert page.errors == [], (sid, type(view).__name__, page.errors)
            text = page.locator("#sk-view").inner_text()
            if isinstance(view, sk.widgets.RunView):
                for run in store.runs(sid):
                    assert page.locator(f'[data-run="{run.run_id}"]').count() >= 1 or run.run_id in text, run.run_id
            opened += 1
    # the tree of "tree" selects the message whose id is "constructor", and then "__proto__"
    tree = sk.widgets.BranchTree(store.session("tree"), collapse=False, selected_id="constructor")
    page.goto(tree.to_html(tmp_path / "selected.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'constructor'")
    assert "An id of Object.prototype." in page.locator(".sk-tree-panel").inner_text()
    assert page.errors == []
    assert opened >= 10
