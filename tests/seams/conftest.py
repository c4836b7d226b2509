"""Fixtures of the seams: stores holding every kind of fact (tests/seams/facts.py).

- ``every_fact_store(engine)``: a store of that engine (``sqlite``, ``duckdb``,
  ``postgresql``) built by :func:`seams.facts.build_every_fact_store`, once per engine and
  run (the surfaces checked against it only read it), with its notes:
  ``(store, notes)``. Do not write to it.
- ``chromium_path``, ``browser``: the browser fixtures of tests/browser (loaded by file path).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from seams.facts import assert_every_fact_present, build_every_fact_store


@pytest.fixture(scope="session")
def every_fact_store(new_shared_store):
    built: dict[str, tuple] = {}

    def get(engine: str):
        if engine not in built:
            store = new_shared_store(engine, name=f"every-fact-{engine}")
            notes = build_every_fact_store(store)
            assert_every_fact_present(store)
            built[engine] = (store, notes)
        return built[engine]

    return get


# -- the browser fixtures of tests/browser (chromium, playwright) ------------------------------

_BROWSER_TESTS = Path(__file__).resolve().parent.parent / "browser"
if str(_BROWSER_TESTS) not in sys.path:
    sys.path.insert(0, str(_BROWSER_TESTS))
_NAME = "_sessionkit_browser_conftest"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, _BROWSER_TESTS / "conftest.py")
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
chromium_path = sys.modules[_NAME].chromium_path
browser = sys.modules[_NAME].browser
