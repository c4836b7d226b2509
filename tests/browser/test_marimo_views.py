"""The views in a third anywidget host: marimo (``mo.ui.anywidget``), served by ``marimo run``
and driven in Chromium. Same checks as in JupyterLab: previews arrive over custom messages,
a click in the tree reaches Python, the linked Transcript follows, a replayed run shows.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # slow: a marimo server and chromium

HERE = Path(__file__).resolve().parent

APP = '''
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
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path.name} did not appear within {timeout} s")


@pytest.fixture
def marimo_app(chromium_path, tmp_path):
    try:
        import marimo  # noqa: F401
    except ImportError:
        message = "the browser tests need the Python package marimo (pip install -e '.[dev]')"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    out = tmp_path / "out"
    out.mkdir()
    app = tmp_path / "views_app.py"
    app.write_text(APP.format(here=str(HERE), out=str(out)), encoding="utf-8")
    port = _free_port()
    log = open(tmp_path / "marimo.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "marimo", "run", str(app), "--headless", "--host", "127.0.0.1",
                             "--port", str(port), "--no-token"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"marimo exited with {proc.returncode}:\n{(tmp_path / 'marimo.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("marimo did not answer within 60 s")
            time.sleep(0.25)
        yield url, out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def test_views_work_in_marimo(marimo_app, browser, screenshots):
    import nbhelpers
    import sessionkit as sk
    from sessionkit.widgets._source import outline_rows, tree_data

    url, out = marimo_app
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(url)
        tree = page.locator(".sk-tree-view").first
        tree.wait_for(timeout=60_000)
        page.wait_for_function("el => el.dataset.layout === 'done'", arg=tree.element_handle(), timeout=30_000)
        data = tree_data(nbhelpers.demo_session(sk.open_store()))
        rows = outline_rows(data)
        assert tree.get_attribute("data-rows") == str(len(rows))
        # previews come from Python over the widget's custom messages
        page.wait_for_function("el => el.querySelector(\".sk-row[data-id='u3'] .sk-row-text\")?.textContent === "
                               "'Great. Where should we eat?'", arg=tree.element_handle(), timeout=15_000)
        row = next(k for k, r in enumerate(rows) if r[0] == "node" and data.ids[r[1]] == "a4")
        tree.locator(".sk-tree-scroll").click(position={"x": 120, "y": row * 22 + 11})
        assert _wait_file(out / "selected.txt", 15) == "a4"
        transcript = page.locator(".sk-transcript-view").first
        page.wait_for_function("el => el.dataset.leaf === 'a4'", arg=transcript.element_handle(), timeout=15_000)
        page.wait_for_function("el => el.innerText.includes('Try Cervejaria Ramiro')", arg=transcript.element_handle(),
                               timeout=15_000)
        run = page.locator(".sk-run-view").first
        page.wait_for_function("el => el.dataset.status === 'completed'", arg=run.element_handle(), timeout=15_000)
        assert run.locator(".skr-turn").count() == 2 and "Sunny and 23°C" in run.inner_text()
        page.wait_for_timeout(300)
        tree.screenshot(path=str(screenshots / "marimo-branch-tree.png"))
        transcript.screenshot(path=str(screenshots / "marimo-transcript.png"))
        run.screenshot(path=str(screenshots / "marimo-run-view.png"))
        assert not errors, errors
    except Exception:
        page.screenshot(path=str(screenshots / "failure-marimo.png"))
        raise
    finally:
        context.close()
