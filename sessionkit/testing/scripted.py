"""ScriptedModel: a model that replays a script, for tests, notebooks and demos (docs/agents.md).

Each model call takes the next reply of the script, across runs::

    model = ScriptedModel([
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
        "1 + 2 = 3",
    ])
    agent = sk.Agent("calc", "You add numbers.", model, tools=[add])

A reply is one of:

- a string: the final text;
- a dict with any of ``text``, ``reasoning``, ``tool_calls`` (``[{"name",
  "arguments": dict, "id"?}]``), ``usage`` (``{"in", "out"}``, optionally
  ``cache_read``, ``cache_write``, ``cost_usd``), ``error`` (an exception to
  raise, as a provider would), ``delay`` (seconds to wait before answering) and
  ``stop_reason``;
- a callable ``reply(messages) -> str | dict`` computed from the chat messages
  the call received.

Text is streamed in several deltas (word by word). ``model.calls`` holds the
chat messages each call received; ``model.remaining`` counts unused replies.
Running past the end of the script raises :class:`ScriptExhausted`. Without
``usage`` a reply reports a rough token estimate (characters / 4) and an
unknown cost (``cost_usd=None``): a scripted model has no price.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

from ..agent.models import ModelReply, ReasoningDelta, TextDelta, ToolCall, make_usage

__all__ = ["ScriptExhausted", "ScriptedModel"]

_DELTA_RE = re.compile(r"\s*\S+\s*|\s+")
_REPLY_KEYS = {"text", "reasoning", "tool_calls", "usage", "error", "delay", "stop_reason"}


class ScriptExhausted(RuntimeError):
    """The script has no reply left for this call."""


def _split(text: str) -> list[str]:
    """Split text into word-sized deltas that join back to the same text."""
    pieces = _DELTA_RE.findall(text)
    return pieces if "".join(pieces) == text else [text]


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


class ScriptedModel:
    """A :class:`~sessionkit.agent.models.ChatModel` replaying scripted replies."""

    def __init__(self, script: Iterable[Any], *, name: str = "scripted") -> None:
        if isinstance(script, (str, dict)):
            raise TypeError("script must be a list of replies (wrap a single reply in a list)")
        self._script = list(script)
        for index, reply in enumerate(self._script):
            _check_reply(reply, index)
        self.name = name
        self.calls: list[list[dict]] = []
        self.tools: list[list[dict]] = []
        self._next = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedModel({len(self._script)} replies, {self.remaining} left)"

    @property
    def remaining(self) -> int:
        """How many replies are left."""
        return len(self._script) - self._next

    def add(self, *replies: Any) -> ScriptedModel:
        """Append replies to the script (chainable)."""
        for reply in replies:
            _check_reply(reply, len(self._script))
            self._script.append(reply)
        return self

    async def stream(
        self, messages: list[dict], *, tools: list[dict]
    ) -> AsyncIterator[TextDelta | ReasoningDelta | ModelReply]:
        """Answer one call with the next scripted reply, streaming its text."""
        with self._lock:
            index = self._next
            self.calls.append(copy.deepcopy(messages))
            self.tools.append(copy.deepcopy(tools))
            if index >= len(self._script):
                raise ScriptExhausted(
                    f"{self.name}: the script has {len(self._script)} replies; call {index + 1} has none"
                )
            self._next += 1
            reply = self._script[index]
        if callable(reply):
            reply = reply(copy.deepcopy(messages))
            _check_reply(reply, index)
        if isinstance(reply, str):
            reply = {"text": reply}
        delay = reply.get("delay")
        if delay:
            await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)
        if reply.get("error") is not None:
            raise reply["error"]
        reasoning = reply.get("reasoning") or ""
        for piece in _split(reasoning) if reasoning else ():
            yield ReasoningDelta(piece)
            await asyncio.sleep(0)
        text = reply.get("text") or ""
        for piece in _split(text) if text else ():
            yield TextDelta(piece)
            await asyncio.sleep(0)
        calls = tuple(
            ToolCall(
                id=str(call.get("id") or f"call_{index + 1}_{n + 1}"),
                name=call["name"],
                arguments=copy.deepcopy(call.get("arguments") or {}),
            )
            for n, call in enumerate(reply.get("tool_calls") or ())
        )
        usage = reply.get("usage") or {}
        prompt_chars = sum(len(json.dumps(m.get("content"), ensure_ascii=False)) for m in messages)
        yield ModelReply(
            text=text,
            reasoning=reasoning,
            tool_calls=calls,
            usage=make_usage(
                model=self.name,
                input_tokens=usage.get("in", math.ceil(prompt_chars / 4)),
                output_tokens=usage.get("out", _estimate(text + reasoning) + 10 * len(calls)),
                cache_read=usage.get("cache_read", 0),
                cache_write=usage.get("cache_write", 0),
                cost_usd=usage.get("cost_usd"),
            ),
            stop_reason=reply.get("stop_reason") or ("tool_calls" if calls else "stop"),
        )


def _check_reply(reply: Any, index: int) -> None:
    if isinstance(reply, str) or callable(reply):
        return
    if not isinstance(reply, dict):
        raise TypeError(f"script[{index}]: a reply is a str, a dict or a callable, got {type(reply).__name__}")
    unknown = set(reply) - _REPLY_KEYS
    if unknown:
        raise ValueError(f"script[{index}]: unknown keys {sorted(unknown)}; use {sorted(_REPLY_KEYS)}")
    error = reply.get("error")
    if (
        error is not None
        and not isinstance(error, BaseException)
        and not (isinstance(error, type) and issubclass(error, BaseException))
    ):
        raise TypeError(f"script[{index}]: 'error' must be an exception")
    for call in reply.get("tool_calls") or ():
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError(f"script[{index}]: each tool call needs a 'name'")
        if call.get("arguments") is not None and not isinstance(call["arguments"], dict):
            raise TypeError(f"script[{index}]: tool call 'arguments' must be a dict")
