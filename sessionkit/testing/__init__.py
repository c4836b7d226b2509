"""Testing aids: the store conformance suite and, for agents, a scripted model.

The conformance suite is a set of pytest classes; an engine runs it by
providing a ``store`` fixture (a function returning a fresh, empty store)::

    from sessionkit.testing.conformance import *  # noqa: F401,F403

    @pytest.fixture
    def store(tmp_path):
        return sk.open_store(tmp_path / "t.db")
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ScriptedModel", "conformance"]


def __getattr__(name: str) -> Any:
    if name == "ScriptedModel":
        from .scripted import ScriptedModel

        return ScriptedModel
    if name == "conformance":
        return importlib.import_module("sessionkit.testing.conformance")
    raise AttributeError(f"module 'sessionkit.testing' has no attribute {name!r}")
