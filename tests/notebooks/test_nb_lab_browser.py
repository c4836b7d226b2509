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
from nbtools import REPO
from servers import free_port, launcher

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # slow: JupyterLab and chromium, as `make demo` starts them

SHOTS = REPO / "artifacts" / "screenshots"


@pytest.fixture
def main_job(fresh_notebooks, jupyter_env, chromium_path, tmp_path):
    """The launcher started as README's main job starts it; yields ``(url, notebooks, proc, printed)``."""
    argv = [sys.executable, "-m", "sessionkit._lab", "--notebooks", str(fresh_notebooks), "--port", str(free_port()),
            "--no-browser", "--timeout", "150"]
    with launcher(argv, cwd=REPO, env=jupyter_env(tmp_path / "jupyter"),
                  pattern=r"(http://127\.0\.0\.1:\d+/lab/tree/\S+\?token=\S+)") as job:
        yield job.match.group(1), fresh_notebooks, job.proc, job.seen


def test_main_job_opens_notebook_1_with_its_branch_tree(main_job, browser):
    url, notebooks, proc, printed = main_job
    assert f":{url.split(':')[2].split('/')[0]}/lab/tree/01-quickstart.ipynb?token=" in url
    assert any("demo store built" in line for line in printed), printed
    assert (notebooks / "demo.db").exists()
    assert (notebooks / ".lab" / "settings" / "overrides.json").exists()

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        # Before anything runs, the saved outputs show the views' static snapshots.
        page.wait_for_selector(".jp-OutputArea-output:has-text('Session deploy-help')", timeout=30_000)
        try:  # JupyterLab may ask which kernel to start: the notebook's own
            page.wait_for_selector(".jp-Dialog .jp-mod-accept", timeout=5_000)
            page.locator(".jp-Dialog .jp-mod-accept").first.click()
        except Exception:
            pass
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()

        # The live BranchTree of the quickstart's own session, then the demo store's.
        tree = page.locator(".sk-tree-view", has_text="Session support").first
        tree.wait_for(timeout=90_000)
        page.wait_for_function("el => el.dataset.layout === 'done' && Number(el.dataset.rows) > 0",
                               arg=tree.element_handle(), timeout=30_000)
        demo = page.locator(".sk-tree-view", has_text="Session deploy-help").first
        demo.wait_for(timeout=90_000)
        page.wait_for_function("el => el.dataset.layout === 'done'", arg=demo.element_handle(), timeout=30_000)
        # Python set tree.selected_id = "a1b"; the page follows.
        page.wait_for_function("el => el.dataset.selected === 'a1b'", arg=tree.element_handle(), timeout=30_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() == 0
        assert "Error displaying widget" not in page.inner_text(".jp-Notebook")
        SHOTS.mkdir(parents=True, exist_ok=True)
        demo.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        demo.screenshot(path=str(SHOTS / "notebook-01-branch-tree.png"))
        assert not errors, errors
    except Exception:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "failure-notebook-01.png"))
        raise
    finally:
        context.close()

    # Stopping the launcher stops JupyterLab.
    port = int(url.split(":")[2].split("/")[0])
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=3)
    assert Path(notebooks / ".lab" / "jupyter.log").read_text()
