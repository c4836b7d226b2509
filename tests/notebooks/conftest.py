"""Fixtures for the notebook tests: the notebooks folder, its helper scripts, fresh copies.

The helper scripts (``notebooks/run_all.py``, ``binder/generate.py``) and the browser
fixtures of ``tests/browser`` (chromium, the browser, the screenshots folder) are loaded by
file path; shared constants live in ``nbtools.py`` beside this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nbtools import BINDER, BROWSER_TESTS, NOTEBOOKS, load_module


@pytest.fixture(scope="session")
def run_all():
    """``notebooks/run_all.py`` as a module (fresh copies, kernel environment, sanitize rules)."""
    return load_module("_sessionkit_nb_run_all", NOTEBOOKS / "run_all.py")


@pytest.fixture(scope="session")
def binder_generate():
    return load_module("_sessionkit_binder_generate", BINDER / "generate.py")


@pytest.fixture
def fresh_notebooks(run_all, tmp_path) -> Path:
    """A copy of notebooks/ as a new clone has it: notebooks, data, sanitize file; nothing generated."""
    return run_all.fresh_copy(tmp_path / "notebooks")


# -- the browser fixtures of tests/browser (chromium, playwright, screenshots) -----------------

if str(BROWSER_TESTS) not in sys.path:
    sys.path.insert(0, str(BROWSER_TESTS))
_browser = load_module("_sessionkit_browser_conftest", BROWSER_TESTS / "conftest.py")
chromium_path = _browser.chromium_path
browser = _browser.browser
screenshots = _browser.screenshots


@pytest.fixture(scope="session")
def jupyter_env():
    """``jupyter_env(base) -> env``: every Jupyter and IPython folder inside ``base``."""
    from servers import jupyter_env

    return jupyter_env
