"""Fixtures for agent tests: offline litellm, real stores (in memory and a SQLite file)."""

from __future__ import annotations

import os

# Before anything imports litellm: no network for the price map, no remote lookups.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["LITELLM_OFFLINE_MODE"] = "true"

import pytest

from sessionkit.store import open_store


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    """A real store: in-memory SQLite, then a SQLite file."""
    target = ":memory:" if request.param == "memory" else tmp_path / "runs.db"
    st = open_store(target)
    yield st
    st.close()


@pytest.fixture
def mem_store():
    """An in-memory SQLite store (for tests where the engine does not matter)."""
    st = open_store(":memory:")
    yield st
    st.close()

