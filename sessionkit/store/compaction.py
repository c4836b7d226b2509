"""A ready-made compaction function: keep the head and the recent tail, summarise the middle.

The overlay itself (a stored summary standing in for a range on read) lives in
``_overlay.py`` and ``_session.py``; this module decides *what* to summarise and builds the prompt.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .. import messages as _msg
from ._values import CompactionContext, CompactionResult

__all__ = ["create_compact_function", "render_for_summary", "run_maybe_async"]

SUMMARY_INSTRUCTIONS = (
    "You are compacting a long conversation so that it fits in a model's context window.\n"
    "Write a concise summary of the conversation excerpt below that keeps every fact, decision,\n"
    "name, number, open question and tool result that later turns may need. Write it as notes,\n"
    "not as a dialogue. Do not add anything that is not in the excerpt."
)


def run_maybe_async(value: Any) -> Any:
    """Resolve ``value`` if it is awaitable, also when called inside a running event loop.

    Inside a running loop (a notebook cell) the coroutine runs on a private loop in
    a worker thread, since the caller's loop cannot be re-entered.
    """
    if not inspect.isawaitable(value):
        return value

    async def _await() -> Any:
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await())
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(_await())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=worker, name="sessionkit-summarize", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


_RESULT_STATES = frozenset({"output-available", "output-error", "output-denied"})


def _tool_marks(message: dict[str, Any]) -> Iterator[tuple[str, bool | None]]:
    """``(call id, is_result)`` for each tool call or result a message carries.

    Shapes met: tool parts (``toolCallId``, any part type) holding the call and,
    once answered, its ``output`` (or ``errorText``, or an ``output-*`` state);
    a later message repeating the ``toolCallId`` with the output, often with role
    ``tool``; and the chat-completions shape, ``tool_calls`` on the assistant
    message and ``tool_call_id`` on a ``tool`` message. A part that holds both
    the call and its output needs no partner and is not reported.
    """
    is_tool_message = message.get("role") == "tool"
    for part in message.get("parts") or ():
        if not isinstance(part, dict) or part.get("toolCallId") is None:
            continue
        answered = "output" in part or "errorText" in part or part.get("state") in _RESULT_STATES
        if is_tool_message:
            yield str(part["toolCallId"]), True
        elif not answered:
            yield str(part["toolCallId"]), False
        else:  # the call and its answer in one part; answers a call made earlier, if any
            yield str(part["toolCallId"]), None
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, dict) and call.get("id") is not None:
                yield str(call["id"]), False
    if message.get("tool_call_id") is not None:
        yield str(message["tool_call_id"]), True


def _unsplittable(messages: list[dict[str, Any]]) -> list[bool]:
    """``out[p]``: whether the boundary before ``messages[p]`` would part a tool call from its
    result (``p`` from 0 to ``len(messages)``; the two ends never do).

    A result pairs with the nearest earlier open call of the same id (ids may be
    reused over a long conversation), and every boundary between the two is
    refused; so is one just before a ``tool`` message, which answers what came
    before it even without an id.
    """
    n = len(messages)
    open_calls: dict[str, int] = {}
    cover = [0] * (n + 2)  # difference array over boundaries
    for j, message in enumerate(messages):
        for cid, is_result in _tool_marks(message):
            i = open_calls.get(cid)
            if is_result is False:  # a call waiting for its result
                open_calls[cid] = j
                continue
            if i is not None:  # the result (or the answered call) of the open call i
                del open_calls[cid]
                if i < j:
                    cover[i + 1] += 1
                    cover[j + 1] -= 1
    out = [False] * (n + 1)
    depth = 0
    for p in range(n + 1):
        depth += cover[p]
        out[p] = depth > 0 or (0 < p < n and messages[p].get("role") == "tool")
    return out


def _is_overlay(message: dict[str, Any]) -> bool:
    return isinstance(message.get("metadata"), dict) and "compaction" in message["metadata"]


def render_for_summary(messages: list[dict[str, Any]]) -> str:
    """Plain-text rendering of messages for a summarisation prompt."""
    lines = []
    for m in messages:
        role = m.get("role", "?")
        for part in m.get("parts") or ():
            ptype = part.get("type", "")
            if ptype == "text":
                lines.append(f"{role}: {part.get('text', '')}")
            elif ptype == "reasoning":
                lines.append(f"{role} (reasoning): {part.get('text', '')}")
            elif ptype.startswith("tool-"):
                name = ptype[5:]
                args = json.dumps(part.get("input"), ensure_ascii=False)
                lines.append(f"{role} called tool {name}({args})")
                if "output" in part:
                    out = part["output"]
                    out = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
                    lines.append(f"tool {name} returned: {out}")
                if part.get("errorText"):
                    lines.append(f"tool {name} failed: {part['errorText']}")
            elif ptype == "file":
                lines.append(f"{role} attached a file ({part.get('mediaType', 'unknown type')})")
    return "\n".join(lines)


def create_compact_function(
    summarize: Callable[[str], Any],
    *,
    keep_recent_tokens: int = 20_000,
    protect_head: int = 3,
    min_tail_messages: int = 2,
) -> Callable[[list[dict[str, Any]], CompactionContext], CompactionResult | None]:
    """Build a compaction function for :meth:`Session.on_compaction` (docs/compaction.md).

    ``summarize(prompt) -> str`` may be sync or async. The first ``protect_head``
    messages are kept, the newest messages fitting ``keep_recent_tokens`` are kept
    word for word (at least ``min_tail_messages``), a tool call is never separated
    from its result, and an earlier summary in range is fed back in so repeated
    compaction extends one summary rather than stacking them.

    >>> session.on_compaction(create_compact_function(my_llm_summarize)).compact_after(100_000)
    """
    if not callable(summarize):
        raise TypeError("summarize must be callable")
    for name, value in (
        ("keep_recent_tokens", keep_recent_tokens),
        ("protect_head", protect_head),
        ("min_tail_messages", min_tail_messages),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")

    def compact(messages: list[dict[str, Any]], ctx: CompactionContext) -> CompactionResult | None:
        n = len(messages)
        start = min(protect_head, n)
        # An earlier summary after the head: extend it (same start -> it replaces the old one).
        for i, m in enumerate(messages):
            if _is_overlay(m):
                start = min(start, i)
                break
        # Never separate a tool call from its result: a call the head keeps keeps its result,
        # so the head grows until the boundary parts no pair.
        fixed = _unsplittable(messages)
        while start < n and fixed[start]:
            start += 1
        # The tail: newest messages within the token budget, at least min_tail_messages.
        cut = n
        budget = 0
        while cut > start:
            t = _msg.estimate_tokens(messages[cut - 1])
            if n - cut >= min_tail_messages and budget + t > keep_recent_tokens:
                break
            budget += t
            cut -= 1
        # Likewise at the tail: move the cut back until it parts no pair.
        while cut > start and fixed[cut]:
            cut -= 1
        chunk = messages[start:cut]
        if not chunk or (len(chunk) == 1 and _is_overlay(chunk[0])):
            return None
        previous = [m for m in chunk if _is_overlay(m)]
        fresh = [m for m in chunk if not _is_overlay(m)]
        prompt = SUMMARY_INSTRUCTIONS
        if previous:
            earlier = "\n".join(p["parts"][0]["text"] for p in previous)
            prompt += "\n\nSummary of the conversation so far (extend it):\n" + earlier
        prompt += "\n\nConversation excerpt:\n" + render_for_summary(fresh)
        summary = run_maybe_async(summarize(prompt))
        if not isinstance(summary, str):
            raise TypeError(f"summarize must return a str, got {type(summary).__name__}")
        return CompactionResult(chunk[0]["id"], chunk[-1]["id"], summary)

    return compact
