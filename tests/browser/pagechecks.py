"""Checks of one view in a page, shared by the offline pages and every notebook host, and the
waits on a page they and the notebook fixtures use.

Each check takes the Playwright page and a locator of the view, and computes what the view must
show from the session data the test wrote (sessionkit.widgets._source, the kernel's side).
Every wait is on a state of the page; its time limit only ends a test that would otherwise hang.
"""

from __future__ import annotations

import math

#: How long a wait on the page may take before the test is declared hung (milliseconds).
HANG_MS = 60_000


def settle(page) -> None:
    """Until the page's fonts are in and two frames were drawn: a screenshot shows the view as drawn."""
    page.evaluate(
        "() => document.fonts.ready.then(() => new Promise(r => requestAnimationFrame("
        "() => requestAnimationFrame(() => r(1)))))"
    )


def wait_kernel_idle(page, *, visible_only: bool = True) -> None:
    """Until the notebook has its kernel and the kernel is idle, accepting the kernel chooser if
    the front end asks first. Before the kernel starts, the execution indicator already says
    idle, next to "No Kernel": the kernel's name is awaited too. ``visible_only``: only a shown
    indicator counts (JupyterLab keeps one per open notebook; Notebook 7 has one, hidden)."""
    shown = "el.offsetParent !== null && " if visible_only else ""
    state = page.wait_for_function(
        "() => document.querySelector('.jp-Dialog .jp-mod-accept') ? 'dialog' : "
        "[...document.querySelectorAll('.jp-Toolbar-kernelName')].some(el => "
        "!['', 'No Kernel'].includes(el.textContent.trim())) && "
        f"[...document.querySelectorAll('.jp-Notebook-ExecutionIndicator')].some(el => {shown}"
        "el.dataset.status === 'idle') ? 'idle' : false",
        timeout=HANG_MS,
    ).json_value()
    if state == "dialog":
        page.locator(".jp-Dialog .jp-mod-accept").first.click()
        wait_kernel_idle(page, visible_only=visible_only)


#: The Run menu's item once the notebook is the shell's current widget (JupyterLab names it
#: "Run All", disabled, while another widget is current).
_RUN_ALL = ".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel"

#: What the page shows once a click on Run All Cells has been handled: the menu is closed, and
#: the first code cell is queued or running if the command ran (JupyterLab marks it in the same
#: task that closes the menu), or a dialog says why not.
_AFTER_CLICK = (
    "() => { const p = document.querySelector('.jp-Notebook .jp-CodeCell .jp-InputPrompt');"
    " if (p && p.textContent.trim() !== '[ ]:') return 'ran';"
    " if (document.querySelector('.jp-Dialog')) return 'dialog';"
    " return document.querySelector('.lm-Menu') ? false : 'not run'; }"
)


def run_all_cells(page, *, visible_only: bool = True, attempts: int = 3) -> None:
    """Run > Run All Cells once the kernel is idle (see :func:`wait_kernel_idle`); returns when the
    first code cell is queued or running, so a click that did not take fails here, not later.

    The command is enabled only while the notebook is the shell's current widget: a menu opened
    while it is not (focus elsewhere on a busy page) shows the item disabled, so the notebook is
    focused and the menu opened again. A click the page handled without running the command is
    tried again (nothing ran, so nothing runs twice); a dialog fails with its text."""
    wait_kernel_idle(page, visible_only=visible_only)
    outcome = "not run"
    for _ in range(attempts):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu").first.wait_for()
        item = page.locator(_RUN_ALL, has_text="Run All Cells")
        if item.count() == 0:
            outcome = "its item disabled"
            page.keyboard.press("Escape")
            page.locator(".lm-Menu").first.wait_for(state="detached")
            page.locator(".jp-Notebook").first.focus()
            continue
        item.first.click()
        outcome = page.wait_for_function(_AFTER_CLICK, timeout=HANG_MS).json_value()
        if outcome == "ran":
            return
        if outcome == "dialog":
            raise AssertionError(f"Run All Cells opened a dialog: {page.locator('.jp-Dialog').first.inner_text()!r}")
    raise AssertionError(f"Run All Cells did not run the notebook in {attempts} tries ({outcome})")


def _wait(page, view, script: str, arg=None, timeout: int = HANG_MS) -> None:
    """Waits until ``script`` (a function of the view's element and ``arg``) is true."""
    page.wait_for_function(f"([el, arg]) => ({script})", arg=[view.element_handle(), arg], timeout=timeout)


def row_index(data, rows, mid: str) -> int:
    return next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == mid)


def wait_previews(page, view) -> None:
    """Until every message row shows its preview (they arrive from the kernel or the page's data)."""
    _wait(
        page,
        view,
        "el.dataset.layout === 'done' && el.querySelectorAll('.sk-row[data-id]').length > 0 && "
        "![...el.querySelectorAll('.sk-row[data-id] .sk-row-text')].some(e => e.textContent === '…')",
    )


def preview_of(session, mid: str) -> str:
    from sessionkit.widgets._source import load_messages, message_preview

    return message_preview(load_messages(session, [mid])[mid])


def check_rows_are_text_and_follow_the_keyboard(page, view, session, data, rows) -> None:
    """Every row is a DOM row with its text, selectable; Home / arrows move the selection, Enter expands."""
    from sessionkit.widgets._source import outline_rows

    wait_previews(page, view)
    shown = view.evaluate(
        "el => [...el.querySelectorAll('.sk-row')].map(e => [Number(e.dataset.row), e.dataset.id || null])"
    )
    assert [r for r, _ in shown] == list(range(len(rows)))
    assert [mid for _, mid in shown] == [data.ids[r[1]] if r[0] == "node" else None for r in rows]
    assert view.locator(".sk-row[role='treeitem']").count() == len(rows)
    leaf = next(data.ids[r[1]] for r in reversed(rows) if r[0] == "node")
    text = view.locator(f".sk-row[data-id='{leaf}'] .sk-row-text").text_content()
    assert text == preview_of(session, leaf)
    # the text can be selected and copied like any text of the page; selecting picks no row
    before = view.get_attribute("data-selected")
    selected = view.evaluate(
        """(el, mid) => {
        const t = el.querySelector(`.sk-row[data-id='${mid}'] .sk-row-text`);
        const range = document.createRange(); range.selectNodeContents(t);
        const sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
        return String(sel);
    }""",
        leaf,
    )
    assert selected == text
    assert view.get_attribute("data-selected") == before
    page.evaluate("() => window.getSelection().removeAllRanges()")
    # keyboard: Home selects the first message, Down moves through the rows, Enter opens a chain
    view.focus()
    page.keyboard.press("Home")
    assert rows[0][0] == "node"
    first = data.ids[rows[0][1]]
    _wait(page, view, "el.dataset.selected === arg", first)
    more = next(k for k, r in enumerate(rows) if r[0] == "more")
    for _ in range(more):
        page.keyboard.press("ArrowDown")
    _wait(page, view, "el.dataset.cursor === arg", str(more))
    page.keyboard.press("Enter")  # expands the collapsed chain
    expanded = outline_rows(data, expanded={data.index()[first]})
    _wait(page, view, "el.dataset.rows === arg", str(len(expanded)))
    page.keyboard.press("ArrowDown")
    after = expanded[more + 1]
    if after[0] == "node":
        _wait(page, view, "el.dataset.selected === arg", data.ids[after[1]])
    page.keyboard.press("End")
    last = next(data.ids[r[1]] for r in reversed(expanded) if r[0] == "node")
    _wait(page, view, "el.dataset.selected === arg", last)
    # the rows follow the selection on the next drawn frame
    _wait(page, view, "el.querySelector(`.sk-row[data-id='${arg}']`)?.getAttribute('aria-selected') === 'true'", last)
    assert view.locator(".sk-row[aria-selected='true']").count() == 1


def check_find_in_page(page, view, mid: str, preview: str) -> None:
    """A row far outside the view is in the page as text: the browser's find reaches it, and
    scrolled to (as find-in-page scrolls to a match) it is drawn where it is."""
    row = view.locator(f".sk-row[data-id='{mid}']")
    _wait(
        page,
        view,
        "(() => { const t = el.querySelector(`.sk-row[data-id='${arg[0]}'] .sk-row-text`);"
        " return !!t && t.textContent === arg[1]; })()",
        [mid, preview],
    )
    scroller = view.locator(".sk-tree-scroll")
    assert row.evaluate("el => el.offsetTop") > scroller.evaluate("el => el.scrollTop + el.clientHeight")  # out of view
    style = row.evaluate("el => [getComputedStyle(el).display, getComputedStyle(el).visibility]")
    assert style[0] != "none" and style[1] == "visible", style
    found = page.evaluate(
        """([mid, text]) => {
        window.getSelection().removeAllRanges();
        if (!window.find(text, true, false, true)) return null;
        const node = window.getSelection().anchorNode;
        const row = (node.nodeType === 1 ? node : node.parentElement).closest('.sk-row');
        return row ? row.dataset.id : '';
    }""",
        [mid, preview],
    )
    assert found == mid, (found, mid)
    row.evaluate("el => el.scrollIntoView({block: 'center'})")
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))")
    hit = row.evaluate("""el => { const b = el.getBoundingClientRect();
        const at = document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
        return !!at && el.contains(at); }""")
    assert hit  # the row is on top where it is drawn, not hidden under the canvas
    page.evaluate("() => window.getSelection().removeAllRanges()")


def check_run_view_start_and_interruption(page, view) -> None:
    """A RunView taller than its height opens at its first run; the interruption line is padded."""
    _wait(page, view, "el.dataset.status === 'interrupted'")
    body = view.locator(".sk-run-body")
    assert body.evaluate("el => el.scrollHeight > el.clientHeight + 100")  # taller than its height
    assert body.evaluate("el => el.scrollTop") == 0  # opens at the first run, not scrolled past it
    assert view.locator(".skr-run").first.locator(".sk-msg").first.is_visible()
    assert "Request number 0" in view.locator(".skr-run").first.inner_text()
    error = view.locator(".skr-run[data-run='cut'] > .sk-err")
    error.scroll_into_view_if_needed()
    assert error.inner_text() == "run cut was interrupted"
    padding = error.evaluate("el => ['paddingLeft', 'paddingTop'].map(k => parseFloat(getComputedStyle(el)[k]))")
    assert min(padding) >= 4, padding


def diff_cells(view) -> dict[str, list[str]]:
    cells = view.evaluate(
        "el => [...el.querySelectorAll('.sk-diff tr')].map(r => [...r.children].map(c => c.textContent))"
    )
    return {r[0]: r[1:] for r in cells if r and r[0]}


def check_partial_costs(page, view, tree, data, rows, a: str, b: str) -> None:
    """Click ``a``, shift-click ``b``: the diff panel shows what the kernel's compare() gives,
    a partial sum or "unknown" for costs and usage that are not all known, never a zero."""
    from sessionkit.widgets._static import fmt_cost

    view.locator(f".sk-row[data-id='{a}']").click()
    _wait(page, view, "el.dataset.selected === arg", a)
    view.locator(f".sk-row[data-id='{b}']").click(modifiers=["Shift"])
    expected = tree.compare(a, b)
    _wait(
        page,
        view,
        "[...el.querySelectorAll('.sk-diff tr')].some(r => r.textContent.startsWith('messages') && "
        "r.children[1].textContent === arg[0] && r.children[2].textContent === arg[1])",
        [str(expected["a"]["messages"]), str(expected["b"]["messages"])],
    )
    cells = diff_cells(view)
    assert cells["tool calls"] == [str(expected["a"]["tool_calls"]), str(expected["b"]["tool_calls"])]
    for side, shown in zip(("a", "b"), cells["cost"]):
        s = expected[side]
        total = s["cost_known"] + s["cost_unknown"]
        want = (
            fmt_cost(s["cost_usd"])
            if s["cost_usd"] is not None and not s["cost_unknown"]
            else fmt_cost(s["cost_known_usd"], unknown=s["cost_unknown"], total=total)
        )
        assert shown == want, (side, shown, want)
        if s["cost_unknown"]:
            assert "unknown" in shown and shown != fmt_cost(0.0)
        if s["usage_known"] < total:
            assert "unknown" in cells["usage in/out"][("a", "b").index(side)]


# -- the work a scroll or a click costs, counted ----------------------------------------------

_WATCH = """el => {
    // What the view does to the page, counted: the rows whose elements change (mutation
    // records, by row) and the calls drawing on its canvas. Counts, not durations.
    const w = window.__skWork = {rows: new Set(), records: 0, canvas: 0};
    new MutationObserver(list => {
        for (const m of list) {
            w.records++;
            const node = m.target.nodeType === 1 ? m.target : m.target.parentElement;
            const row = node && node.closest('.sk-row');
            if (row) w.rows.add(Number(row.dataset.row));
        }
    }).observe(el, {subtree: true, childList: true, attributes: true, characterData: true});
    const ctx = el.querySelector('canvas').getContext('2d');
    const proto = CanvasRenderingContext2D.prototype;
    for (const name of ['fillRect', 'fillText', 'strokeRect', 'arc', 'lineTo', 'moveTo', 'fill', 'stroke']) {
        ctx[name] = function (...args) { w.canvas++; return proto[name].apply(this, args); };
    }
    window.__skTake = () => {
        const out = {rows: [...w.rows].sort((a, b) => a - b), records: w.records, canvas: w.canvas};
        w.rows = new Set(); w.records = 0; w.canvas = 0;
        return out;
    };
}"""

_ROW = 22  # px, the tree's row height (BT_ROW in branch_tree.js)


def watch_tree_work(page, view) -> None:
    """Count from now on what the tree view changes in the page (see :func:`tree_work`).

    Waits first until every row element is built and shows its preview, so what is counted
    after is the work of the scroll or click alone."""
    _wait(page, view, "el.dataset.layout === 'done' && el.dataset.domRows === el.dataset.rows")
    wait_previews(page, view)
    view.evaluate(_WATCH)
    # a frame already asked for (by the last preview) is drawn before counting starts
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))")
    page.evaluate("() => window.__skTake()")


def tree_work(page, view) -> dict:
    """What the view changed since the last call, once it has drawn a frame and two more frames
    passed: ``rows`` (indices of the rows whose elements changed), ``records``, ``canvas``
    (drawing calls), and ``window`` (the rows in view, as the view computes them)."""
    page.wait_for_function("() => window.__skWork.canvas > 0", timeout=HANG_MS)  # it drew
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))")
    work = page.evaluate("() => window.__skTake()")
    scroller = view.locator(".sk-tree-scroll")
    top, height = scroller.evaluate("el => [el.scrollTop, el.clientHeight]")
    rows = int(view.get_attribute("data-rows"))
    work["window"] = range(max(0, math.floor(top / _ROW) - 1), min(rows - 1, math.ceil((top + height) / _ROW) + 1) + 1)
    return work


def check_bounded_by_the_view(work: dict, rows: int, *, scrolled: bool, also: int = 3) -> None:
    """The work of one scroll or click touched the rows in view and no others (but ``also`` at
    most: the selected, compared and cursor rows, wherever they are), and drew about as many
    rows as are in view, however many rows the tree has. ``scrolled``: the view moved to rows
    it had not shown, which it must then have updated (most of them at least)."""
    window = work["window"]
    outside = [r for r in work["rows"] if r not in window]
    assert len(outside) <= also, (outside, window)
    assert len(work["rows"]) <= len(window) + also < rows / 10, (len(work["rows"]), len(window), rows)
    if scrolled:
        assert 2 * len(set(work["rows"]) & set(window)) >= len(window), (work["rows"], window)
    # each row in view costs a bounded number of drawing calls (its dot, lines, marks)
    assert 0 < work["canvas"] <= 50 * len(window), (work["canvas"], len(window))


def check_big_tree_stays_bounded_and_is_found(page, view, session, data, rows) -> None:
    """A tree of thousands of rows (``view``, laid out): a scroll and a click cost work in
    proportion to the rows in view (rows updated and drawing calls, counted in the page), not to
    the tree's size; and a row far below the view is text in the page, found by find-in-page."""
    assert view.get_attribute("data-rows") == str(len(rows)) and len(rows) > 1000
    watch_tree_work(page, view)
    scroller = view.locator(".sk-tree-scroll")
    for fraction in (0.5, 0.9, 0.1):
        scroller.evaluate("(el, f) => { el.scrollTop = el.scrollHeight * f; }", fraction)
        check_bounded_by_the_view(tree_work(page, view), len(rows), scrolled=True)
    scroller.click(position={"x": 200, "y": 11 * 22 + 11})
    page.wait_for_function("el => !!el.dataset.selected", arg=view.element_handle())
    check_bounded_by_the_view(tree_work(page, view), len(rows), scrolled=False)
    scroller.evaluate("el => { el.scrollTop = 0; }")
    far = next(data.ids[r[1]] for r in reversed(rows) if r[0] == "node")
    check_find_in_page(page, view, far, preview_of(session, far))
