"""JupyterLab on 127.0.0.1 and Debian's chromium driven by Playwright, for the browser tests.

Needs the ``chromium`` Debian package (``/usr/bin/chromium``) and the Python
packages playwright, jupyterlab, nbconvert and ipykernel. When one is missing
the tests fail under CI (``CI=true``) and are skipped elsewhere, each time with
a message saying what to install. Playwright never downloads a browser here.

Screenshots of the views go to a temporary folder, or to the folder named by
``SESSIONKIT_SCREENSHOTS`` (``make screenshots`` sets it to ``artifacts/screenshots``,
to refresh the committed images on purpose): a test run leaves the checkout as it was.
The fixtures here also serve tests/notebooks (its conftest loads this file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import missing
from pagechecks import HANG_MS, run_all_cells
from servers import jupyter_server

CHROMIUM = os.environ.get("SESSIONKIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: The environment variable naming a folder to keep the screenshots in.
SCREENSHOTS_ENV = "SESSIONKIT_SCREENSHOTS"


def _missing(what: str) -> None:
    missing(f"browser tests need {what}")


@pytest.fixture(scope="session")
def chromium_path() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _missing(f"Debian's chromium at {CHROMIUM} (apt-get update && apt-get install -y chromium)")
    for module, pkg in (
        ("playwright", "playwright"),
        ("jupyterlab", "jupyterlab"),
        ("nbconvert", "nbconvert"),
        ("ipykernel", "ipykernel"),
        ("nbformat", "nbformat"),
    ):
        try:
            __import__(module)
        except ImportError:
            _missing(f"the Python package {pkg} (pip install -e '.[dev]')")
    return CHROMIUM


@pytest.fixture(scope="session")
def lab(chromium_path, tmp_path_factory):
    """A JupyterLab server on a free 127.0.0.1 port: yields ``(base_url, token, root_dir, env)``."""
    base = tmp_path_factory.mktemp("lab")
    settings = base / "app-settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(
        json.dumps(
            {
                "@jupyterlab/apputils-extension:notification": {"checkForUpdates": False, "fetchNews": "false"},
                "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
            }
        )
    )
    with jupyter_server(
        "lab",
        base,
        [
            f"--LabApp.app_settings_dir={settings}",
            "--LabServerApp.news_url=",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ],
    ) as server:
        yield server.url, server.token, server.root, server.env


@pytest.fixture(scope="session")
def notebook7(chromium_path, tmp_path_factory):
    """A Jupyter Notebook 7 server on a free 127.0.0.1 port: yields ``(base_url, token, root_dir)``."""
    try:
        import notebook  # noqa: F401
    except ImportError:
        _missing("the Python package notebook, Jupyter Notebook 7 (pip install -e '.[dev]')")
    with jupyter_server("notebook", tmp_path_factory.mktemp("nb7")) as server:
        yield server.url, server.token, server.root


_OWN_ERRORS: dict[str, list[str]] = {}


@dataclass
class Host:
    """A notebook front end serving a folder: where its notebooks open, how its kernel is awaited."""

    name: str  # "lab" or "notebook7": the prefix of its screenshots
    url: str
    token: str
    root: Path

    def notebook_url(self, filename: str, workspace: str) -> str:
        """The page of one notebook; in JupyterLab a workspace of its own, so no other notebook reopens."""
        if self.name == "lab":
            return f"{self.url}/lab/workspaces/{workspace}/tree/{filename}?token={self.token}"
        return f"{self.url}/notebooks/{filename}?token={self.token}"

    def open(self, browser, filename: str, workspace: str, *, viewport=(1280, 1000)):
        """A new browser context on the notebook: ``(context, page, errors)``, its cells drawn."""
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.set_default_timeout(HANG_MS)
        page.goto(self.notebook_url(filename, workspace))
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=HANG_MS)
        return context, page, errors

    def own_errors(self, browser) -> list[str]:
        """What a bare notebook logs in this host (an error of Notebook 7's own settings loading
        shows up in some installations): the views may add nothing to it. Measured once per host,
        up to the point the views' notebook is checked from: the kernel ran a cell and showed its output."""
        if self.name not in _OWN_ERRORS:
            import nbformat

            blank = nbformat.v4.new_notebook()
            blank.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
            blank.cells = [nbformat.v4.new_code_cell("1 + 1")]
            nbformat.write(blank, str(self.root / "blank.ipynb"))
            context, page, errors = self.open(browser, "blank.ipynb", "sk-blank")
            try:
                self.run_all(page)
                page.locator(".jp-Notebook .jp-Cell .jp-OutputArea-output", has_text="2").first.wait_for()
            finally:
                context.close()
            _OWN_ERRORS[self.name] = errors
        return _OWN_ERRORS[self.name]

    def run_all(self, page) -> None:
        """Run > Run All Cells once the kernel is up (accepting the kernel chooser if it asks)."""
        run_all_cells(page, visible_only=self.name == "lab")


@pytest.fixture(scope="module", params=["lab", "notebook7"])
def host(request) -> Host:
    """Each test module that takes it runs once in JupyterLab 4, once in Notebook 7."""
    url, token, root, *_ = request.getfixturevalue(request.param)
    return Host(request.param, url, token, root)


@pytest.fixture(scope="module")
def browser(chromium_path):
    # Module scope: Playwright's sync API marks an event loop as running in this thread
    # for as long as it is open, which would break asyncio.run() in later test modules.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory) -> Path:
    """The folder the screenshots go to: ``$SESSIONKIT_SCREENSHOTS`` when set, else a temporary one."""
    chosen = os.environ.get(SCREENSHOTS_ENV)
    if not chosen:
        return tmp_path_factory.mktemp("screenshots")
    folder = Path(chosen)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
