"""The conformance suite's fixtures, built on the engine's ``make_store``."""

from __future__ import annotations

import pytest

import sessionkit as sk


@pytest.fixture
def store_factory(make_store):
    """Open fresh stores with options; all are closed after the test."""
    opened = []

    def factory(**options):
        st = make_store(**options)
        opened.append(st)
        return st

    yield factory
    for st in opened:
        st.close()


@pytest.fixture
def store(store_factory):
    """A fresh, empty store."""
    return store_factory()


@pytest.fixture
def open_target():
    """How ``reopen`` opens a target again: ``sk.open_store`` (an API wrapping the store
    overrides it, so the suite reopens through that API)."""
    return sk.open_store


@pytest.fixture
def reopen(open_target):
    """``reopen(store, expect_error=None)``: close a store and open its target again.

    Returns the new store, ``"refused"`` when ``expect_error`` was raised, or
    None for stores that keep nothing after close (in memory).
    """
    opened = []

    def do(st, expect_error=None):
        path = st.path
        engine = st.settings.engine
        st.close()
        if path is None:
            return None
        target = path if engine == "postgresql" else f"{engine}:///{path}"
        if expect_error is not None:
            with pytest.raises(expect_error):
                opened.append(open_target(target))
            return "refused"
        again = open_target(target)
        opened.append(again)
        return again

    yield do
    for st in opened:
        st.close()


@pytest.fixture
def raw_sql():
    """Engine-specific raw access: ``raw_sql(store, "tables"|"version"|"bump"|"garbage")`` (``bump``
    records a newer schema version, ``garbage`` a version that is not a number); None when unsupported."""
    return lambda store, what: None
