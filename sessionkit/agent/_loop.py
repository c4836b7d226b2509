"""The turn loop's state, without I/O.

:class:`RunState` holds what a run has produced so far and decides what comes
next; the driver in ``agent.py`` does the I/O around it (model calls, tools,
events, the store). Keeping the bookkeeping here makes the rules easy to read
and to test on their own:

- the chat sent to the model is ``[system, *history, *new turns]``;
- each model reply becomes one assistant UIMessage whose ``tool-<name>`` parts
  carry the call's input and, once the tool ran, its output or error;
- ``max_steps`` bounds the model calls made for one user message: a queued
  message that joins the run starts a fresh count;
- a run's ``context`` is shown beside its own user message only (see
  :func:`~sessionkit.agent.models.with_context`), in the chat, never in the
  messages the run appends;
- the run's usage sums the completed model calls; with none, its cost is
  ``0.0`` only for a model known to be priced, else ``None`` (unknown).
"""

from __future__ import annotations

import os
import time
import uuid

from ..errors import MaxStepsExceeded
from ..messages import now_iso
from .models import ModelReply, add_usage, empty_usage, to_chat_messages, with_context

__all__ = ["RunState", "new_message_id", "new_run_id"]


def new_message_id() -> str:
    """A fresh message id: ``msg_`` and 24 hex digits, the time in milliseconds then 48
    random bits. A session's ids grow with time, so the store's index of ids takes each
    new one at its end, where wholly random ids would land on a different page each
    time; the random part keeps ids of different processes apart."""
    return "msg_" + format(time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF, "012x") + os.urandom(6).hex()


def new_run_id() -> str:
    """A fresh run id."""
    return "run_" + uuid.uuid4().hex[:24]


class RunState:
    """What a run has produced so far, and the chat for its next model call."""

    def __init__(
        self,
        *,
        run_id: str,
        model_name: str | None,
        system: str | None,
        history: list[dict],
        max_steps: int,
        context_json: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.model_name = model_name
        self.max_steps = max_steps
        self.context_json = context_json
        self.system = system
        self.chat: list[dict] = to_chat_messages(history, system=system)
        self.new_messages: list[dict] = []
        self.usage: dict = empty_usage(model_name)
        self.calls = 0  # completed model calls (each added its usage)
        self.turn = 0
        self.steps = 0  # model calls since the last user message
        self.text = ""  # the latest reply's text
        self._assistant: dict | None = None
        self._tool_parts: dict[str, dict] = {}

    # ------------------------------------------------------------------ user input

    def add_user(self, prompt: str | dict, *, metadata: dict | None = None, with_run_context: bool = False) -> dict:
        """Add a user message (a string, or a UIMessage dict used as given).

        ``with_run_context`` shows the run's context beside it in the chat (the
        returned, stored message never carries it).
        """
        if isinstance(prompt, dict):
            message = dict(prompt)
            message.setdefault("id", new_message_id())
            message.setdefault("createdAt", now_iso())
            meta = dict(message.get("metadata") or {})
        else:
            message = {
                "id": new_message_id(),
                "role": "user",
                "parts": [{"type": "text", "text": prompt}],
                "createdAt": now_iso(),
            }
            meta = dict(metadata or {})
        meta["run_id"] = self.run_id
        message["metadata"] = meta
        self.new_messages.append(message)
        chat = to_chat_messages([message])
        self.chat.extend(chat)
        if with_run_context and self.context_json is not None:
            if chat:
                self.chat[-1] = with_context(self.chat[-1], self.context_json)
            else:  # a user message with nothing to show still gets its context
                self.chat.append(with_context({"role": "user", "content": None}, self.context_json))
        self.steps = 0
        return message

    def show_context_with_last_user(self) -> None:
        """Show the run's context beside the user message the history ends with (a regeneration)."""
        if self.context_json is None:
            return
        if self.chat and self.chat[-1].get("role") == "user":
            self.chat[-1] = with_context(self.chat[-1], self.context_json)
        else:  # that user message had nothing to show
            self.chat.append(with_context({"role": "user", "content": None}, self.context_json))

    def show_only(self, messages: list[dict]) -> None:
        """Send the model ``messages`` (after the system message) instead of the history and
        input so far (a :class:`~sessionkit.agent.history.HistoryPolicy`); the run's context
        goes beside the last user message. What the run appends does not change."""
        self.chat = to_chat_messages(messages, system=self.system)
        self.show_context_with_last_user()

    def final_usage(self, priced: bool | None) -> dict:
        """The run's usage to report: with no completed model call the cost is known
        (``0.0``) only when the model is known to be priced (``priced`` is True)."""
        if self.calls == 0:
            return {**self.usage, "cost_usd": 0.0 if priced is True else None}
        return dict(self.usage)

    # ------------------------------------------------------------------ turns

    def next_call(self) -> list[dict]:
        """Start a turn: the chat to send, or :class:`MaxStepsExceeded` when out of steps."""
        if self.steps >= self.max_steps:
            raise MaxStepsExceeded(
                f"the model still asked for tools after max_steps={self.max_steps} turns",
                run_id=self.run_id,
            )
        self.steps += 1
        self.turn += 1
        return list(self.chat)

    def add_reply(self, reply: ModelReply) -> dict:
        """Record a model reply as an assistant message; its tool parts await results."""
        parts: list[dict] = []
        if reply.reasoning:
            parts.append({"type": "reasoning", "text": reply.reasoning})
        if reply.text:
            parts.append({"type": "text", "text": reply.text})
        self._tool_parts = {}
        for call in reply.tool_calls:
            part = {
                "type": f"tool-{call.name}",
                "toolCallId": call.id,
                "state": "input-available",
                "input": call.arguments,
            }
            self._tool_parts[call.id] = part
            parts.append(part)
        usage = dict(reply.usage)
        message = {
            "id": new_message_id(),
            "role": "assistant",
            "parts": parts,
            "createdAt": now_iso(),
            "metadata": {"run_id": self.run_id, "model": usage.get("model") or self.model_name, "usage": usage},
        }
        self.usage = add_usage(self.usage, usage)
        self.calls += 1
        self.text = reply.text
        self._assistant = message
        self.new_messages.append(message)
        return message

    def set_tool_result(self, call_id: str, *, output: object = None, error: str | None = None) -> dict:
        """Fill in a tool part: ``output-available`` with ``output``, or ``output-error``."""
        part = self._tool_parts[call_id]
        if error is None:
            part["state"] = "output-available"
            part["output"] = output
        else:
            part["state"] = "output-error"
            part["errorText"] = error
        return part

    def end_turn(self) -> None:
        """Close the turn: the reply and its tool results join the chat."""
        if self._assistant is not None:
            self.chat.extend(to_chat_messages([self._assistant]))
        self._assistant = None
        self._tool_parts = {}
