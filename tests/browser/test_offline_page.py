"""Pages written by to_html() work in a browser with no kernel and no network."""

from __future__ import annotations

import nbhelpers
import pagechecks
import pytest

import sessionkit as sk
from sessionkit.widgets._source import outline_rows, tree_data

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: starts chromium


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1100, "height": 800}, offline=True)
    pg = context.new_page()
    pg.set_default_timeout(pagechecks.HANG_MS)
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
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    assert not any(r[0] == "node" and data.ids[r[1]] == "a2" for r in rows)  # a2 sits in the collapsed chain
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    scroller = page.locator(".sk-tree-scroll")
    scroller.click(position={"x": 150, "y": more * 22 + 11})  # expand the chain
    page.wait_for_function(
        f"() => document.querySelector('.sk-tree-view').dataset.rows === "
        f"String({len(outline_rows(data, expanded={data.index()['sys']}))})"
    )
    expanded = outline_rows(data, expanded={data.index()["sys"]})
    row = next(k for k, r in enumerate(expanded) if r[0] == "node" and data.ids[r[1]] == "a2")
    scroller.click(position={"x": 150, "y": row * 22 + 11})
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'a2'")
    panel = page.locator(".sk-tree-panel")
    panel.get_by_text("Let me check the weather first.").wait_for()
    assert "rain_days" in panel.inner_text()
    page.screenshot(path=str(screenshots / "offline-tree.png"))

    sk.widgets.Transcript(s, "a4").to_html(tmp_path / "chat.html")
    page.goto((tmp_path / "chat.html").as_uri())
    view = page.locator(".sk-transcript-view")
    view.wait_for()
    page.wait_for_function(
        "n => document.querySelector('.sk-transcript-view').dataset.entries === n",
        arg=str(len(s.get_history(leaf_id="a4"))),
    )
    page.locator("button[data-mode='full']").click()
    page.wait_for_function("() => document.querySelector('.sk-transcript-view').dataset.mode === 'full'")
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4", compacted=False)))
    page.get_by_text("Great. Where should we eat?").first.wait_for()

    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(nbhelpers.run_script()), tools=[nbhelpers.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    sk.widgets.RunView(result).to_html(tmp_path / "run.html")
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='completed']")
    assert page.locator(".skr-turn").count() == 2
    assert result.text in page.locator(".sk-run-view").inner_text()
    assert not page.errors, page.errors


def _click_row(page, data, rows, mid, *, shift=False):
    row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == mid)
    page.locator(".sk-tree-scroll").click(
        position={"x": 150, "y": row * 22 + 11}, modifiers=["Shift"] if shift else None
    )


def _diff_cells(page) -> dict[str, list[str]]:
    cells = page.eval_on_selector_all(".sk-diff tr", "rows => rows.map(r => [...r.children].map(c => c.textContent))")
    return {r[0]: r[1:] for r in cells if r and r[0]}


def test_offline_tree_recomputes_the_branch_diff_and_survives_html_comments(page, tmp_path, screenshots):
    from sessionkit.widgets._static import fmt_cost

    store = sk.open_store()
    s = nbhelpers.forked_session(store)
    tree = sk.widgets.BranchTree(s, collapse=False, selected_id="a1", compare_id="a2")
    tree.to_html(tmp_path / "forked.html")
    page.goto((tmp_path / "forked.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    assert not page.errors, page.errors  # the payload with <!-- and </script> parsed
    toolbar = page.locator(".sk-tree-view .sk-toolbar").inner_text()
    assert "1 branch point ·" in toolbar and "2 leaves" in toolbar and "0 compactions" in toolbar
    data = tree_data(s)
    rows = outline_rows(data, collapse=False)
    # the exported comparison first: a1 against a2 (which has no usage at all)
    cells = _diff_cells(page)
    assert cells["first message"][1].startswith("An imported answer <!-- with a comment")
    assert cells["usage in/out"] == ["100/10", "unknown"]
    # click a1, shift-click a4: the panel compares a1 and a4 now, as the kernel would
    _click_row(page, data, rows, "a1")
    _click_row(page, data, rows, "a4", shift=True)
    expected = tree.compare("a1", "a4")
    page.wait_for_function(
        "n => [...document.querySelectorAll('.sk-diff tr')].some(r => "
        "r.textContent.startsWith('messages') && r.children[2].textContent === n)",
        arg=str(expected["b"]["messages"]),
    )
    cells = _diff_cells(page)
    assert cells["messages"] == [str(expected["a"]["messages"]), str(expected["b"]["messages"])]
    assert cells["tool calls"] == [str(expected["a"]["tool_calls"]), str(expected["b"]["tool_calls"])]
    b = expected["b"]
    assert cells["cost"] == [
        fmt_cost(expected["a"]["cost_usd"]),
        fmt_cost(b["cost_known_usd"], unknown=b["cost_unknown"], total=b["cost_known"] + b["cost_unknown"]),
    ]
    assert cells["cost"][1] == "≥ $0.0001 (2 of 3 unknown)"
    assert cells["usage in/out"][1] == "≥ 200/20 (1 of 3 unknown)"
    page.screenshot(path=str(screenshots / "offline-tree-diff.png"))
    # another comparison: the panel follows again
    _click_row(page, data, rows, "a3", shift=True)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.sk-diff tr')]"
        ".some(r => r.textContent.startsWith('messages') && r.children[2].textContent === '3')"
    )
    assert _diff_cells(page)["cost"][1] == "unknown"
    assert not page.errors, page.errors


def test_offline_run_view_opens_at_the_start_and_pads_the_interruption(page, tmp_path, screenshots):
    store = sk.open_store()
    sk.widgets.RunView(nbhelpers.interrupted_runs(store), height=240).to_html(tmp_path / "runs.html")
    page.goto((tmp_path / "runs.html").as_uri())
    view = page.locator(".sk-run-view")
    view.wait_for()
    pagechecks.check_run_view_start_and_interruption(page, view)
    page.locator(".skr-run[data-run='cut'] > .sk-err").screenshot(
        path=str(screenshots / "offline-run-view-interrupted.png")
    )
    assert "7 runs" in page.locator(".sk-run-view .sk-toolbar").inner_text()
    assert not page.errors, page.errors


def test_tree_rows_are_text_in_the_page_and_follow_the_keyboard(page, tmp_path, screenshots):
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    tree = sk.widgets.BranchTree(s)
    tree.to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    pagechecks.check_rows_are_text_and_follow_the_keyboard(page, page.locator(".sk-tree-view"), s, data, rows)
    page.screenshot(path=str(screenshots / "offline-tree-dom-rows.png"))
    assert not page.errors, page.errors


def test_offline_ten_thousand_message_tree_scrolls_by_the_rows_in_view_and_is_found(page, tmp_path):
    store = sk.open_store()
    s = nbhelpers.big_session(store)
    sk.widgets.BranchTree(s, height=400).to_html(tmp_path / "big.html")
    page.goto((tmp_path / "big.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']")
    data = tree_data(s)
    rows = outline_rows(data)
    view = page.locator(".sk-tree-view")
    pagechecks.check_big_tree_stays_bounded_and_is_found(page, view, s, data, rows)
    assert not page.errors, page.errors
