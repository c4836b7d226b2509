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
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']", timeout=30_000)
    data = tree_data(s)
    rows = outline_rows(data)
    assert not any(r[0] == "node" and data.ids[r[1]] == "a2" for r in rows)  # a2 sits in the collapsed chain
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    scroller = page.locator(".sk-tree-scroll")
    scroller.click(position={"x": 150, "y": more * 22 + 11})  # expand the chain
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.rows === String(%d)"
                           % len(outline_rows(data, expanded={data.index()["sys"]})), timeout=30_000)
    expanded = outline_rows(data, expanded={data.index()["sys"]})
    row = next(k for k, r in enumerate(expanded) if r[0] == "node" and data.ids[r[1]] == "a2")
    scroller.click(position={"x": 150, "y": row * 22 + 11})
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'a2'", timeout=30_000)
    panel = page.locator(".sk-tree-panel")
    panel.get_by_text("Let me check the weather first.").wait_for(timeout=30_000)
    assert "rain_days" in panel.inner_text()
    page.screenshot(path=str(screenshots / "offline-tree.png"))

    sk.widgets.Transcript(s, "a4").to_html(tmp_path / "chat.html")
    page.goto((tmp_path / "chat.html").as_uri())
    view = page.locator(".sk-transcript-view")
    view.wait_for(timeout=30_000)
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4")))
    page.locator("button[data-mode='full']").click()
    page.wait_for_function("() => document.querySelector('.sk-transcript-view').dataset.mode === 'full'", timeout=30_000)
    assert view.get_attribute("data-entries") == str(len(s.get_history(leaf_id="a4", compacted=False)))
    page.get_by_text("Great. Where should we eat?").first.wait_for(timeout=30_000)

    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(nbhelpers.run_script()), tools=[nbhelpers.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    sk.widgets.RunView(result).to_html(tmp_path / "run.html")
    page.goto((tmp_path / "run.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='completed']", timeout=30_000)
    assert page.locator(".skr-turn").count() == 2
    assert result.text in page.locator(".sk-run-view").inner_text()
    assert not page.errors, page.errors


def _text(mid, role, body, **extra):
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": body}], **extra}


def _usage(cost):
    return {"metadata": {"usage": {"in": 100, "out": 10, "cost_usd": cost, "model": "m"}}}


def _forked(store):
    """u1 -> a1 (priced) | a2 (no usage) -> u2 -> a3 (no price) -> u3 -> a4 (priced); markup in texts."""
    s = store.session("forked")
    s.append(_text("u1", "user", "What does <!-- this --> do before </script>?"))
    s.append(_text("a1", "assistant", "It opens an HTML comment.", **_usage(0.0002)), parent_id="u1")
    s.append(_text("a2", "assistant", "An imported answer <!-- with a comment", ), parent_id="u1")
    s.append(_text("u2", "user", "More"), parent_id="a2")
    s.append(_text("a3", "assistant", "From an unpriced model", **_usage(None)), parent_id="u2")
    s.append(_text("u3", "user", "And?"), parent_id="a3")
    s.append(_text("a4", "assistant", "Priced again", **_usage(0.0001)), parent_id="u3")
    return s


def _click_row(page, data, rows, mid, *, shift=False):
    row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == mid)
    page.locator(".sk-tree-scroll").click(position={"x": 150, "y": row * 22 + 11},
                                          modifiers=["Shift"] if shift else None)


def _diff_cells(page) -> dict[str, list[str]]:
    cells = page.eval_on_selector_all(
        ".sk-diff tr", "rows => rows.map(r => [...r.children].map(c => c.textContent))")
    return {r[0]: r[1:] for r in cells if r and r[0]}


def test_offline_tree_recomputes_the_branch_diff_and_survives_html_comments(page, tmp_path, screenshots):
    from sessionkit.widgets._static import fmt_cost

    store = sk.open_store()
    s = _forked(store)
    tree = sk.widgets.BranchTree(s, collapse=False, selected_id="a1", compare_id="a2")
    tree.to_html(tmp_path / "forked.html")
    page.goto((tmp_path / "forked.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']", timeout=30_000)
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
    page.wait_for_function("n => [...document.querySelectorAll('.sk-diff tr')].some(r => "
                           "r.textContent.startsWith('messages') && r.children[2].textContent === n)",
                           arg=str(expected["b"]["messages"]), timeout=30_000)
    cells = _diff_cells(page)
    assert cells["messages"] == [str(expected["a"]["messages"]), str(expected["b"]["messages"])]
    assert cells["tool calls"] == [str(expected["a"]["tool_calls"]), str(expected["b"]["tool_calls"])]
    b = expected["b"]
    assert cells["cost"] == [fmt_cost(expected["a"]["cost_usd"]),
                             fmt_cost(b["cost_known_usd"], unknown=b["cost_unknown"], total=b["cost_known"] + b["cost_unknown"])]
    assert cells["cost"][1] == "≥ $0.0001 (2 of 3 unknown)"
    assert cells["usage in/out"][1] == "≥ 200/20 (1 of 3 unknown)"
    page.screenshot(path=str(screenshots / "offline-tree-diff.png"))
    # another comparison: the panel follows again
    _click_row(page, data, rows, "a3", shift=True)
    page.wait_for_function("() => [...document.querySelectorAll('.sk-diff tr')].some(r => r.textContent.startsWith('messages') && r.children[2].textContent === '3')",
                           timeout=30_000)
    assert _diff_cells(page)["cost"][1] == "unknown"
    assert not page.errors, page.errors


def test_offline_run_view_opens_at_the_start_and_pads_the_interruption(page, tmp_path, screenshots):
    store = sk.open_store()
    script = [{"text": f"Step {i}: " + "a long line of planning text " * 12, "usage": {"in": 10, "out": 5}}
              for i in range(1)]
    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script * 6))
    for i in range(6):
        agent.run_sync(f"Request number {i}", session=store.session("long"))
    events = list(store.events("long"))
    events.append({"kind": "run.start", "run_id": "cut", "input": "This one is interrupted", "ts": "2025-01-01T00:00:00Z"})
    events.append({"kind": "run.end", "run_id": "cut", "status": "interrupted", "error": "run cut was interrupted",
                   "ts": "2025-01-01T00:00:01Z"})
    sk.widgets.RunView(events, height=240).to_html(tmp_path / "runs.html")
    page.goto((tmp_path / "runs.html").as_uri())
    page.wait_for_selector(".sk-run-view[data-status='interrupted']", timeout=30_000)
    body = page.locator(".sk-run-body")
    assert body.evaluate("el => el.scrollHeight > el.clientHeight + 100")  # taller than its height
    assert body.evaluate("el => el.scrollTop") == 0  # opens at the first run, not scrolled past it
    assert page.locator(".skr-run").first.locator(".sk-msg").first.is_visible()
    assert "Request number 0" in page.locator(".skr-run").first.inner_text()
    error = page.locator(".skr-run[data-run='cut'] > .sk-err")
    error.scroll_into_view_if_needed()
    assert error.inner_text() == "run cut was interrupted"
    padding = error.evaluate("el => ['paddingLeft', 'paddingTop'].map(k => parseFloat(getComputedStyle(el)[k]))")
    assert min(padding) >= 4, padding
    error.screenshot(path=str(screenshots / "run-view-interrupted.png"))
    assert "7 runs" in page.locator(".sk-run-view .sk-toolbar").inner_text()
    assert not page.errors, page.errors


def test_tree_rows_are_text_in_the_page_and_follow_the_keyboard(page, tmp_path, screenshots):
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    tree = sk.widgets.BranchTree(s)
    tree.to_html(tmp_path / "tree.html")
    page.goto((tmp_path / "tree.html").as_uri())
    page.wait_for_selector("#sk-view[data-ready='1'] .sk-tree-view[data-layout='done']", timeout=30_000)
    data = tree_data(s)
    rows = outline_rows(data)
    # every row in view is a DOM row with its text, in the order of the outline
    page.wait_for_function("() => document.querySelectorAll('.sk-row[data-id]').length > 0 && "
                           "![...document.querySelectorAll('.sk-row-text')].some(e => e.textContent === '…')",
                           timeout=30_000)
    shown = page.eval_on_selector_all(".sk-row", "els => els.map(e => [Number(e.dataset.row), e.dataset.id || null])")
    assert [r for r, _ in shown] == list(range(len(rows)))
    assert [mid for _, mid in shown] == [data.ids[r[1]] if r[0] == "node" else None for r in rows]
    assert page.locator(".sk-row[data-id='u3'] .sk-row-text").inner_text() == "Great. Where should we eat?"
    assert page.locator(".sk-row[role='treeitem']").count() == len(rows)
    # the text can be selected and copied like any text of the page
    selected = page.evaluate("""() => {
        const el = document.querySelector(".sk-row[data-id='u3'] .sk-row-text");
        const range = document.createRange(); range.selectNodeContents(el);
        const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
        return String(sel);
    }""")
    assert selected == "Great. Where should we eat?"
    assert page.locator(".sk-tree-view").get_attribute("data-selected") == ""  # selecting text picked no row
    page.evaluate("() => window.getSelection().removeAllRanges()")
    # keyboard: Down moves through the rows (a message row becomes the selection), Enter opens a row
    view = page.locator(".sk-tree-view")
    view.focus()
    page.keyboard.press("Home")
    page.wait_for_function("() => document.querySelector('.sk-tree-view').dataset.selected === 'sys'", timeout=30_000)
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    for _ in range(more):
        page.keyboard.press("ArrowDown")
    assert view.get_attribute("data-cursor") == str(more)
    page.keyboard.press("Enter")  # expands the collapsed chain
    expanded = outline_rows(data, expanded={data.index()["sys"]})
    page.wait_for_function("n => document.querySelector('.sk-tree-view').dataset.rows === String(n)",
                           arg=len(expanded), timeout=30_000)
    page.keyboard.press("ArrowDown")
    after = expanded[more + 1]
    expect = data.ids[after[1]] if after[0] == "node" else None
    if expect:
        page.wait_for_function("id => document.querySelector('.sk-tree-view').dataset.selected === id",
                               arg=expect, timeout=30_000)
    page.keyboard.press("End")
    last = next(data.ids[r[1]] for r in reversed(expanded) if r[0] == "node")
    page.wait_for_function("id => document.querySelector('.sk-tree-view').dataset.selected === id", arg=last,
                           timeout=30_000)
    assert page.locator(f".sk-row[data-id='{last}']").get_attribute("aria-selected") == "true"
    page.screenshot(path=str(screenshots / "offline-tree-dom-rows.png"))
    assert not page.errors, page.errors
