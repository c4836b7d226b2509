"""RunController: talk to a run while it works (docs/agents.md).

A controller holds a queue of user messages and, while a run is attached to
it, the means to stop that run::

    controller = sk.RunController()
    task = asyncio.create_task(agent.run("Plan my trip", session=s, controller=controller))
    controller.steer("Only trains, please")     # delivered at the next turn boundary
    controller.follow_up("And a hotel")         # after the steers
    controller.interrupt()                      # the run ends "interrupted"; the queue stays

At each turn boundary of the active run, the first queued message becomes a
user message and the run takes another turn. Steers go ahead of follow-ups;
each kind is first in, first out; one message per boundary. A run ends only
when the model gave a final reply and the queue is empty. Messages queued while
no run is active wait for the next run that uses this controller.

Every method is thread-safe: a notebook may ``interrupt()`` a run that
``run_sync`` drives on a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from ..errors import UsageError

__all__ = ["RunController"]

log = logging.getLogger("sessionkit.agent")

STEER = "steer"
FOLLOW_UP = "followUp"


class RunController:
    """Steer, queue, clear and interrupt a run; observe its state and events."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._steers: deque[dict] = deque()
        self._follow_ups: deque[dict] = deque()
        self._active: str | None = None
        self._cancel: Callable[[], None] | None = None
        self._interrupted = False
        self._subscribers: list[Callable[[dict], object]] = []
        self._event_listeners: list[Callable[[dict], object]] = []

    def __repr__(self) -> str:
        return f"RunController(active={self.active!r}, queued={self.queued})"

    # ------------------------------------------------------------------ queue

    def steer(self, text: str, *, metadata: dict | None = None) -> None:
        """Queue a message that goes ahead of every follow-up."""
        self._enqueue(STEER, text, metadata)

    def follow_up(self, text: str, *, metadata: dict | None = None) -> None:
        """Queue a message delivered after the queued steers."""
        self._enqueue(FOLLOW_UP, text, metadata)

    def _enqueue(self, mode: str, text: str, metadata: dict | None) -> None:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        item: dict = {"mode": mode, "text": text}
        if metadata:
            item["metadata"] = dict(metadata)
        with self._lock:
            (self._steers if mode == STEER else self._follow_ups).append(item)
        self._notify()

    def clear(self, index: int | None = None) -> list[dict]:
        """Remove every queued message, or only ``items[index]``; return what was removed.

        An index outside the queue raises ``IndexError``.
        """
        with self._lock:
            if index is None:
                removed = list(self._steers) + list(self._follow_ups)
                self._steers.clear()
                self._follow_ups.clear()
            else:
                if isinstance(index, bool) or not isinstance(index, int):
                    raise TypeError(f"index must be an int, got {type(index).__name__}")
                n_steers, total = len(self._steers), len(self._steers) + len(self._follow_ups)
                if index < 0:
                    index += total
                if not 0 <= index < total:
                    raise IndexError(f"no queued message at index {index} (queue holds {total})")
                if index < n_steers:
                    removed = [self._steers[index]]
                    del self._steers[index]
                else:
                    removed = [self._follow_ups[index - n_steers]]
                    del self._follow_ups[index - n_steers]
        if removed:
            self._notify()
        return [dict(item) for item in removed]

    @property
    def items(self) -> list[dict]:
        """The queue in delivery order: ``[{"mode": "steer" | "followUp", "text", "metadata"?}]``."""
        with self._lock:
            return [dict(item) for item in (*self._steers, *self._follow_ups)]

    @property
    def queued(self) -> int:
        """How many messages wait in the queue."""
        with self._lock:
            return len(self._steers) + len(self._follow_ups)

    @property
    def active(self) -> str | None:
        """The id of the run attached to this controller, or ``None``."""
        return self._active

    # ------------------------------------------------------------------ interrupt

    def interrupt(self) -> bool:
        """Cancel the active model call or tool; the run ends ``"interrupted"``.

        The queue is kept for the next run. Returns False when no run was active.
        """
        with self._lock:
            cancel = self._cancel
            if self._active is None or cancel is None:
                return False
            self._interrupted = True
        cancel()
        return True

    # ------------------------------------------------------------------ observers

    def subscribe(self, callback: Callable[[dict], object]) -> Callable[[], None]:
        """Call ``callback({"active", "queued", "items"})`` after every change.

        Returns a function that unsubscribes. A callback that raises is logged.
        """
        with self._lock:
            self._subscribers.append(callback)
        return lambda: self._remove(self._subscribers, callback)

    def on_event(self, callback: Callable[[dict], object]) -> Callable[[], None]:
        """Call ``callback(event)`` for every run event of the runs this controller drives.

        Events are the stored ones (with ``seq``), delivered on the run's thread as
        they happen. Returns a function that unsubscribes.
        """
        with self._lock:
            self._event_listeners.append(callback)
        return lambda: self._remove(self._event_listeners, callback)

    def _remove(self, listeners: list, callback: Callable) -> None:
        with self._lock:
            try:
                listeners.remove(callback)
            except ValueError:
                pass

    def state(self) -> dict:
        """``{"active", "queued", "items"}``: what subscribers receive."""
        with self._lock:
            return {"active": self._active, "queued": self.queued, "items": self.items}

    def _notify(self) -> None:
        state = self.state()
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(state)
            except Exception:
                log.exception("RunController subscriber %r raised", callback)

    # ------------------------------------------------------------------ used by runs

    def _attach(self, run_id: str, cancel: Callable[[], None]) -> None:
        with self._lock:
            if self._active is not None:
                raise UsageError(
                    f"this RunController already drives run {self._active!r}; use one controller per concurrent run"
                )
            self._active = run_id
            self._cancel = cancel
            self._interrupted = False
        self._notify()

    def _set_cancel(self, cancel: Callable[[], None] | None) -> None:
        with self._lock:
            self._cancel = cancel

    def _detach(self, run_id: str) -> None:
        with self._lock:
            if self._active != run_id:
                return
            self._active = None
            self._cancel = None
        self._notify()

    def _was_interrupted(self) -> bool:
        with self._lock:
            return self._interrupted

    def _pop(self) -> dict | None:
        """Take the next message to deliver (steers first), or None."""
        with self._lock:
            if self._steers:
                item = self._steers.popleft()
            elif self._follow_ups:
                item = self._follow_ups.popleft()
            else:
                return None
        self._notify()
        return item

    def _take_event(self, event: dict) -> None:
        with self._lock:
            listeners = list(self._event_listeners)
        for callback in listeners:
            try:
                callback(event)
            except Exception:
                log.exception("RunController event listener %r raised", callback)
