"""Fixtures for the widget tests: sessions built by the browser test's helpers, and a send recorder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("anywidget", reason="the widgets extra is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

import nbhelpers  # noqa: E402
from viewtools import Sent  # noqa: E402

import sessionkit as sk  # noqa: E402


@pytest.fixture
def store():
    with sk.open_store() as s:
        yield s


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
