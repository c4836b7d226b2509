"""Fixtures of the store tests; the store matrix they build on (``new_store``, the variants
and engines) is in tests/conftest.py."""

from __future__ import annotations

import pytest


@pytest.fixture
def store(request, new_store):
    """A fresh store, closed after the test.

    Its kind (an engine or variant of the store matrix) is the test's parameter when the
    test gives one (``@pytest.mark.parametrize("store", [...], indirect=True)``), else the
    module's ``STORE_KIND``, else ``"sqlite"`` (a SQLite file).
    """
    kind = getattr(request, "param", None) or getattr(request.module, "STORE_KIND", "sqlite")
    return new_store(kind)
