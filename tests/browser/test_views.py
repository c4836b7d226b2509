"""The notebook views in real front ends and a real Chromium: JupyterLab 4 and Notebook 7.

One notebook is written and run (Run > Run All Cells) in each host; the tests then work the
views as a user does and check what the page shows against what the test computes from the
sessions it wrote: a click in the BranchTree reaches the kernel and the linked Transcript
follows (model and full history, the compaction), the tree's rows are text (selectable, moved
through with the keyboard, found by find-in-page even outside the view), singular counts,
partial costs shown as partial or unknown, a message with ``<!--``, a RunView that opens at
its start with a padded interruption, a live run streaming, a 10,000-message tree whose
scrolls and clicks cost work in proportion to the rows in view (counted, not timed), each
snapshot hidden by its live view, and the saved notebook converted to HTML with static
snapshots. Screenshots of each view go to the ``screenshots`` folder (see conftest.py) as
``<host>-<view>.png``.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbhelpers
import pagechecks
import pytest
from helpers import wait_until
from pagechecks import settle
from servers import wait_file

import sessionkit as sk
from sessionkit.parts import output_text
from sessionkit.widgets._source import outline_rows, path_entries, tree_data
from sessionkit.widgets._static import plural

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # slow: a notebook server and chromium per host

HERE = Path(__file__).resolve().parent
HANG = pagechecks.HANG_MS / 1000  # seconds, for the waits on the kernel's files

# (name, source): the views the tests find by their cell
CELLS = [
    (
        "setup",
        "import sys, pathlib, asyncio\n"
        "sys.path.insert(0, {here!r})\n"
        "import sessionkit as sk\nimport nbhelpers as h\n"
        "OUT = pathlib.Path({out!r})\n"
        "store = sk.open_store()\ns = h.demo_session(store)\nf = h.forked_session(store)\n"
        "line = h.line_session(store)\nbs = h.big_session(store)",
    ),
    (
        "tree",
        "tree = sk.widgets.BranchTree(s, height=300)\n"
        "tree.observe(lambda ch: (OUT / 'selected.txt').write_text(ch['new'] or ''), names='selected_id')\n"
        "tree",
    ),
    ("chat", "chat = sk.widgets.Transcript(s, follow=tree, height=340)\nchat"),
    ("keys", "sk.widgets.BranchTree(s, height=300)"),
    ("forked", "sk.widgets.BranchTree(f, collapse=False, height=220)"),
    ("forked_chat", "sk.widgets.Transcript(f, 'a4', mode='full', height=300)"),
    ("line", "sk.widgets.BranchTree(line, height=120)"),
    ("runs", "sk.widgets.RunView(h.interrupted_runs(store), height=240)"),
    (
        "live",
        "ctl = sk.RunController()\nrs = store.session('live')\n"
        "agent = sk.Agent('planner', 'You plan trips.', h.SlowModel(h.run_script()), tools=[h.weather])\n"
        "view = sk.widgets.RunView(ctl, height=380)\nview",
    ),
    (
        "go",
        "async def go():\n"
        "    while not (OUT / 'go').exists():\n"
        "        await asyncio.sleep(0.05)\n"
        "    ctl.follow_up('Add a dinner suggestion, please.')\n"
        "    result = await agent.run('Plan a sunny day in Lisbon', session=rs, controller=ctl)\n"
        "    (OUT / 'run.txt').write_text(result.status + ' ' + str(view.batches))\n"
        "task = asyncio.ensure_future(go())",
    ),
    (
        "swe",
        "swe, = sk.io.import_swe_agent(store, pathlib.Path({here!r}).parent / 'data' / 'swe_agent' / "
        "'function_calling_simple.traj')\nsk.widgets.Transcript(swe, height=1600)",
    ),
    ("big", "big = sk.widgets.BranchTree(bs, height=400)\nbig"),
    ("compare", "cview = sk.widgets.CompareView(height=320)\ncview"),
    (
        "compare_go",
        "import json\nfrom sessionkit.prototyping import compare\nfrom sessionkit.testing import ScriptedModel\n"
        "async def compare_go():\n"
        "    while not (OUT / 'compare-go').exists():\n"
        "        await asyncio.sleep(0.05)\n"
        "    variants = dict(\n"
        "        slow=sk.Agent('slow', '', h.SlowModel(h.run_script()[1:])),\n"
        "        fast=sk.Agent('fast', '', ScriptedModel(['Short answer.'])),\n"
        "        broken=sk.Agent('broken', '', ScriptedModel([dict(error=RuntimeError('provider down'))])),\n"
        "    )\n"
        "    c = await compare('Plan a sunny day', store.session('cmp'), variants=variants, on_event=cview.on_event)\n"
        "    shown = dict((r['variant'], r['text'] or r['error']) for r in c.rows)\n"
        "    (OUT / 'compare.txt').write_text(json.dumps(shown))\n"
        "compare_task = asyncio.ensure_future(compare_go())",
    ),
    ("experiment", "eview = sk.widgets.ExperimentView(height=400)\neview"),
    (
        "experiment_go",
        "import json\nfrom sessionkit.prototyping import experiment\n"
        "async def experiment_go():\n"
        "    while not (OUT / 'experiment-go').exists():\n"
        "        await asyncio.sleep(0.05)\n"
        "    h.qa_dataset(store)\n"
        "    r = await experiment('qa', h.experiment_variants(), [h.reply_length], name='nb', store=store,\n"
        "                         concurrency=1, on_row=eview.on_row)\n"
        "    (OUT / 'experiment.json').write_text(json.dumps(r.rows))\n"
        "experiment_task = asyncio.ensure_future(experiment_go())",
    ),
    ("repr", "s"),
    (
        "labels_sql",  # the labels view, read in the kernel once the test asks (file 'labels-go'); the forked
        # session's only: the experiment's scorer labels other sessions of the same store
        "async def labels_sql():\n"
        "    while not (OUT / 'labels-go').exists():\n"
        "        await asyncio.sleep(0.05)\n"
        "    q = \"SELECT session_id, message_id, tag, rating, target FROM labels WHERE session_id = 'forked'\"\n"
        "    (OUT / 'labels.json').write_text(store.sql(q).to_json(orient='records'))\n"
        "labels_task = asyncio.ensure_future(labels_sql())",
    ),
    ("done", "(OUT / 'done.txt').write_text('ok')\nprint('all cells ran')"),
]
CELL = {name: k for k, (name, _) in enumerate(CELLS)}
LIVE_VIEWS = sum(
    1 for name, _ in CELLS if name not in ("setup", "go", "labels_sql", "compare_go", "experiment_go", "done")
)  # with a snapshot


def _write_notebook(path: Path, out: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.format(here=str(HERE), out=str(out))) for _, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))


class Page:
    """The notebook as the tests see it: the page, the kernel's output folder, the host."""

    def __init__(self, page, out: Path, nb_path: Path, errors: list[str], baseline: list[str], host):
        self.page, self.out, self.nb_path, self.host = page, out, nb_path, host
        self.errors, self.baseline = errors, baseline

    def view(self, cell: str, kind: str):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(CELL[cell]).locator(f".sk-{kind}-view").first

    def shot(self, locator, screenshots: Path, view: str) -> None:
        locator.screenshot(path=str(screenshots / f"{self.host.name}-{view}.png"))

    def new_errors(self) -> list[str]:
        return [e for e in self.errors if e not in self.baseline]


@pytest.fixture(scope="module")
def nb(host, browser, tmp_path_factory, screenshots):
    """The test notebook opened in the host with every cell run."""
    out = tmp_path_factory.mktemp(f"out-{host.name}")
    nb_path = host.root / "views.ipynb"
    _write_notebook(nb_path, out)
    baseline = host.own_errors(browser)
    context, page, errors = host.open(browser, "views.ipynb", "sk-views")
    host.run_all(page)
    try:
        wait_file(out / "done.txt", 2 * HANG)  # every cell, a 10,000-message session among them
        page.wait_for_function("n => document.querySelectorAll('.sk-tree-view').length >= n", arg=5)
    except Exception:
        shot = screenshots / f"failure-{host.name}-run-all.png"
        page.screenshot(path=str(shot))
        raise AssertionError(
            f"the notebook did not finish in {host.name} (see {shot}); page errors: {errors}"
        ) from None
    yield Page(page, out, nb_path, errors, baseline, host)
    context.close()


def test_click_in_branch_tree_reaches_the_kernel_and_the_transcript_follows(nb, screenshots):
    page = nb.page
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    data = tree_data(s)
    rows = outline_rows(data)
    view = nb.view("tree", "tree")
    view.scroll_into_view_if_needed()
    page.wait_for_function("el => el.dataset.layout === 'done'", arg=view.element_handle())
    assert view.get_attribute("data-rows") == str(len(rows))  # the front end laid out the same rows
    # the toolbar counts, singular where one: computed from the data
    kids = [0] * len(data.ids)
    for p in data.parent:
        if p >= 0:
            kids[p] += 1
    forks, leaves = sum(k > 1 for k in kids), sum(k == 0 for k in kids)
    toolbar = view.locator(".sk-toolbar").inner_text()
    counts = (
        plural(forks, "branch point"),
        plural(leaves, "leaf", "leaves"),
        plural(len(data.compactions), "compaction"),
    )
    for part in counts:
        assert part in toolbar, (part, toolbar)
    target = "a4"
    row = view.locator(f".sk-row[data-id='{target}']")
    pagechecks.wait_previews(page, view)  # previews arrive from the kernel after the layout
    assert row.locator(".sk-row-text").text_content() == pagechecks.preview_of(s, target)
    row.click()
    assert wait_file(nb.out / "selected.txt", HANG) == target
    assert view.get_attribute("data-selected") == target
    # the linked Transcript now shows the path to a4, as the model sees it
    transcript = nb.view("chat", "transcript")
    handle = transcript.element_handle()
    model = path_entries(s, target, compacted=True)
    page.wait_for_function(
        "([el, n]) => el.dataset.leaf === 'a4' && el.dataset.entries === n", arg=[handle, str(len(model["entries"]))]
    )
    meta = transcript.locator(".sk-toolbar").inner_text()
    assert plural(len(model["compactions"]), "compaction") + " on this path" in meta, meta
    assert plural(len(model["entries"]), "entry", "entries") in meta
    comp = transcript.locator(".sk-comp")
    assert comp.count() == len(model["compactions"]) >= 1
    summary = data.compactions[0]["summary"]
    assert summary in comp.first.inner_text()
    settle(page)
    nb.shot(view, screenshots, "branch-tree")
    nb.shot(transcript, screenshots, "transcript-model")
    # switch to the full history from the page: the hidden (compacted) messages come back, dimmed
    transcript.locator("button[data-mode='full']").click()
    full = path_entries(s, target, compacted=False)
    page.wait_for_function(
        "([el, n]) => el.dataset.mode === 'full' && el.dataset.entries === n", arg=[handle, str(len(full["entries"]))]
    )
    hidden = sum(1 for e in full["entries"] if e.get("kind") == "hidden")
    assert hidden >= 1 and transcript.locator(".sk-msg.sk-hidden").count() == hidden
    nb.shot(transcript, screenshots, "transcript-full")
    assert not nb.new_errors(), nb.errors


def test_compaction_band_is_a_row_and_opens_its_summary(nb, screenshots):
    page = nb.page
    s = nbhelpers.demo_session(sk.open_store())
    data = tree_data(s)
    view = nb.view("keys", "tree")
    view.scroll_into_view_if_needed()
    band = data.compactions[0]
    row = view.locator(".sk-row-band").first
    assert view.locator(".sk-row-band").count() == sum(1 for r in outline_rows(data) if r[0] == "band")
    head = row.locator(".sk-row-head").text_content()
    assert plural(band["messages"], "message") in head
    assert row.locator(".sk-row-text").text_content() == " ".join(band["summary"].split())
    row.click()
    panel = view.locator(".sk-tree-panel")
    panel.get_by_text("▤ Compaction").wait_for()
    assert band["summary"] in panel.inner_text()
    settle(page)
    nb.shot(view, screenshots, "compaction")
    assert not nb.new_errors(), nb.errors


def test_tree_rows_are_text_and_follow_the_keyboard(nb):
    s = nbhelpers.demo_session(sk.open_store())
    data = tree_data(s)
    view = nb.view("keys", "tree")
    view.scroll_into_view_if_needed()
    pagechecks.check_rows_are_text_and_follow_the_keyboard(nb.page, view, s, data, outline_rows(data))
    assert not nb.new_errors(), nb.errors


def test_singular_counts_partial_costs_and_html_comments(nb, screenshots):
    store = sk.open_store()
    f = nbhelpers.forked_session(store)
    view = nb.view("forked", "tree")
    view.scroll_into_view_if_needed()
    pagechecks.wait_previews(nb.page, view)
    # a message with <!-- and </script> is text in the rows and in the transcript
    u1 = f.get("u1")["parts"][0]["text"]
    assert view.locator(".sk-row[data-id='u1'] .sk-row-text").text_content() == pagechecks.preview_of(f, "u1")
    assert "<!--" in view.locator(".sk-row[data-id='u1'] .sk-row-text").text_content()
    chat = nb.view("forked_chat", "transcript")
    chat.get_by_text(u1).first.wait_for()
    # one leaf, no branch point: singular where one
    line = nb.view("line", "tree")
    ldata = tree_data(nbhelpers.line_session(store))
    toolbar = line.locator(".sk-toolbar").inner_text()
    leaves = sum(1 for i in range(len(ldata.ids)) if i not in set(ldata.parent))
    assert leaves == 1 and plural(leaves, "leaf", "leaves") + " ·" in toolbar, toolbar
    assert "0 branch points" in toolbar and plural(len(ldata.ids), "message") in toolbar
    # partial costs: a path where some replies are unpriced is never shown as complete
    data = tree_data(f)
    tree = sk.widgets.BranchTree(f, collapse=False)
    pagechecks.check_partial_costs(nb.page, view, tree, data, outline_rows(data, collapse=False), "a1", "a4")
    settle(nb.page)
    nb.shot(view, screenshots, "branch-diff")
    nb.shot(chat, screenshots, "transcript-comments")
    assert not nb.new_errors(), nb.errors


def test_run_view_opens_at_its_start_with_a_padded_interruption(nb, screenshots):
    view = nb.view("runs", "run")
    view.scroll_into_view_if_needed()
    pagechecks.check_run_view_start_and_interruption(nb.page, view)
    nb.shot(view, screenshots, "run-view-interrupted")
    assert not nb.new_errors(), nb.errors


def test_run_view_streams_text_before_turn_end(nb, screenshots):
    page = nb.page
    view = nb.view("live", "run")
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
    (nb.out / "go").write_text("1")
    status = wait_file(nb.out / "run.txt", HANG)
    assert status.startswith("completed")
    page.wait_for_function("el => el.dataset.status === 'completed'", arg=view.element_handle())
    updates = page.evaluate("window.__textUpdates")
    before_end = [u for u in updates if not u["ended"] and u["len"] > 0]
    # the model streams its words with a pause after each (nbhelpers.SlowModel, a slow provider:
    # part of the scenario), which the kernel sends on in batches every 75 ms; a slower machine
    # only stretches the stream over more batches
    assert len(before_end) >= 3, updates
    # batches are spaced by the kernel's batching interval, not one per word
    words = len(nbhelpers.run_script()[0]["text"].split())
    assert len(before_end) < words, updates
    # what the page shows matches the stored run
    assert view.locator(".skr-turn").count() == 2
    assert "queued followUp" in view.locator(".skr-turn").nth(1).inner_text()
    assert view.locator(".sk-tool").count() == 1
    assert nbhelpers.run_script()[1]["text"] in view.inner_text()
    nb.shot(view, screenshots, "run-view")
    assert not nb.new_errors(), nb.errors


def test_compare_view_fills_side_by_side_while_the_variants_stream(nb, screenshots):
    page = nb.page
    view = nb.view("compare", "compare")
    view.scroll_into_view_if_needed()
    page.evaluate(
        """el => {
            window.__compareUpdates = [];
            const obs = new MutationObserver(() => {
                const col = el.querySelector('.sk-compare-col[data-variant="slow"]');
                if (!col) return;
                const len = col.querySelector('.sk-compare-text').textContent.length;
                const log = window.__compareUpdates;
                if (!log.length || log[log.length - 1].len !== len) log.push({len, status: col.dataset.status});
            });
            obs.observe(el, {subtree: true, childList: true, characterData: true, attributes: true});
        }""",
        view.element_handle(),
    )
    (nb.out / "compare-go").write_text("1")
    rows = json.loads(wait_file(nb.out / "compare.txt", HANG))
    page.wait_for_function(
        "el => el.querySelectorAll('.sk-compare-col[data-status=completed]').length === 2"
        " && el.querySelectorAll('.sk-compare-col[data-status=failed]').length === 1",
        arg=view.element_handle(),
    )
    growing = [u for u in page.evaluate("window.__compareUpdates") if u["status"] != "completed" and u["len"] > 0]
    # the slow variant's words arrive with a pause after each: the column grows in several batches
    assert len(growing) >= 3, growing
    assert rows["slow"] == nbhelpers.run_script()[1]["text"] and rows["fast"] == "Short answer."
    for variant in ("slow", "fast"):
        column = view.locator(f'.sk-compare-col[data-variant="{variant}"]')
        assert column.locator(".sk-compare-text").inner_text() == rows[variant]
    assert "provider down" in view.locator('.sk-compare-col[data-variant="broken"] .sk-err').inner_text()
    nb.shot(view, screenshots, "compare-view")
    assert not nb.new_errors(), nb.errors


def test_ten_thousand_message_tree_scrolls_by_the_rows_in_view_and_is_found(nb, screenshots):
    page = nb.page
    view = nb.view("big", "tree")
    view.scroll_into_view_if_needed()
    page.wait_for_function("el => el.dataset.layout === 'done'", arg=view.element_handle())
    s = nbhelpers.big_session(sk.open_store())
    data = tree_data(s)
    rows = outline_rows(data)
    # the page stays responsive: a scroll and a click cost work in proportion to the rows in
    # view, not to the tree's thousands; a row far below the view is found by find-in-page
    pagechecks.check_big_tree_stays_bounded_and_is_found(page, view, s, data, rows)
    settle(page)
    nb.shot(view, screenshots, "branch-tree-10k")
    assert not nb.new_errors(), nb.errors


def test_swe_agent_tool_output_reads_as_text_with_its_line_breaks(nb, screenshots):
    store = sk.open_store()
    (swe,) = sk.io.import_swe_agent(store, HERE.parent / "data" / "swe_agent" / "function_calling_simple.traj")
    call = next(p for m in swe.get_history() for p in m["parts"] if p["type"] == "tool-find_file")
    expected = output_text(call["output"])
    assert "\r\n" in call["output"] and "\n" in expected  # the trajectory's CRLF, a line break when shown
    view = nb.view("swe", "transcript")
    view.scroll_into_view_if_needed()
    tool = view.locator(".sk-tool", has=nb.page.locator("summary b", has_text="find_file"))
    tool.scroll_into_view_if_needed()
    out = tool.locator("pre").last
    nb.page.wait_for_function("([el, t]) => el.textContent === t", arg=[out.element_handle(), expected])
    assert out.inner_text().split("\n")[:2] == expected.split("\n")[:2]
    assert "\\r\\n" not in view.inner_text()
    settle(nb.page)
    nb.shot(tool, screenshots, "tool-output")
    assert not nb.new_errors(), nb.errors


def test_experiment_view_fills_live_item_by_item_with_score_deltas(nb, screenshots):
    page = nb.page
    view = nb.view("experiment", "experiment")
    view.scroll_into_view_if_needed()
    page.evaluate(
        """el => {
            window.__experimentDone = [];
            const obs = new MutationObserver(() => {
                const done = el.dataset.completed, log = window.__experimentDone;
                if (done !== undefined && log[log.length - 1] !== done) log.push(done);
            });
            obs.observe(el, {attributes: true, attributeFilter: ["data-completed"]});
        }""",
        view.element_handle(),
    )
    (nb.out / "experiment-go").write_text("1")
    rows = json.loads(wait_file(nb.out / "experiment.json", HANG))
    assert len(rows) == 6 and all(r["status"] == "completed" for r in rows)
    page.wait_for_function("el => el.dataset.completed === '6'", arg=view.element_handle())
    # one run at a time, each after a pause: the view showed the runs completing one by one
    seen = [int(n) for n in page.evaluate("window.__experimentDone")]
    assert len([n for n in seen if 0 < n < 6]) >= 3, seen
    score = {(r["item"], r["variant"]): r["scores"]["length"] for r in rows}
    page.wait_for_function(
        "n => document.querySelectorAll('.sk-experiment-view .sk-exp-score').length === n", arg=len(rows)
    )
    for r in rows:
        cell = view.locator(f'tr[data-item="{r["item"]}"] td[data-variant="{r["variant"]}"]')
        assert cell.locator(".sk-exp-reply").inner_text() == r["reply"]
        shown = cell.locator(".sk-exp-score").inner_text()
        delta = score[(r["item"], r["variant"])] - score[(r["item"], "base")]
        expected = f"length {r['scores']['length']:g}" + ("" if r["variant"] == "base" else f" (+{delta:g})")
        assert shown == expected, (shown, expected)
        href = cell.locator("a.sk-exp-link").get_attribute("href")
        assert href == f"#/s/{r['session_id']}/m/{r['reply_id']}"
    assert "baseline base" in view.locator(".sk-exp-head").inner_text()
    nb.shot(view, screenshots, "experiment-view")
    assert not nb.new_errors(), nb.errors


def test_live_views_hide_their_snapshots(nb):
    page = nb.page
    page.wait_for_function("n => document.querySelectorAll('[data-sk-snapshot-hidden]').length >= n", arg=LIVE_VIEWS)
    visible = page.evaluate(
        "() => [...document.querySelectorAll('.jp-Notebook [data-sessionkit-snapshot]')]"
        ".filter(el => el.offsetParent !== null).length"
    )
    assert visible == 0


def test_saved_notebook_converts_to_html_with_static_snapshots(nb, screenshots):
    import nbconvert
    import nbformat

    page = nb.page
    page.locator(".jp-Notebook .jp-Cell .jp-InputPrompt").first.click()  # a cell, not a view, has the focus
    page.keyboard.press("Control+s")

    def saved_with_outputs():
        try:
            notebook = nbformat.read(str(nb.nb_path), as_version=4)
        except Exception:  # read while the server writes it
            return None
        return notebook if all(c.get("outputs") for c in notebook.cells[CELL["tree"] : CELL["runs"] + 1]) else None

    saved = wait_until(saved_with_outputs, interval=0.2, what="the notebook to be saved with its outputs")
    html, _ = nbconvert.HTMLExporter().from_notebook_node(saved)
    for kind in ("tree", "transcript", "run"):
        assert f'data-sessionkit-snapshot="{kind}"' in html, kind
    assert "Great. Where should we eat?" in html
    (screenshots / f"{nb.host.name}-views.html").write_text(html, encoding="utf-8")
    page.screenshot(path=str(screenshots / f"{nb.host.name}-page.png"), full_page=False)


def test_a_label_added_in_the_tree_shows_in_another_transcript_and_in_sql(nb, screenshots):
    import json

    page = nb.page
    view = nb.view("forked", "tree")
    view.scroll_into_view_if_needed()
    row = view.locator(".sk-row[data-id='a2']")
    # a click while the notebook's page still moves can land on the next row: until a2 is selected
    wait_until(lambda: row.click() or view.get_attribute("data-selected") == "a2", what="a2 selected")
    panel = view.locator(".sk-tree-panel")
    tag = panel.locator(".sk-label-tag")
    tag.fill("checked")
    panel.locator(".sk-label-rating").fill("4")
    # the form empties itself when it sends the label: a click the page did not take (the
    # panel drawn again under it) is made again, and one that took is not
    button = panel.get_by_role("button", name="Add label")
    wait_until(lambda: tag.input_value() == "" or button.click(), what="the label form to send the label")
    # the kernel wrote it and sent the labels back: a badge on the row and in the panel
    badge_of_row = view.locator(".sk-row[data-id='a2'] .sk-label-badge[data-tag='checked']")
    wait_until(
        lambda: badge_of_row.count() or panel.locator(".sk-label-error").inner_text(),
        what="the row's badge (or the kernel's refusal)",
    )
    assert not panel.locator(".sk-label-error").inner_text(), panel.inner_text()
    assert panel.locator(".sk-label-badge[data-tag='checked']").inner_text().startswith("checked ★4")
    # another view of the session (a Transcript on the path through a2) learns of it from the store
    chat = nb.view("forked_chat", "transcript")
    badge = chat.locator(".sk-msg[data-id='a2'] .sk-label-badge[data-tag='checked']")
    badge.wait_for()
    assert badge.inner_text().startswith("checked ★4")
    assert chat.locator(".sk-label-badge").count() == 1
    (nb.out / "labels-go").write_text("")
    rows = json.loads(wait_file(nb.out / "labels.json", HANG))
    assert rows == [{"session_id": "forked", "message_id": "a2", "tag": "checked", "rating": 4.0, "target": "message"}]
    settle(page)
    nb.shot(view, screenshots, "labels-tree")
    assert not nb.new_errors(), nb.errors
