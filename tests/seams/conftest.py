"""Fixtures of the seams: stores holding every kind of fact (tests/seams/facts.py).

- ``every_fact_store(engine)``: a store of that engine (``sqlite``, ``duckdb``,
  ``postgresql``) built by :func:`seams.facts.build_every_fact_store`, once per engine and
  run (the surfaces checked against it only read it), with its notes:
  ``(store, notes)``. Do not write to it.
"""

from __future__ import annotations

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
