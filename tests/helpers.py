"""Plain helpers the test modules share (one home each; fixtures live in the conftest files).

``tests/`` is on ``sys.path`` (``tests/conftest.py`` puts it there), so a test module
imports these as ``from helpers import msg, free_port, wait_until``.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from typing import Any

#: The columns of a messages DataFrame, in order (docs/analysis.md), as the tests expect them.
D1 = [
    "session_id",
    "id",
    "parent_id",
    "depth",
    "role",
    "text",
    "n_parts",
    "tool_names",
    "tokens",
    "bytes",
    "created_at",
    "n_children",
    "on_latest_path",
    "compacted_by",
]


def msg(mid: str, text: str = "", role: str = "user", **extra: Any) -> dict:
    """A one-text-part message; the text defaults to ``"text of <id>"``."""
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}], **extra}


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def message(mid: str, *parts: dict, role: str = "user", **extra: Any) -> dict:
    """A message of exactly the given parts (none at all when none are given)."""
    return {"id": mid, "role": role, "parts": list(parts), **extra}


def with_tools(message: dict, *names: str) -> dict:
    """``message`` with one finished tool call part per name appended (call ids ``<id>-<name>``)."""
    mid = message["id"]
    tools = [
        {
            "type": f"tool-{name}",
            "toolCallId": f"{mid}-{name}",
            "state": "output-available",
            "input": {"q": mid},
            "output": {"ok": True},
        }
        for name in names
    ]
    return {**message, "parts": [*message["parts"], *tools]}


def payload(key: str, size: int) -> bytes:
    """``size`` bytes that follow from ``key`` alone (a repeated SHA-256 of it)."""
    import hashlib

    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], Any], *, timeout: float = 60.0, interval: float = 0.01, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that.

    The timeout only bounds a test that would otherwise hang: it is far above what any
    awaited state takes on a loaded machine, and running out of it is an assertion error
    naming ``what`` was awaited.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate!r}")
        time.sleep(interval)


def missing(what: str) -> None:
    """A test cannot run for want of ``what`` (a package, a program): it fails under CI
    (``CI=true``), where everything must be installed, and is skipped elsewhere; either way
    the message says what to install."""
    import os

    import pytest

    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(what, pytrace=False)
    pytest.skip(what)


def kinds(events: list[dict]) -> list[str]:
    """The ``kind`` of each run event, in order."""
    return [e["kind"] for e in events]


def get_weather(city: str) -> dict:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return {"city": city, "sky": "sunny", "celsius": 21}


def weather(city: str) -> str:
    """The weather of a city."""
    if city == "Atlantis":  # a tool call that fails
        raise ValueError("no such city")
    return f"sunny in {city}"


def chat_tool_call(cid: str, name: str, args: dict) -> dict:
    """One entry of an OpenAI chat message's ``tool_calls``."""
    import json

    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def litellm_tool_call(name: str, arguments: dict, call_id: str = "call_1", model: str = "gpt-4o-mini"):
    """A litellm reply calling one tool (for ``mock_response``), with a known usage of 40 in, 12 out."""
    import litellm

    return litellm.ModelResponse(
        model=model,
        choices=[
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [chat_tool_call(call_id, name, arguments)],
                },
            }
        ],
        usage={"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    )


def content_text(content: Any) -> str:
    """The text of a chat message's content: a string, or the text blocks of a list of blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def result_ids(result: Any) -> list[str]:
    """The ids an import returned: its results' message ids (OpenAI) or its sessions' ids."""
    if hasattr(result, "ids"):
        return result.ids
    return [s.session_id for s in result]


class StalledModel:
    """A chat model whose reply never comes in time: each call waits until it is cancelled.

    ``answered`` turns true only if a call ran to its end, which the 60 s wait (a bound
    on a broken test, far beyond any run's timeout) makes the sign of a run that waited
    for its model call instead of abandoning it.
    """

    name = "stalled"

    def __init__(self) -> None:
        self.calls = 0
        self.answered = False

    async def stream(self, messages: list[dict], *, tools: list[dict]):
        import asyncio

        from sessionkit.agent.models import ModelReply

        self.calls += 1
        await asyncio.sleep(60)
        self.answered = True
        yield ModelReply(text="late", usage={})


def import_file(kind: str, store: Any, path: Any) -> Any:
    """Import ``path`` with the importer of ``kind`` (``openai``, ``oasst``, ``hh``, ``jsonl``...);
    an OpenAI chat goes into the session ``"chat"``."""
    import sessionkit as sk

    if kind == "openai":
        return sk.io.import_openai(store.session("chat"), path)
    return getattr(sk.io, f"import_{kind}")(store, path)


@contextlib.contextmanager
def viewer_in_thread(app):
    """uvicorn serving the viewer's ``app`` on a free 127.0.0.1 port, in a thread; its base URL.
    On the way out the pages' ``/api/changes`` streams are ended, then the server."""
    import socket
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="the viewer to listen")
        assert server.started, "the viewer did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        app.state.stopping.set()
        server.should_exit = True
        thread.join(60)
        sock.close()
