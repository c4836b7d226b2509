"""The views in a third anywidget host: marimo (``mo.ui.anywidget``), served by ``marimo run``
and driven in Chromium. Same checks as in JupyterLab: previews arrive over custom messages,
a click in the tree reaches Python, the linked Transcript follows, a replayed run shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import free_port, missing
from pagechecks import HANG_MS, settle
from servers import served, wait_file

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # slow: a marimo server and chromium

HERE = Path(__file__).resolve().parent

APP = """
import marimo

app = marimo.App()


@app.cell
def _():
    import pathlib
    import sys

    sys.path.insert(0, {here!r})
    import marimo as mo
    import nbhelpers as h
    import sessionkit as sk

    OUT = pathlib.Path({out!r})
    store = sk.open_store()
    s = h.demo_session(store)
    agent = sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(h.run_script()), tools=[h.weather])
    result = agent.run_sync("Plan a day", session=store.session("r"))
    branch_tree = sk.widgets.BranchTree(s, height=260)
    branch_tree.observe(lambda ch: (OUT / "selected.txt").write_text(ch["new"] or ""), names="selected_id")
    chat = sk.widgets.Transcript(s, follow=branch_tree, height=300)
    tree = mo.ui.anywidget(branch_tree)
    transcript = mo.ui.anywidget(chat)
    run = mo.ui.anywidget(sk.widgets.RunView(result, height=300))
    mo.vstack([tree, transcript, run])
    return


if __name__ == "__main__":
    app.run()
"""


@pytest.fixture
def marimo_app(chromium_path, tmp_path):
    try:
        import marimo  # noqa: F401
    except ImportError:
        missing("the browser tests need the Python package marimo (pip install -e '.[dev]')")
    out = tmp_path / "out"
    out.mkdir()
    app = tmp_path / "views_app.py"
    app.write_text(APP.format(here=str(HERE), out=str(out)), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    argv = [
        sys.executable,
        "-m",
        "marimo",
        "run",
        str(app),
        "--headless",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-token",
    ]
    with served(argv, name="marimo", ready_url=url, cwd=tmp_path, env=None, log_path=tmp_path / "marimo.log"):
        yield url, out


def test_views_work_in_marimo(marimo_app, browser, screenshots):
    import nbhelpers

    import sessionkit as sk
    from sessionkit.widgets._source import outline_rows, tree_data

    url, out = marimo_app
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(HANG_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(url)
        tree = page.locator(".sk-tree-view").first
        tree.wait_for()
        page.wait_for_function("el => el.dataset.layout === 'done'", arg=tree.element_handle())
        data = tree_data(nbhelpers.demo_session(sk.open_store()))
        rows = outline_rows(data)
        assert tree.get_attribute("data-rows") == str(len(rows))
        # previews come from Python over the widget's custom messages
        page.wait_for_function(
            "el => el.querySelector(\".sk-row[data-id='u3'] .sk-row-text\")?.textContent === "
            "'Great. Where should we eat?'",
            arg=tree.element_handle(),
        )
        row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == "a4")
        tree.locator(".sk-tree-scroll").click(position={"x": 120, "y": row * 22 + 11})
        assert wait_file(out / "selected.txt", HANG_MS / 1000) == "a4"
        transcript = page.locator(".sk-transcript-view").first
        page.wait_for_function("el => el.dataset.leaf === 'a4'", arg=transcript.element_handle())
        page.wait_for_function("el => el.innerText.includes('Try Cervejaria Ramiro')", arg=transcript.element_handle())
        run = page.locator(".sk-run-view").first
        page.wait_for_function("el => el.dataset.status === 'completed'", arg=run.element_handle())
        assert run.locator(".skr-turn").count() == 2 and "Sunny and 23°C" in run.inner_text()
        settle(page)
        tree.screenshot(path=str(screenshots / "marimo-branch-tree.png"))
        transcript.screenshot(path=str(screenshots / "marimo-transcript.png"))
        run.screenshot(path=str(screenshots / "marimo-run-view.png"))
        assert not errors, errors
    except Exception:
        page.screenshot(path=str(screenshots / "failure-marimo.png"))
        raise
    finally:
        context.close()
