"""Static snapshots in JupyterLab: styled when the notebook is opened from disk (untrusted,
sanitized: no <style> element survives), hidden once the live widget renders next to them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import nbhelpers
import sessionkit as sk
from sessionkit.widgets import _static

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]  # slow: JupyterLab and chromium

HERE = Path(__file__).resolve().parent


def _open(browser, url: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    return context, page, errors


def _accept_kernel(page) -> None:
    try:  # JupyterLab may ask which kernel to start: the notebook's own
        page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
        page.locator(".jp-Dialog .jp-mod-accept").first.click()
    except Exception:
        pass


def test_saved_snapshots_keep_their_layout_in_jupyterlab(lab, browser, screenshots):
    import nbformat

    url, token, root, _env = lab
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    outputs = [
        ("tree = sk.widgets.BranchTree(s)", _static.tree_html(s)),
        ("sk.widgets.Transcript(s, 'a4', mode='full')", _static.transcript_html(s, "a4", mode="full")),
    ]
    nb.cells = [nbformat.v4.new_code_cell(src, execution_count=i + 1, outputs=[nbformat.v4.new_output(
        "display_data", data={"text/html": html, "text/plain": src})]) for i, (src, html) in enumerate(outputs)]
    nbformat.write(nb, str(root / "saved.ipynb"))  # not signed: JupyterLab sanitizes its HTML
    # a workspace of its own: the notebooks opened here do not reopen in other tests' JupyterLab
    context, page, errors = _open(browser, f"{url}/lab/workspaces/sk-saved/tree/saved.ipynb?token={token}")
    try:
        snap = page.locator(".jp-OutputArea-output .sk-snap-tree").first
        snap.wait_for(timeout=30_000)
        assert page.locator(".jp-OutputArea-output style").count() == 0  # the sanitizer dropped <style>
        prev = snap.locator("td.sk-prev").first
        assert prev.evaluate("el => getComputedStyle(el).textAlign") in ("left", "start")
        active = snap.locator("tr.sk-active td.sk-prev").first
        assert int(active.evaluate("el => getComputedStyle(el).fontWeight")) >= 600
        inactive = snap.locator("tr:not(.sk-active) td.sk-prev").first
        assert int(inactive.evaluate("el => getComputedStyle(el).fontWeight")) < 600
        badge = snap.locator(".sk-badge").first
        assert badge.evaluate("el => getComputedStyle(el).backgroundColor") not in ("rgba(0, 0, 0, 0)", "transparent")
        msg = page.locator(".jp-OutputArea-output .sk-snap-transcript .sk-msg").first
        assert msg.evaluate("el => parseFloat(getComputedStyle(el).borderLeftWidth)") >= 3
        assert msg.evaluate("el => getComputedStyle(el).textAlign") in ("left", "start")
        assert page.locator(".sk-snap-transcript .sk-msg.sk-hidden").first.evaluate(
            "el => parseFloat(getComputedStyle(el).opacity)") < 1
        snap.screenshot(path=str(screenshots / "lab-saved-tree-snapshot.png"))
        page.locator(".jp-OutputArea-output .sk-snap-transcript").first.screenshot(
            path=str(screenshots / "lab-saved-transcript-snapshot.png"))
        assert not errors, errors
    finally:
        context.close()


def test_live_views_hide_their_snapshot_outputs(lab, browser, screenshots, tmp_path):
    import nbformat

    url, token, root, _env = lab
    done = tmp_path / "done.txt"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in (
        f"import sys, pathlib\nsys.path.insert(0, {str(HERE)!r})\nimport sessionkit as sk, nbhelpers as h\n"
        "store = sk.open_store(); s = h.demo_session(store)",
        "sk.widgets.BranchTree(s, height=240)",
        "sk.widgets.Transcript(s, 'a4', height=240)",
        "s",
        f"pathlib.Path({str(done)!r}).write_text('ok')",
    )]
    nbformat.write(nb, str(root / "live.ipynb"))
    context, page, errors = _open(browser, f"{url}/lab/workspaces/sk-live/tree/live.ipynb?token={token}")
    try:
        _accept_kernel(page)
        page.wait_for_function("() => [...document.querySelectorAll('.jp-Notebook-ExecutionIndicator')]"
                               ".some(el => el.offsetParent !== null && el.dataset.status === 'idle')", timeout=60_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert done.exists(), "the notebook did not finish"
        page.wait_for_function("() => document.querySelectorAll('.sk-tree-view').length >= 2 && "
                               "document.querySelectorAll('.sk-transcript-view').length >= 1", timeout=30_000)
        # each view's snapshot output is in the page but hidden: the live widget replaces it
        try:
            page.wait_for_function("() => document.querySelectorAll('[data-sk-snapshot-hidden]').length >= 3",
                                   timeout=10_000)
        except Exception:
            page.screenshot(path=str(screenshots / "failure-lab-live-views.png"))
            raise AssertionError(page.evaluate(
                "() => [...document.querySelectorAll('.jp-OutputArea-output')].map(e => e.outerHTML.slice(0, 300))"))
        visible = page.evaluate("() => [...document.querySelectorAll('.jp-Notebook [data-sessionkit-snapshot]')]"
                                ".filter(el => el.offsetParent !== null).length")
        assert visible == 0
        page.screenshot(path=str(screenshots / "lab-live-views.png"))
        assert not errors, errors
    finally:
        context.close()
