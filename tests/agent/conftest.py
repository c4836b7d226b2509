"""Fixtures for agent tests: offline litellm, real stores (one per engine, and an in-memory SQLite one)."""

from __future__ import annotations

import os

# Before anything imports litellm: no network for the price map, no remote lookups.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["LITELLM_OFFLINE_MODE"] = "true"

import pytest


@pytest.fixture
def store(engine, new_store):
    """A real store of each engine of the matrix (tests/conftest.py): a SQLite file, a DuckDB
    file, a PostgreSQL store."""
    return new_store(engine, name="runs")


@pytest.fixture
def mem_store(new_store):
    """An in-memory SQLite store (for tests where the engine does not matter)."""
    return new_store("sqlite", memory=True)
