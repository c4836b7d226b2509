"""An executed notebook converts to HTML that shows every view's static snapshot."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from helpers import missing

HERE = Path(__file__).resolve().parent


def _need(module: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"needs {module} (pip install -e '.[dev]')")


CELLS = [
    "import sys\n"
    f"sys.path.insert(0, {str(HERE.parent / 'browser')!r})\n"
    "import sessionkit as sk, nbhelpers as h\n"
    "store = sk.open_store(); s = h.demo_session(store)\n"
    "rs = store.session('r')\n"
    "agent = sk.Agent('t', 'Be brief.', sk.testing.ScriptedModel(h.run_script()), tools=[h.weather])\n"
    "result = agent.run_sync('Plan a day', session=rs)",
    "tree = sk.widgets.BranchTree(s)\ntree",
    "sk.widgets.Transcript(s, 'a4', mode='full')",
    "sk.widgets.RunView(result)",
    "s",
    "store",
]


@pytest.mark.slow  # executes a notebook in a kernel
@pytest.mark.timeout(120)
def test_executed_notebook_html_contains_each_snapshot(tmp_path):
    nbformat = _need("nbformat")
    nbclient = _need("nbclient")
    nbconvert = _need("nbconvert")
    _need("ipykernel")
    from servers import jupyter_env

    env = jupyter_env(tmp_path / "jupyter")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    old = dict(os.environ)
    os.environ.update(env)
    try:
        # Without saved widget state, as JupyterLab saves notebooks by default and
        # GitHub renders them: the HTML then shows each output's text/html.
        client = nbclient.NotebookClient(
            nb,
            timeout=60,
            kernel_name="python3",
            store_widget_state=False,
            resources={"metadata": {"path": str(tmp_path)}},
        )
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    html, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    for kind in ("tree", "transcript", "run", "store"):
        assert f'data-sessionkit-snapshot="{kind}"' in html, kind
    assert html.count('data-sessionkit-snapshot="tree"') == 2  # the tree widget and the session itself
    assert "Sunny and 23°C" in html  # the replayed run's text
    assert "hidden by compaction" in html
