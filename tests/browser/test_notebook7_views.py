"""The views in Jupyter Notebook 7 (the classic notebook's successor), in a real Chromium.

The same widgets as in JupyterLab: a BranchTree click reaches the kernel and the linked
Transcript follows it, a replayed RunView shows its turns, each view hides its static
snapshot once it renders, and the page logs no error. Screenshots go to artifacts/.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # slow: a Notebook server and chromium

HERE = Path(__file__).resolve().parent


def _cells(out: Path) -> list[str]:
    return [
        "import sys, pathlib\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import sessionkit as sk, nbhelpers as h\n"
        f"OUT = pathlib.Path({str(out)!r})\n"
        "store = sk.open_store(); s = h.demo_session(store)\n"
        "agent = sk.Agent('t', 'Be brief.', sk.testing.ScriptedModel(h.run_script()), tools=[h.weather])\n"
        "result = agent.run_sync('Plan a day', session=store.session('r'))",
        "tree = sk.widgets.BranchTree(s, height=260)\n"
        "tree.observe(lambda ch: (OUT / 'selected.txt').write_text(ch['new'] or ''), names='selected_id')\n"
        "tree",
        "chat = sk.widgets.Transcript(s, follow=tree, height=300)\nchat",
        "sk.widgets.RunView(result, height=300)",
        "(OUT / 'done.txt').write_text('ok')",
    ]


def _wait_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path.name} did not appear within {timeout} s")


def test_views_work_in_notebook_7(notebook7, browser, screenshots, tmp_path):
    import nbformat

    import nbhelpers
    import sessionkit as sk
    from sessionkit.widgets._source import outline_rows, tree_data

    url, token, root = notebook7
    out = tmp_path / "out"
    out.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in _cells(out)]
    nbformat.write(nb, str(root / "views.ipynb"))
    # What a bare notebook logs in this Notebook (an error of Notebook's own settings loading
    # shows up in some installations): the views may add nothing to it.
    blank = nbformat.v4.new_notebook()
    blank.metadata["kernelspec"] = nb.metadata["kernelspec"]
    blank.cells = [nbformat.v4.new_code_cell("1 + 1")]
    nbformat.write(blank, str(root / "blank.ipynb"))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    baseline: list[str] = []
    page.on("pageerror", lambda exc: baseline.append(str(exc)))
    page.goto(f"{url}/notebooks/blank.ipynb?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_timeout(3000)
    page.close()
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{url}/notebooks/views.ipynb?token={token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        try:  # the kernel chooser, if Notebook asks
            page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        except Exception:
            pass
        page.wait_for_timeout(1500)  # the kernel starts
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        _wait_file(out / "done.txt", 90)
        tree = page.locator(".sk-tree-view").first
        tree.wait_for(timeout=30_000)
        page.wait_for_function("el => el.dataset.layout === 'done'", arg=tree.element_handle(), timeout=30_000)
        store = sk.open_store()
        data = tree_data(nbhelpers.demo_session(store))
        rows = outline_rows(data)
        assert tree.get_attribute("data-rows") == str(len(rows))
        row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == "a4")
        tree.scroll_into_view_if_needed()
        tree.locator(".sk-tree-scroll").click(position={"x": 120, "y": row * 22 + 11})
        assert _wait_file(out / "selected.txt", 15) == "a4"
        transcript = page.locator(".sk-transcript-view").first
        page.wait_for_function("el => el.dataset.leaf === 'a4'", arg=transcript.element_handle(), timeout=15_000)
        run = page.locator(".sk-run-view").first
        page.wait_for_function("el => el.dataset.status === 'completed'", arg=run.element_handle(), timeout=15_000)
        assert run.locator(".skr-turn").count() == 2 and "Sunny and 23°C" in run.inner_text()
        # each live view hid the snapshot displayed before it
        page.wait_for_function("() => document.querySelectorAll('[data-sk-snapshot-hidden]').length >= 3",
                               timeout=10_000)
        visible = page.evaluate("() => [...document.querySelectorAll('[data-sessionkit-snapshot]')]"
                                ".filter(el => el.offsetParent !== null).length")
        assert visible == 0
        page.wait_for_timeout(300)
        tree.screenshot(path=str(screenshots / "notebook7-branch-tree.png"))
        transcript.screenshot(path=str(screenshots / "notebook7-transcript.png"))
        run.screenshot(path=str(screenshots / "notebook7-run-view.png"))
        assert not [e for e in errors if e not in baseline], (errors, baseline)
    except Exception:
        page.screenshot(path=str(screenshots / "failure-notebook7.png"))
        raise
    finally:
        context.close()
