"""Static snapshots in JupyterLab 4 and Notebook 7: styled when the notebook is opened from disk
with no widget state (untrusted, sanitized: no <style> element survives). That each live view hides
its snapshot is checked in tests/browser/test_views.py."""

from __future__ import annotations

from pathlib import Path

import nbhelpers
import pytest
from pagechecks import settle

import sessionkit as sk
from sessionkit.widgets import _static

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # slow: JupyterLab and chromium

HERE = Path(__file__).resolve().parent


def test_saved_snapshots_keep_their_layout(host, browser, screenshots):
    import nbformat

    root = host.root
    store = sk.open_store()
    s = nbhelpers.demo_session(store)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    outputs = [
        ("tree = sk.widgets.BranchTree(s)", _static.tree_html(s)),
        ("sk.widgets.Transcript(s, 'a4', mode='full')", _static.transcript_html(s, "a4", mode="full")),
    ]
    nb.cells = [
        nbformat.v4.new_code_cell(
            src,
            execution_count=i + 1,
            outputs=[nbformat.v4.new_output("display_data", data={"text/html": html, "text/plain": src})],
        )
        for i, (src, html) in enumerate(outputs)
    ]
    nbformat.write(nb, str(root / "saved.ipynb"))  # not signed: JupyterLab sanitizes its HTML
    context, page, errors = host.open(browser, "saved.ipynb", "sk-saved", viewport=(1280, 900))
    try:
        snap = page.locator(".jp-OutputArea-output .sk-snap-tree").first
        snap.wait_for()
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
        assert (
            page.locator(".sk-snap-transcript .sk-msg.sk-hidden").first.evaluate(
                "el => parseFloat(getComputedStyle(el).opacity)"
            )
            < 1
        )
        settle(page)
        snap.screenshot(path=str(screenshots / f"{host.name}-tree-snapshot.png"))
        page.locator(".jp-OutputArea-output .sk-snap-transcript").first.screenshot(
            path=str(screenshots / f"{host.name}-transcript-snapshot.png")
        )
        assert not [e for e in errors if e not in host.own_errors(browser)], errors
    finally:
        context.close()
