"""The main job from a fresh clone: ``python -m sessionkit._lab`` brings JupyterLab up on the
notebooks with a demo store, and notebook 1's BranchTree renders in a real browser.

Debian's chromium driven by Playwright (never ``playwright install``), JupyterLab on a free
127.0.0.1 port with every Jupyter folder in a temporary directory.
"""

from __future__ import annotations

import signal
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port
from nbtools import REPO
from pagechecks import HANG_MS, run_all_cells, settle
from servers import launcher

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]  # slow: JupyterLab and chromium, as `make demo` starts them


@pytest.fixture
def main_job(fresh_notebooks, jupyter_env, chromium_path, tmp_path):
    """The launcher started as README's main job starts it; yields ``(url, notebooks, proc, printed)``."""
    argv = [
        sys.executable,
        "-m",
        "sessionkit._lab",
        "--notebooks",
        str(fresh_notebooks),
        "--port",
        str(free_port()),
        "--no-browser",
        "--timeout",
        "150",
    ]
    with launcher(
        argv,
        cwd=REPO,
        env=jupyter_env(tmp_path / "jupyter"),
        pattern=r"(http://127\.0\.0\.1:\d+/lab/tree/\S+\?token=\S+)",
    ) as job:
        yield job.match.group(1), fresh_notebooks, job.proc, job.seen


def test_main_job_opens_notebook_1_with_its_branch_tree(main_job, browser, screenshots):
    url, notebooks, proc, printed = main_job
    assert f":{url.split(':')[2].split('/')[0]}/lab/tree/01-quickstart.ipynb?token=" in url
    assert any("demo store built" in line for line in printed), printed
    assert (notebooks / "demo.db").exists()
    assert (notebooks / ".lab" / "settings" / "overrides.json").exists()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(2 * HANG_MS)  # the notebook's cells build a demo store and run agents
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell")
        # Before anything runs, the saved outputs show the views' static snapshots.
        page.wait_for_selector(".jp-OutputArea-output:has-text('Session deploy-help')")
        run_all_cells(page)  # JupyterLab may ask which kernel to start first: the notebook's own

        # The live BranchTree of the quickstart's own session, then the demo store's.
        tree = page.locator(".sk-tree-view", has_text="Session support").first
        tree.wait_for()
        page.wait_for_function(
            "el => el.dataset.layout === 'done' && Number(el.dataset.rows) > 0", arg=tree.element_handle()
        )
        demo = page.locator(".sk-tree-view", has_text="Session deploy-help").first
        demo.wait_for()
        page.wait_for_function("el => el.dataset.layout === 'done'", arg=demo.element_handle())
        # Python set tree.selected_id = "a1b"; the page follows.
        page.wait_for_function("el => el.dataset.selected === 'a1b'", arg=tree.element_handle())
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
        assert "Error displaying widget" not in page.inner_text(".jp-Notebook")
        demo.scroll_into_view_if_needed()
        settle(page)
        demo.screenshot(path=str(screenshots / "notebook-01-branch-tree.png"))
        assert not errors, errors
    except Exception:
        page.screenshot(path=str(screenshots / "failure-notebook-01.png"))
        raise
    finally:
        context.close()

    # Stopping the launcher stops JupyterLab.
    port = int(url.split(":")[2].split("/")[0])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(HANG_MS / 1000) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=HANG_MS / 1000)
    assert Path(notebooks / ".lab" / "jupyter.log").read_text()
