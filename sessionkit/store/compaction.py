"""A ready-made compaction function: keep the head and the recent tail, summarise the middle.

The overlay itself (a stored summary standing in for a range on read) lives in
``_core.py``; this module decides *what* to summarise and builds the prompt.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from .. import messages as _msg
from ._core import CompactionContext, CompactionResult

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

    async def _await():
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_await())
    box: dict[str, Any] = {}

    def worker():
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


def _tool_ids(message: dict) -> set[str]:
    ids = set()
    for part in message.get("parts") or ():
        if isinstance(part, dict) and "toolCallId" in part:
            ids.add(str(part["toolCallId"]))
    if message.get("tool_call_id"):
        ids.add(str(message["tool_call_id"]))
    return ids


def _is_overlay(message: dict) -> bool:
    return isinstance(message.get("metadata"), dict) and "compaction" in message["metadata"]


def render_for_summary(messages: list[dict]) -> str:
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
) -> Callable[[list[dict], CompactionContext], CompactionResult | None]:
    """Build a compaction function for :meth:`Session.on_compaction` (SPEC C4).

    ``summarize(prompt) -> str`` may be sync or async. The first ``protect_head``
    messages are kept, the newest messages fitting ``keep_recent_tokens`` are kept
    word for word (at least ``min_tail_messages``), a tool call is never separated
    from its result, and an earlier summary in range is fed back in so repeated
    compaction extends one summary rather than stacking them.

    >>> session.on_compaction(create_compact_function(my_llm_summarize)).compact_after(100_000)
    """
    if not callable(summarize):
        raise TypeError("summarize must be callable")
    for name, value in (("keep_recent_tokens", keep_recent_tokens), ("protect_head", protect_head),
                        ("min_tail_messages", min_tail_messages)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")

    def compact(messages: list[dict], ctx: CompactionContext) -> CompactionResult | None:
        n = len(messages)
        start = min(protect_head, n)
        # An earlier summary after the head: extend it (same start -> it replaces the old one).
        for i, m in enumerate(messages):
            if _is_overlay(m):
                start = min(start, i)
                break
        # The tail: newest messages within the token budget, at least min_tail_messages.
        cut = n
        budget = 0
        while cut > start:
            t = _msg.estimate_tokens(messages[cut - 1])
            if n - cut >= min_tail_messages and budget + t > keep_recent_tokens:
                break
            budget += t
            cut -= 1
        # Never separate a tool call from its result: move the cut back until no id straddles it.
        while cut > start:
            head_ids = set().union(*(_tool_ids(m) for m in messages[start:cut]))
            tail_ids = set().union(*(_tool_ids(m) for m in messages[cut:]))
            if head_ids & tail_ids or (cut < n and messages[cut].get("role") == "tool"):
                cut -= 1
                continue
            break
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
