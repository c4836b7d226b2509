"""Event fan-out: one retained window per session, any number of live subscribers.

Everything here runs on the server's event loop thread, never across an ``await``:
taking the window snapshot and registering a subscriber happen in one step, and
events are published in ``seq`` order by the same thread, so a subscriber receives
every frame after its snapshot exactly once and in order.

Only stored events are published (the server publishes an event once the
transaction that stored it committed), so a reader that resumes after a restart
with ``Last-Event-ID`` gets each event once: the ones it saw are in the store.
A hub is filled from the store when its first reader comes; events published while
that read is under way wait in ``pending`` and follow it.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterable, Mapping

__all__ = ["EventHub", "Subscriber", "CLOSED", "dumps_event"]


def dumps_event(value: Mapping[str, object]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Closed:
    def __repr__(self) -> str:
        return "CLOSED"


#: What :meth:`Subscriber.get` returns once the subscriber is closed.
CLOSED = _Closed()


class Subscriber:
    """A live reader of one session's events (an SSE response or a WebSocket).

    Items are ``(seq | None, json_text)``; ``seq`` is None for frames without an
    event id (the gap notice, WebSocket replies). A reader too slow to keep up
    (more than ``limit`` frames waiting) is closed with ``reason="too_slow"``: it
    reconnects with ``Last-Event-ID`` and resumes.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.items: deque[tuple[int | None, str]] = deque()
        self.closed = False
        self.reason: str | None = None
        self.last_seq = -1
        self._wake = asyncio.Event()

    def put(self, seq: int | None, text: str) -> None:
        if self.closed:
            return
        if seq is not None:
            if seq <= self.last_seq:  # already queued or sent: never twice
                return
            self.last_seq = seq
        if len(self.items) >= self.limit:
            self.close("too_slow")
            return
        self.items.append((seq, text))
        self._wake.set()

    def close(self, reason: str = "closed") -> None:
        if not self.closed:
            self.closed = True
            self.reason = reason
        self._wake.set()

    async def get(self, timeout: float | None = None):
        """The next item, ``CLOSED``, or None when ``timeout`` passed with nothing new."""
        while True:
            if self.items:
                return self.items.popleft()
            if self.closed:
                return CLOSED
            self._wake.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                if not self.items and not self.closed:
                    return None


class EventHub:
    """The retained window of a session's events (public form) and its subscribers."""

    def __init__(self, window: int, *, first_seq: int = 0, loading: bool = False) -> None:
        self.window = window
        self.frames: deque[tuple[int, str]] = deque(maxlen=window)
        #: the id of the session's first event: 0, or after a deleted session of the same id
        #: where that one's ended (ids below it are an earlier session's)
        self.first_seq = first_seq
        self.last_seq = first_seq - 1
        self.subscribers: set[Subscriber] = set()
        self.loading = loading
        self.pending: list[dict] = []
        self.ready = asyncio.Event()
        if not loading:
            self.ready.set()

    def load(self, events: Iterable[dict]) -> None:
        """The stored window (read while ``loading``), then what was published meanwhile."""
        self.loading = False
        pending, self.pending = self.pending, []
        for event in events:
            self.publish(event)
        for event in sorted(pending, key=lambda e: e.get("seq", -1)):
            self.publish(event)
        self.ready.set()

    def publish(self, event: dict) -> None:
        if self.loading:
            self.pending.append(event)
            return
        seq = event.get("seq")
        if not isinstance(seq, int) or seq <= self.last_seq:
            return
        text = dumps_event(event)
        self.frames.append((seq, text))
        self.last_seq = seq
        for sub in list(self.subscribers):
            sub.put(seq, text)

    @property
    def earliest_seq(self) -> int:
        """The oldest ``seq`` still retained (``last_seq + 1`` when none is)."""
        return self.frames[0][0] if self.frames else self.last_seq + 1

    def subscribe(self, sub: Subscriber, after: int | None) -> None:
        """Queue the replay for ``sub`` (the window, or what follows ``after``) and register it."""
        if after is not None and after < self.first_seq - 1:
            # an id of an earlier session of the same id (deleted, created again): all of this
            # session is new to the reader
            after = self.first_seq - 1
        if after is None:
            replay = list(self.frames)
        else:
            earliest = self.earliest_seq
            # Older than the window: events were lost to this reader. Beyond the last event: a
            # resume point this session never gave (another server's, a forged one).
            if after + 1 < earliest or after > self.last_seq:
                gap = {"error": "events_gap", "requestedSeq": after + 1, "earliestSeq": earliest}
                sub.put(None, dumps_event(gap))
                replay = list(self.frames)
            else:
                replay = [f for f in self.frames if f[0] > after]
                sub.last_seq = max(sub.last_seq, after)
        for seq, text in replay:
            sub.put(seq, text)
        self.subscribers.add(sub)

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)

    def close_all(self, reason: str) -> None:
        for sub in list(self.subscribers):
            sub.close(reason)
        self.subscribers.clear()
