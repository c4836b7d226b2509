"""``jupyter nbconvert --to html --execute NOTEBOOK``, the command people use, shows every view.

That command saves the widget state, so the HTML prefers each widget view, which needs
JavaScript from a CDN: offline it stays empty. Every view is therefore displayed as its
static snapshot followed by the widget (sessionkit.widgets._views.display_view). A notebook
with every kind of view, and the tour notebook whose view no other notebook shows (the
experiment of notebook 12), are converted with the default command (no extra flag) and
opened in Chromium with the network off: the transcript text, the tree rows, the run view
and the experiment must be on screen. (Every tour notebook's saved outputs are converted
without running them in test_nb_html.py, and run again under nbval.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from nbtools import BROWSER_TESTS, VIEWS, need

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]  # slow: a kernel per notebook, chromium

#: The tour notebooks converted here: those showing a kind of view the views notebook has not.
TOUR = ("12-judging-transcripts",)

VIEWS_NOTEBOOK = [
    "import sys\n"
    f"sys.path.insert(0, {str(BROWSER_TESTS)!r})\n"
    "import sessionkit as sk, nbhelpers as h\n"
    "store = sk.open_store(); s = h.demo_session(store)\n"
    "agent = sk.Agent('t', 'Be brief.', sk.testing.ScriptedModel(h.run_script()), tools=[h.weather])\n"
    "result = agent.run_sync('Plan a day', session=store.session('r'))",
    "tree = sk.widgets.BranchTree(s)\ntree",
    "sk.widgets.Transcript(s, 'a4', mode='full')",
    "sk.widgets.RunView(result)",
    "s",
    "store",
]


def _convert(notebooks: list[Path], env: dict) -> dict[str, Path]:
    """The default command, exactly: ``jupyter nbconvert --to html --execute NOTEBOOK...``.

    One command converts every notebook (nbconvert takes several, each executed in a kernel of
    its own), which spares the suite a Jupyter start per notebook."""
    folder = notebooks[0].parent
    proc = subprocess.run(
        [sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute", *(nb.name for nb in notebooks)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {nb.stem: nb.with_suffix(".html") for nb in notebooks}


def _visible_views(page) -> dict:
    return page.evaluate("""() => {
        const shown = (el) => el.offsetParent !== null && el.getBoundingClientRect().height > 0;
        const snaps = [...document.querySelectorAll('[data-sessionkit-snapshot]')].filter(shown);
        const kinds = {};
        for (const s of snaps) kinds[s.dataset.sessionkitSnapshot] = (kinds[s.dataset.sessionkitSnapshot] || 0) + 1;
        // widget outputs holding sessionkit's views (anywidget models, or boxes around them);
        // other widgets, such as a progress bar, have no snapshot to show offline
        const state = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
        const models = state ? (JSON.parse(state.textContent).state || {}) : {};
        const holdsView = (id, depth = 0) => {
            const model = models[id];
            if (!model) return true;  // nothing saved about it: counted
            if (model.model_name === 'AnyModel') return true;
            const children = (model.state && model.state.children) || [];
            return depth < 8 && children.some((c) => holdsView(String(c).replace('IPY_MODEL_', ''), depth + 1));
        };
        const widgets = [...document.querySelectorAll('.jupyter-widgets.jp-OutputArea-output')].filter((out) => {
            const view = out.querySelector('script[type="application/vnd.jupyter.widget-view+json"]');
            return !view || holdsView(JSON.parse(view.textContent).model_id);
        }).length;
        const treeRows = [...document.querySelectorAll('.sk-snap-tree tbody tr')].filter(shown).length;
        return {kinds, widgets, treeRows};
    }""")


@pytest.fixture
def offline_page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture(scope="module")
def converted(run_all, tmp_path_factory):
    """The views notebook and the tour notebooks of ``TOUR``, converted by the default command."""
    need("nbconvert")
    need("ipykernel")
    import nbformat

    base = tmp_path_factory.mktemp("nbconvert")
    env = run_all.kernel_env(base / "jupyter")
    work = run_all.fresh_copy(base / "notebooks")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in VIEWS_NOTEBOOK]
    nbformat.write(nb, str(work / "views.ipynb"))
    return _convert([work / f"{stem}.ipynb" for stem in ("views", *TOUR)], env)


def test_the_views_notebook_shows_transcript_tree_and_run_offline(converted, offline_page, screenshots):
    import nbhelpers  # tests/browser, on the path (conftest.py)

    import sessionkit as sk
    from sessionkit.widgets._source import outline_rows, tree_data

    html = converted["views"].read_text(encoding="utf-8")
    assert "application/vnd.jupyter.widget-state+json" in html  # the default saved the widget state
    offline_page.goto(converted["views"].as_uri())
    offline_page.wait_for_load_state("load")
    seen = _visible_views(offline_page)
    assert seen["widgets"] >= 5  # the widget views are there, and render nothing offline
    assert seen["kinds"] == {"tree": 2, "transcript": 1, "run": 1, "store": 1}  # the store browser shows its table
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    rows = len(outline_rows(tree_data(s)))
    assert seen["treeRows"] == 2 * rows  # every row of the tree, and of the session shown as its tree
    text = offline_page.inner_text("body")
    assert "Great. Where should we eat?" in text and "hidden by compaction" in text  # the transcript
    assert "Sunny and 23°C" in text and "tool weather" in text  # the run view
    offline_page.screenshot(path=str(screenshots / "nbconvert-execute-views.png"), full_page=True)


@pytest.mark.parametrize("stem", TOUR)
def test_tour_notebook_shows_every_view_offline(converted, offline_page, screenshots, stem):
    offline_page.goto(converted[stem].as_uri())
    offline_page.wait_for_load_state("load")
    seen = _visible_views(offline_page)
    widget_outputs = seen["widgets"]
    assert widget_outputs >= 1, stem  # the views were live widgets when the notebook ran
    # each widget output (empty offline) comes with its snapshot on screen
    assert sum(seen["kinds"].values()) >= widget_outputs, (stem, seen, widget_outputs)
    expected, phrase = VIEWS[stem]
    for kind, least in expected.items():
        assert seen["kinds"].get(kind, 0) >= least, (stem, kind, seen)
    if "tree" in expected:
        assert seen["treeRows"] > 0
    assert phrase in offline_page.inner_text("body"), (stem, phrase)
    offline_page.screenshot(path=str(screenshots / f"nbconvert-execute-{stem}.png"), full_page=True)
