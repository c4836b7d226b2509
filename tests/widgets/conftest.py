"""Fixtures for the widget tests: sessions built by the browser test's helpers, and a send recorder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("anywidget", reason="the widgets extra is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

import nbhelpers
from viewtools import ManualTimers, Sent


@pytest.fixture
def store(new_store):
    """An in-memory SQLite store."""
    return new_store("sqlite", memory=True)


@pytest.fixture
def trip(store):
    """A small tree: tool call, compaction of u1..a2, branch at u3 (a4 | a4b -> u4 -> a5)."""
    return nbhelpers.demo_session(store)


@pytest.fixture
def record():
    """Attach to a widget; returns the list of custom messages it sends from then on."""

    def attach(widget):
        sent = Sent()
        widget.send = lambda content, buffers=None: sent.append(content)
        return sent

    return attach


@pytest.fixture
def manual_timers(monkeypatch):
    """The widgets' batch and refresh timers, fired by the test (see ``viewtools.ManualTimers``)."""
    import threading
    from types import SimpleNamespace

    from sessionkit.widgets import _views

    timers = ManualTimers()
    monkeypatch.setattr(_views, "threading", SimpleNamespace(Timer=timers, RLock=threading.RLock))
    return timers
