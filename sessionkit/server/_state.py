"""What the server holds in memory for a session it has loaded, and the run slots.

All of it can be rebuilt from the store (see :mod:`._records`); a restart does so.
Everything here is used on the server's event loop only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from ..agent import RunController
from ._events import EventHub

if TYPE_CHECKING:
    from ._records import StatusRecord


async def coalesced(live: Live, busy: str, again: str, one_pass: Callable[[], Awaitable[bool]]) -> None:
    """Run ``one_pass()`` now, and once more for every burst of calls made while it ran (a
    call meanwhile only asks for another pass, through the flags ``busy`` and ``again`` of
    ``live``); ``one_pass`` returns False when there is nothing to do (no pass follows)."""
    if getattr(live, busy):
        setattr(live, again, True)
        return
    setattr(live, busy, True)
    try:
        while True:
            setattr(live, again, False)
            if not await one_pass() or not getattr(live, again):
                return
    finally:
        setattr(live, busy, False)


class Busy(Exception):
    """Another process held the session for longer than ``_coordinate.ACCEPT_WAIT``."""


__all__ = ["coalesced", "Busy", "FOLLOW_UP", "Item", "Live", "MODES", "Run", "STEER", "Slots"]

_T = TypeVar("_T")

STEER = "steer"
FOLLOW_UP = "followUp"
MODES = (FOLLOW_UP, STEER)


@dataclass(eq=False)
class Item:
    """A message a caller sent: its record number, text, mode, author and context (in memory
    only, but for the pending record that carries it to the driving worker), and the message
    of the conversation it runs from (``node``, recorded)."""

    rec: int
    text: str
    mode: str = FOLLOW_UP
    author: str | None = None
    context: dict | None = None
    node: str | None = None

    @property
    def alone(self) -> bool:
        """Whether it opens a run of its own: a context, or a node to run from, is that run's alone."""
        return self.context is not None or self.node is not None

    @property
    def metadata(self) -> dict | None:
        return {"author": self.author} if self.author is not None else None


@dataclass(eq=False)
class Run:
    """A run of a session: waiting for its turn, then active.

    ``items[0]`` opens the run; the others join it at turn boundaries (those
    accepted while it waited go to the controller when it starts).
    """

    n: int
    items: list[Item] = field(default_factory=list)
    attempts: int = 0  # how often it started (recorded in server.run)
    recorded: bool = False  # the store has a run record for it: a retry reopens it
    ready: concurrent.futures.Future | None = None  # the write that accepted it
    preload: tuple | None = None  # (leaf, history) read just before it starts
    # while active
    started: float = 0.0
    started_at: str | None = None
    accepting: bool = True  # it still takes queued messages at a turn boundary
    handed: int = 0  # messages handed to the controller
    turn_had_tools: bool = False
    retry_later: bool = False  # stopped by a shutdown: started again by the next server
    in_controller: dict = field(default_factory=lambda: {STEER: deque(), FOLLOW_UP: deque()})

    @property
    def input(self) -> str | None:
        return self.items[0].text if self.items else None


@dataclass(eq=False)
class Live:
    """A session loaded in this process."""

    key: str  # the store's key
    public_id: str
    index: str  # the key of its principal's session index
    controller: RunController
    created_at: str = ""
    first_run: int = 1  # this incarnation's first run number (after a tombstone)
    run_n: int = 0  # the highest run number used
    last_started: int = 0  # the highest run number that started (here, or before a takeover)
    next_msg: int = 1
    active: Run | None = None
    queue: deque[Run] = field(default_factory=deque)
    task: asyncio.Task | None = None
    owned: bool = False  # this process drives its runs
    deleted: bool = False
    stopping: bool = False
    hub: EventHub | None = None
    next_seq: int | None = None  # the next event seq, known while this process drives it
    event_base: int = 0  # readers' id of the stored seq 0 (see public_event)
    status: StatusRecord | None = None  # the last status record written (shared stores)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    absorbing: bool = False  # shared stores: looking for messages other processes accepted
    absorb_again: bool = False
    pulling: bool = False  # shared stores: reading events other processes stored
    pull_again: bool = False

    @property
    def run_prefix(self) -> str:
        return self.key + "."

    def run_id(self, n: int) -> str:
        return f"{self.key}.{n}"

    def public_run(self, n: int) -> str:
        return f"{self.public_id}.{n}"

    def public_run_id(self, run_id: _T) -> _T | str:
        """A stored run id as readers know it (``<public id>.<n>``); anything else as it is."""
        if isinstance(run_id, str) and run_id.startswith(self.run_prefix):
            return f"{self.public_id}.{run_id[len(self.run_prefix) :]}"
        return run_id

    def public_event(self, event: dict) -> dict:
        """An event as readers get it: the public ids, and ``seq`` on from ``event_base`` (the
        store numbers each session from 0; a session created again goes on after the deleted one)."""
        out = dict(event)
        out["session_id"] = self.public_id
        if self.event_base and isinstance(out.get("seq"), int):
            out["seq"] += self.event_base
        if "run_id" in out:
            out["run_id"] = self.public_run_id(out["run_id"])
        return out

    @property
    def waiting(self) -> int:
        """Messages accepted and not yet taken by a run."""
        return self.controller.queued + sum(len(r.items) for r in self.queue)

    @property
    def idle(self) -> bool:
        return self.task is None and not (self.hub is not None and self.hub.subscribers)


class Slots:
    """``max_concurrent_runs`` places for runs: taken at once or waited for, never polled."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._waiters: deque[asyncio.Future] = deque()

    @property
    def free(self) -> bool:
        return self.used < self.size and not self._waiters

    def take_now(self) -> bool:
        if not self.free:
            return False
        self.used += 1
        return True

    async def take(self) -> None:
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # give() passes its place on
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # the place was passed on as this one gave up: pass it further
            else:
                try:
                    self._waiters.remove(waiter)
                except ValueError:
                    pass
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the place goes to the waiter: ``used`` stays
                return
        self.used -= 1
