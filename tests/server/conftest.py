"""Fixtures for the HTTP tests: real servers (uvicorn on 127.0.0.1), stores, event-stream readers."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from live_server import TOKEN, LiveServer, SSEReader

from sessionkit.server import create_app


@pytest.fixture
def serve(new_store):
    """``serve(agent, store, **create_app_options) -> LiveServer``; everything stops at the end
    (before the test's stores close: ``new_store`` is set up first, so torn down last)."""
    started: list[LiveServer] = []

    def start(agent, store, *, uvicorn_config: dict | None = None, **options) -> LiveServer:
        if "token" not in options and "authenticate" not in options:
            options["token"] = TOKEN
        live = LiveServer(create_app(agent, store, **options), **(uvicorn_config or {})).start()
        started.append(live)
        return live

    yield start
    for live in reversed(started):
        live.stop()


@pytest.fixture
def store(engine, new_store):
    """The server's store, one per engine of the matrix (tests/conftest.py): a SQLite file,
    a DuckDB file (both leased to one server), a PostgreSQL store (where servers coordinate
    through the database)."""
    return new_store(engine, name="server")


@pytest.fixture
def sse():
    readers: list[SSEReader] = []

    def open_(url: str, headers: dict | None = None) -> SSEReader:
        reader = SSEReader(url, headers)
        readers.append(reader)
        return reader

    yield open_
    for reader in readers:
        reader.close()
