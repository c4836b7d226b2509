"""What the model sees of a conversation: :class:`HistoryPolicy` (docs/prototyping.md).

A run reads the path it continues (compaction applied) and, by default, sends
all of it to the model. A policy narrows that, on top of compaction::

    agent = sk.Agent("helper", "Be brief.", model,
                     history=sk.HistoryPolicy(max_messages=20, max_tokens=4_000))

    def no_tool_chatter(history, new_input):
        kept = [m for m in history if not any(p["type"].startswith("tool-") for p in m["parts"])]
        return kept + new_input

    await agent.run("Go on", session=s, history=sk.HistoryPolicy(hook=no_tool_chatter))

In order:

1. ``max_messages`` keeps the newest N messages of the stored history;
2. ``max_tokens`` then drops the oldest messages until the history's token
   estimate (:func:`sessionkit.messages.estimate_tokens`, the store's own count)
   is within the budget; the run's new input does not count against it;
3. ``hook(history, new_input)`` gets deep copies of the trimmed history and of
   the run's new input (``[user message]``: the prompt, or for a regeneration
   the user message answered again) and returns the list of messages the model
   sees, in place of ``history + new_input``. It may drop, rewrite or add
   messages (UIMessage dicts); it changes what the model receives, never what
   is stored: the run appends the same messages either way. The hook is a plain
   function, called on a worker thread (a slow one does not block the event loop).

The policy shapes the first model call of the run; the run's own later turns
(tool results, queued messages) follow it as usual. A bad limit raises
``TypeError``/``ValueError`` when the policy is made; a hook that raises, or
returns anything but a list of messages, fails the run before anything is
recorded (:class:`~sessionkit.UsageError` naming the hook and the problem).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError
from ..messages import estimate_tokens

__all__ = ["HistoryPolicy"]


def _limit(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, got {value}")
    return value


@dataclass(frozen=True)
class HistoryPolicy:
    """Limits and an input hook deciding what the model sees of the history (see the module docstring)."""

    max_messages: int | None = None
    max_tokens: int | None = None
    hook: Callable[[list[dict], list[dict]], list[dict]] | None = None

    def __post_init__(self) -> None:
        _limit(self.max_messages, "max_messages")
        _limit(self.max_tokens, "max_tokens")
        if self.hook is not None and not callable(self.hook):
            raise TypeError(f"hook must be callable, got {type(self.hook).__name__}")

    def trim(self, history: list[dict]) -> list[dict]:
        """The newest messages of ``history`` within ``max_messages`` and ``max_tokens``."""
        kept = list(history)
        if self.max_messages is not None:
            kept = kept[len(kept) - self.max_messages :] if self.max_messages else []
        if self.max_tokens is not None:
            total = sum(estimate_tokens(m) for m in kept)
            start = 0
            while start < len(kept) and total > self.max_tokens:
                total -= estimate_tokens(kept[start])
                start += 1
            kept = kept[start:]
        return kept

    def apply(self, history: list[dict], new_input: list[dict]) -> list[dict]:
        """The messages the model sees: the trimmed history and the new input, through the hook."""
        trimmed = self.trim(history)
        if self.hook is None:
            return trimmed + list(new_input)
        name = getattr(self.hook, "__name__", type(self.hook).__name__)
        try:
            seen = self.hook(copy.deepcopy(trimmed), copy.deepcopy(list(new_input)))
        except Exception as exc:
            raise UsageError(f"history hook {name!r} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(seen, list):
            raise UsageError(f"history hook {name!r} must return a list of messages, got {type(seen).__name__}")
        for index, message in enumerate(seen):
            # Only what the model needs: an id is not required of a message that is never stored.
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("parts"), list)
            ):
                raise UsageError(
                    f"history hook {name!r} returned a bad message at [{index}]: "
                    "each must be a dict with a 'role' (str) and 'parts' (list)"
                )
        return seen


def check_policy(policy: object) -> HistoryPolicy | None:
    """``policy`` if it is a :class:`HistoryPolicy` or None; TypeError otherwise."""
    if policy is None or isinstance(policy, HistoryPolicy):
        return policy
    raise TypeError(f"history must be a HistoryPolicy or None, got {type(policy).__name__}")
