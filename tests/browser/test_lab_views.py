"""The notebook views in a real JupyterLab and a real browser.

One notebook is written, opened in JupyterLab and run (Run > Run All Cells).
The tests then click in the BranchTree and check what the kernel saw, watch a
RunView stream a scripted run, open a 10,000-message tree and check the page
keeps answering, take screenshots of each view, and convert the saved notebook
to HTML to check the static snapshots are in it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # slow: JupyterLab and chromium start per run

HERE = Path(__file__).resolve().parent
SHOTS = HERE.parents[1] / "artifacts" / "screenshots"


def _cells(out: Path) -> list[str]:
    return [
        "import sys, pathlib, asyncio\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import sessionkit as sk\nimport nbhelpers as h\n"
        f"OUT = pathlib.Path({str(out)!r})\n"
        "store = sk.open_store()\ns = h.demo_session(store)",
        "tree = sk.widgets.BranchTree(s, height=300)\n"
        "tree.observe(lambda ch: (OUT / 'selected.txt').write_text(ch['new'] or ''), names='selected_id')\n"
        "tree",
        "chat = sk.widgets.Transcript(s, follow=tree, height=340)\nchat",
        "ctl = sk.RunController()\nrs = store.session('live')\n"
        "agent = sk.Agent('planner', 'You plan trips.', h.SlowModel(h.run_script()), tools=[h.weather])\n"
        "view = sk.widgets.RunView(ctl, height=380)\nview",
        "async def go():\n"
        "    while not (OUT / 'go').exists():\n"
        "        await asyncio.sleep(0.05)\n"
        "    ctl.follow_up('Add a dinner suggestion, please.')\n"
        "    result = await agent.run('Plan a sunny day in Lisbon', session=rs, controller=ctl)\n"
        "    (OUT / 'run.txt').write_text(result.status + ' ' + str(view.batches))\n"
        "task = asyncio.ensure_future(go())",
        "bs = h.big_session(store)\nbig = sk.widgets.BranchTree(bs, height=400)\nbig",
        "s",
        "(OUT / 'done.txt').write_text('ok')\nprint('all cells ran')",
    ]


def _write_notebook(path: Path, out: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in _cells(out)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


def _wait_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path.name} did not appear within {timeout} s")


@pytest.fixture(scope="module")
def notebook(lab, browser, tmp_path_factory):
    """The test notebook opened in JupyterLab with every cell run: yields ``(page, out_dir, nb_path)``."""
    url, token, root, _env = lab
    out = tmp_path_factory.mktemp("out")
    nb_path = root / "views.ipynb"
    _write_notebook(nb_path, out)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.add_init_script(
        "window.__longTasks = [];"
        "try { new PerformanceObserver(l => { for (const e of l.getEntries()) window.__longTasks.push(e.duration); })"
        ".observe({type: 'longtask', buffered: true}); } catch (e) {}"
    )
    page.goto(f"{url}/lab/tree/views.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # JupyterLab may ask which kernel to start: take the notebook's own (python3)
    try:
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
        page.locator(".jp-Dialog .jp-mod-accept").first.click()
    except Exception:
        pass
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    try:
        _wait_file(out / "done.txt", 60)
    except AssertionError:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "failure-run-all.png"))
        raise AssertionError(f"the notebook did not finish; page errors: {errors}; see {SHOTS / 'failure-run-all.png'}")
    page.wait_for_selector(".sk-tree-view", timeout=30_000)
    yield page, out, nb_path, errors
    context.close()


def test_click_in_branch_tree_sets_selected_id_in_kernel(notebook, screenshots):
    import nbhelpers
    import sessionkit as sk
    from sessionkit.widgets._source import outline_rows, tree_data

    page, out, _, errors = notebook
    store = sk.open_store()
    data = tree_data(nbhelpers.demo_session(store))
    rows = outline_rows(data)
    target = "a4"
    row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == target)
    view = page.locator(".sk-tree-view", has_text="Session trip").first
    view.scroll_into_view_if_needed()
    assert view.get_attribute("data-rows") == str(len(rows))  # the front end laid out the same rows
    scroller = view.locator(".sk-tree-scroll")
    height = int(scroller.get_attribute("data-row-height"))
    scroller.click(position={"x": 120, "y": row * height + height / 2})
    assert _wait_file(out / "selected.txt", 10) == target
    assert view.get_attribute("data-selected") == target
    # the linked Transcript now shows the path to a4
    transcript = page.locator(".sk-transcript-view").first
    page.wait_for_function("el => el.dataset.leaf === 'a4'", arg=transcript.element_handle(), timeout=10_000)
    expected = len(store.session("trip").get_history(leaf_id=target, compacted=True))
    try:
        page.wait_for_function("([el, n]) => el.dataset.entries === n",
                               arg=[transcript.element_handle(), str(expected)], timeout=10_000)
    except Exception:
        pass  # the assertion below reports what the page shows
    assert transcript.get_attribute("data-entries") == str(expected)
    page.wait_for_timeout(300)
    view.screenshot(path=str(screenshots / "branch-tree.png"))
    transcript.screenshot(path=str(screenshots / "transcript.png"))
    # switch to the full history from the page
    transcript.locator("button[data-mode='full']").click()
    page.wait_for_function("el => el.dataset.mode === 'full'", arg=transcript.element_handle(), timeout=10_000)
    full = len(store.session("trip").get_history(leaf_id=target, compacted=False))
    # the mode flips at once; the entries follow after a round trip to the kernel
    try:
        page.wait_for_function("([el, n]) => el.dataset.entries === n",
                               arg=[transcript.element_handle(), str(full)], timeout=10_000)
    except Exception:
        pass  # the assertion below reports what the page shows
    assert transcript.get_attribute("data-entries") == str(full)
    assert transcript.locator(".sk-msg.sk-hidden").count() == 4
    transcript.screenshot(path=str(screenshots / "transcript-full.png"))
    assert not errors, errors


def test_run_view_streams_text_before_turn_end(notebook, screenshots):
    page, out, _, errors = notebook
    view = page.locator(".sk-run-view").first
    view.scroll_into_view_if_needed()
    page.evaluate(
        """el => {
            window.__textUpdates = [];
            const first = () => el.querySelector('.skr-turn');
            const obs = new MutationObserver(() => {
                const turn = first();
                if (!turn) return;
                const text = turn.querySelector('.skr-text').textContent;
                const log = window.__textUpdates;
                if (!log.length || log[log.length - 1].len !== text.length)
                    log.push({len: text.length, ended: turn.classList.contains('skr-done'), t: performance.now()});
            });
            obs.observe(el, {subtree: true, childList: true, characterData: true, attributes: true});
        }""",
        view.element_handle(),
    )
    (out / "go").write_text("1")
    status = _wait_file(out / "run.txt", 60)
    assert status.startswith("completed")
    page.wait_for_function("el => el.dataset.status === 'completed'", arg=view.element_handle(), timeout=15_000)
    updates = page.evaluate("window.__textUpdates")
    before_end = [u for u in updates if not u["ended"] and u["len"] > 0]
    assert len(before_end) >= 3, updates
    # batches are spaced by the kernel's batching interval, not one per word
    words = len(__import__("nbhelpers").run_script()[0]["text"].split())
    assert len(before_end) < words, updates
    # what the page shows matches the stored run
    assert view.locator(".skr-turn").count() == 2
    assert "queued followUp" in view.locator(".skr-turn").nth(1).inner_text()
    assert view.locator(".sk-tool").count() == 1
    assert "Sunny and 23°C" in view.inner_text()
    view.screenshot(path=str(screenshots / "run-view.png"))
    assert not errors, errors


def test_ten_thousand_message_tree_keeps_the_page_responsive(notebook, screenshots):
    page, _, _, errors = notebook
    view = page.locator(".sk-tree-view", has_text="Session big").first
    view.scroll_into_view_if_needed()
    page.wait_for_function("el => el.dataset.layout === 'done'", arg=view.element_handle(), timeout=20_000)
    assert int(view.get_attribute("data-rows")) > 1000
    scroller = view.locator(".sk-tree-scroll")
    for fraction in (0.5, 0.9, 0.1):
        started = time.monotonic()
        page.evaluate("([el, f]) => { el.scrollTop = el.scrollHeight * f; }", [scroller.element_handle(), fraction])
        page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
        assert time.monotonic() - started < 2.0
    started = time.monotonic()
    scroller.click(position={"x": 200, "y": 11 * 22 + 11})
    page.wait_for_function("el => !!el.dataset.selected", arg=view.element_handle(), timeout=2_000)
    assert time.monotonic() - started < 2.0
    long_tasks = page.evaluate("window.__longTasks")
    assert max(long_tasks or [0]) < 2000, long_tasks
    page.wait_for_timeout(300)
    view.screenshot(path=str(screenshots / "branch-tree-10k.png"))
    assert not errors, errors


def test_saved_notebook_converts_to_html_with_static_snapshots(notebook, lab, screenshots):
    import nbconvert
    import nbformat

    page, _, nb_path, _ = notebook
    page.locator(".jp-Notebook").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        nb = nbformat.read(str(nb_path), as_version=4)
        if all(c.get("outputs") for c in nb.cells[1:4]):
            break
        time.sleep(0.2)
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    for kind in ("tree", "transcript", "run"):
        assert f'data-sessionkit-snapshot="{kind}"' in html, kind
    assert "Plan a weekend in Lisbon" in html or "Great. Where should we eat?" in html
    out = screenshots.parent / "views.html"
    out.write_text(html, encoding="utf-8")
    page.screenshot(path=str(screenshots / "lab.png"), full_page=False)
