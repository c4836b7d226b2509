"""Pages written by to_html() work in a browser with no kernel and no network."""

from __future__ import annotations

import pytest

import nbhelpers
import sessionkit as sk
from sessionkit.widgets._source import outline_rows, tree_data

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # slow: starts chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800}, offline=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.errors = errors
    yield pg
    context.close()


def test_to_html_pages_are_interactive_offline(page, tmp_path, screenshots):
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    tree = sk.widgets.BranchTree(s)
    tree.to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']", timeout=10_000)
    data = tree_data(s)
    rows = outline_rows(data)
    assert not any(r[0] == "node" and data.ids[r[1]] == "a2" for r in rows)  # a2 sits in the collapsed chain
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    scroller = page.locator(".sk-tree-scroll")
    scroller.click(position={"x": 150, "y": more * 22 + 11})  # expand the chain
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.rows === String(%d)"
                           % len(outline_rows(data, expanded={data.index()["sys"]})), timeout=5_000)
    expanded = outline_rows(data, expanded={data.index()["sys"]})
    row = next(k for k, r in enumerate(expanded) if r[0] == "node" and data.ids[r[1]] == "a2")
    scroller.click(position={"x": 150, "y": row * 22 + 11})
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'a2'", timeout=5_000)
    panel = page.locator(".sk-tree-panel")
    panel.get_by_text("Let me check the weather first.").wait_for(timeout=5_000)
    assert "rain_days" in panel.inner_text()
    page.screenshot(path=str(screenshots / "offline-tree.png"))

    sk.widgets.Transcript(s, "a4").to_html(tmp_path / "chat.html")
    page.goto((tmp_path / "chat.html").as_uri())
    view = page.locator(".sk-transcript-view")
    view.wait_for(timeout=10_000)
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4")))
    page.locator("button[data-mode='full']").click()
    page.wait_for_function("() => document.querySelector('.sk-transcript-view').dataset.mode === 'full'", timeout=5_000)
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4", compacted=False)))
    page.get_by_text("Great. Where should we eat?").first.wait_for(timeout=5_000)

    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(nbhelpers.run_script()), tools=[nbhelpers.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    sk.widgets.RunView(result).to_html(tmp_path / "run.html")
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='completed']", timeout=10_000)
    assert page.locator(".skr-turn").count() == 2
    assert result.text in page.locator(".sk-run-view").inner_text()
    assert not page.errors, page.errors
