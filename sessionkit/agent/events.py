"""Run events (docs/agents.md): what they look like, where they are kept, who hears them.

Every event is a dict::

    {"v": 1, "seq": 7, "ts": "2025-01-01T12:00:00.123Z", "session_id": "s1",
     "run_id": "run_...", "kind": "delta.text", "text": "Hel"}

``seq`` starts at 0 in a session and rises by one per event across all its
runs, so a client can resume a live feed after any event. Kinds and fields:

==============  =============================================================
``run.start``   ``input``: the prompt's text; ``at``: the message the new turn
                hangs under (``None`` in an empty session)
``turn.start``  ``turn`` (1, 2, ...); a turn opened by a queued message also
                has ``input`` and ``mode`` (``"steer"`` or ``"followUp"``)
``delta.text``  ``text``: the new characters of the reply
``delta.reasoning``  ``text``: new reasoning characters (models that expose it)
``tool.call``   ``tool_call_id``, ``name``, ``input``
``tool.result`` ``tool_call_id``, ``output``, ``error`` (``None`` on success)
``usage``       ``in``, ``out``, ``cache_read``, ``cache_write``, ``cost_usd``
                (``None`` when the model is unpriced), ``model``; one per call
``turn.end``    ``stop_reason``
``run.end``     ``status``, ``error``, ``error_type``, ``usage`` (the run's total)
==============  =============================================================

Events of a run on a sessionkit store session are stored in that store
(``store.events(session_id)``); sessions backed by another
:class:`~sessionkit.agent.sessions.SessionStore` keep them in a
:class:`MemoryRunLog` on the session object.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, runtime_checkable

from ..messages import dumps_valid, now_iso
from ..store import RunRecord  # one record type for every run log

__all__ = ["EVENT_KINDS", "Appended", "Conversation", "EventEmitter", "MemoryRunLog", "RunLog", "RunRecord"]

log = logging.getLogger("sessionkit.agent")

EVENT_KINDS = (
    "run.start",
    "turn.start",
    "delta.text",
    "delta.reasoning",
    "tool.call",
    "tool.result",
    "usage",
    "turn.end",
    "run.end",
)


@runtime_checkable
class RunLog(Protocol):
    """Where runs and their events are recorded: a sessionkit store's ``store.run_log``, or :class:`MemoryRunLog`.

    ``begin`` records a run as ``"running"`` with its ``meta`` (what the run
    was: where it started, its labels), ``append_events`` stores events
    (numbering ``seq`` per session from 0, across runs) and returns them as
    stored, ``end`` records how the run ended; ``runs`` and ``events`` read
    them back.
    """

    def begin(self, session_id: str, run_id: str, input: str, *, meta: dict | None = None) -> None: ...

    def append_events(self, session_id: str, events: Iterable[dict]) -> list[dict]: ...

    def end(self, run_id: str, *, status: str, error: str | None = None, usage: dict | None = None) -> None: ...

    def runs(self, session_id: str) -> list: ...

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict]: ...


class Appended(Protocol):
    """One result of :meth:`Conversation.append_many`: the message as stored (``sk.AppendResult`` is one)."""

    @property
    def message(self) -> dict: ...


@runtime_checkable
class Conversation(Protocol):
    """What a run, a widget and a replay need of a session: the one written shape of every kind.

    A store's session (``store.session(id)``, a tree), an
    :class:`~sessionkit.agent.sessions.ExternalSession` (a straight line in a
    :class:`~sessionkit.agent.sessions.SessionStore`) and the session a served
    run writes to all have it. ``run_log`` is where the session's runs and
    events are recorded (a store session's is its store's ``store.run_log``).
    ``can_branch`` says whether the session is a tree (a turn may start from
    any message) or a straight line. ``append_many`` appends messages in order
    after ``parent_id`` and returns one result per message, each with the
    stored ``message``. An ``sk.aio``
    session is not one (its reads are awaited): a run reads through its
    ``sync`` session (:class:`HasSyncConversation`).
    """

    session_id: str

    @property
    def can_branch(self) -> bool:
        """Whether a turn may hang under any message (a tree: ``at=``, regenerate), not only the newest."""
        ...

    @property
    def run_log(self) -> RunLog: ...

    def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict]: ...

    def latest_leaf(self) -> dict | None: ...

    def get(self, message_id: str, /) -> dict | None: ...

    def append_many(
        self, messages: Iterable[dict], *, parent_id: str | None = ..., source: str = ...
    ) -> Sequence[Appended]: ...


@runtime_checkable
class HasSyncConversation(Protocol):
    """A session whose calls are awaited (``sk.aio``'s) and its blocking twin, ``sync``, a :class:`Conversation`."""

    @property
    def sync(self) -> Conversation: ...


class MemoryRunLog:
    """An in-process :class:`RunLog` (for sessions whose messages live elsewhere).

    Same numbering rules as the store: ``seq`` per session from 0, across runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, dict] = {}
        self._events: dict[str, list[dict]] = {}

    def begin(self, session_id: str, run_id: str, input: str, *, meta: dict | None = None) -> None:
        """Record a run as started (``"running"``) with its ``meta`` (a JSON object, as
        :meth:`sessionkit.store.StoreRunLog.begin`); a run id already recorded -> ValueError."""
        if meta is not None:
            if not isinstance(meta, dict):
                raise TypeError(f"meta must be a dict (a JSON object) or None, got {type(meta).__name__}")
            try:  # a JSON-safe copy, as a store keeps it
                meta = json.loads(dumps_valid(meta, "meta"))
            except TypeError as exc:
                raise TypeError(f"meta of run {run_id!r}: {exc}") from None
        with self._lock:
            if run_id in self._runs:
                raise ValueError(f"run id {run_id!r} is already recorded")
            self._runs[run_id] = {
                "run_id": run_id,
                "session_id": session_id,
                "status": "running",
                "error": None,
                "started_at": now_iso(),
                "ended_at": None,
                "usage": None,
                "input": input,
                "meta": meta,
            }

    def append_events(self, session_id: str, events: Iterable[dict]) -> list[dict]:
        """Store events of a session (``seq`` numbered from 0 per session); returns them as stored."""
        out = []
        with self._lock:
            stored = self._events.setdefault(session_id, [])
            for event in events:
                full = {"v": 1, "seq": len(stored), "ts": now_iso(), "session_id": session_id}
                full.update({k: v for k, v in event.items() if k not in ("v", "seq", "session_id")})
                full.setdefault("ts", now_iso())
                stored.append(full)
                out.append(copy.deepcopy(full))
        return out

    def end(self, run_id: str, *, status: str, error: str | None = None, usage: dict | None = None) -> None:
        """Record how a run ended; an unknown run id -> LookupError."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise LookupError(f"unknown run id {run_id!r}")
            run.update(status=status, error=error, usage=copy.deepcopy(usage), ended_at=now_iso())

    def runs(self, session_id: str) -> list[RunRecord]:
        """Runs of a session, oldest first."""
        with self._lock:
            return [RunRecord(**copy.deepcopy(r)) for r in self._runs.values() if r["session_id"] == session_id]

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict]:
        """Events of a session in ``seq`` order, only those after ``after_seq`` when given."""
        with self._lock:
            stored = self._events.get(session_id, [])
            start = 0 if after_seq is None else max(after_seq + 1, 0)
            return copy.deepcopy(stored[start:])


class EventEmitter:
    """Records a run's events and hands each stored event to the run's listeners."""

    def __init__(self, run_log: RunLog, session_id: str, run_id: str) -> None:
        self.run_log = run_log
        self.session_id = session_id
        self.run_id = run_id
        self.listeners: list[Callable[[dict], object]] = []

    def emit(self, kind: str, **fields: object) -> dict:
        """Store one event and deliver it; returns the stored event (with ``seq``)."""
        event = {"run_id": self.run_id, "kind": kind, **fields}
        stored = self.run_log.append_events(self.session_id, [event])[0]
        for listener in list(self.listeners):
            try:
                listener(stored)
            except Exception:
                log.exception("run event listener %r raised", listener)
        return stored
