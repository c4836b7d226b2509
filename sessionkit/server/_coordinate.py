"""Who may drive a session's runs: one server on a file, or several on a shared store.

A coordinator is chosen once, when the server is created, from what the store can
do (``store.coordination``, ``None`` on an engine one process serves):

* :class:`LocalCoordinator`: a SQLite or DuckDB file (or a store in memory) is
  served by one process. On a file it holds the server lease (:mod:`._lease`); this
  process drives every session, decides about every message on its own event loop,
  and needs nothing from the store to do so.
* :class:`SharedCoordinator`: several server processes share a PostgreSQL store.
  Two store-wide holds per session (released by PostgreSQL if a process dies):
  ``accept``, held for every decision about a session (create, accept a message,
  go idle, delete), and ``run``, held by the one process driving the session's
  runs (its *owner*) from the start of a run until it goes idle. Processes tell
  each other about a session through the store's signals.

What differs on a shared store is the coordinator's: it makes the scheduler
(``_scheduler.Scheduler`` for one process, ``_shared.SharedScheduler`` for several) and
answers the session registry's questions (is another process driving this session, are
sessions taken over as they load, what serializes creations, which sessions are busy
elsewhere, may the sweep compact the busy records). The scheduler and the registry have
no "which kind of store" branches of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeAlias

from ._lease import Lease
from ._state import Busy, Live

if TYPE_CHECKING:
    from ..store import Coordination, Store
    from ._bodies import JSON
    from ._scheduler import Scheduler, ServedAgent
    from ._storeio import StoreIO

log = logging.getLogger("sessionkit.server")

__all__ = ["Busy", "Coordinator", "LocalCoordinator", "SharedCoordinator", "coordinator_for"]

#: How long a decision waits for another process's decision on the same session.
ACCEPT_WAIT = 30.0


class LocalCoordinator:
    """One process serves the store: every session is this process's."""

    #: Sessions a stopped server left busy are looked for once, at start.
    sweep_every: float | None = None

    def __init__(self, store: Store) -> None:
        self.lease: Lease | None = None
        if store.settings.engine in ("sqlite", "duckdb") and store.path is not None:
            self.lease = Lease(store.path)
            self.lease.acquire()  # a second server on the file fails here, naming the holder

    def start(self, io: StoreIO, on_signal: Callable[[str, str, object], None]) -> None:
        if self.lease is not None:
            self.lease.acquire()  # again, if a previous shutdown gave it back

    def close(self) -> None:
        if self.lease is not None:
            self.lease.release()

    @contextlib.asynccontextmanager
    async def hold(self, kind: str, key: str, *, give_up: Callable[[], bool] | None = None) -> AsyncIterator[None]:
        yield  # decisions are made on this process's loop, under the session's own lock

    async def take_run(self, key: str) -> bool:
        return True

    async def release_run(self, key: str) -> None:
        return None

    async def run_taken(self, key: str) -> bool:
        return False  # no other process: a session this one does not drive is idle

    async def tell(self, key: str, kind: str, data: JSON = None) -> None:
        return None

    def scheduler(self, agent: ServedAgent, store: Store, io: StoreIO, **limits: int) -> Scheduler:
        """The scheduler for one process serving the store (``_scheduler.Scheduler``)."""
        from ._scheduler import Scheduler  # (made here, imported when asked: it imports this module's types)

        return Scheduler(agent, store, io, self, **limits)

    def remote(self, live: Live) -> bool:
        """Whether another process may be driving the session: never, here."""
        return False

    def resumes_at_load(self) -> bool:
        """A session a stopped server left busy is taken over as soon as it is loaded: no
        other process can be driving it."""
        return True

    def creations(self, lock: asyncio.Lock) -> contextlib.AbstractAsyncContextManager:
        """What serializes the creation of sessions: this process's own ``lock``."""
        return lock

    def busy_elsewhere(self, store: Store, busy_key: str, busy_kind: str) -> set[str]:
        """Sessions other processes drive (read inside a store read): none."""
        return set()

    def owns_busy_records(self) -> bool:
        """Whether this process alone writes the busy records (so the sweep may compact them)."""
        return True


class SharedCoordinator:
    """Several processes serve one store (PostgreSQL); see the module docstring."""

    #: Every so often each process looks for busy sessions whose owner died.
    sweep_every: float | None = 3.0

    def __init__(self, store: Store, coordination: Coordination) -> None:
        self.store = store
        self.coordination = coordination
        self._io: StoreIO | None = None
        self.lease = None
        self._listening = False

    def start(self, io: StoreIO, on_signal: Callable[[str, str, object], None]) -> None:
        self._io = io
        if not self._listening:
            self.coordination.on_signal(on_signal)
            self._listening = True

    def close(self) -> None:
        return None

    @property
    def io(self) -> StoreIO:
        """The server's store calls (given by :meth:`start`)."""
        if self._io is None:
            raise RuntimeError("the coordinator is not started")
        return self._io

    @staticmethod
    def _name(kind: str, key: str) -> str:
        return f"server.{kind}\x00{key}"

    @contextlib.asynccontextmanager
    async def hold(self, kind: str, key: str, *, give_up: Callable[[], bool] | None = None) -> AsyncIterator[None]:
        """Hold ``kind`` for the session across processes; :class:`Busy` after :data:`ACCEPT_WAIT`,
        or as soon as ``give_up()`` is true while waiting (the holder may be waiting for us)."""
        name = self._name(kind, key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACCEPT_WAIT
        delay = 0.002
        # Another process (or a request of this one) decides about this session: wait for it
        # (a hold is a PostgreSQL advisory lock taken without waiting, so this backs off and retries).
        while not await self.io.read(self.coordination.try_hold, name):
            if loop.time() > deadline or (give_up is not None and give_up()):
                raise Busy(key)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            await self._release(name)

    async def _release(self, name: str) -> None:
        try:
            await self.io.read(self.coordination.release_hold, name)
        except Exception:
            log.exception("sessionkit server: could not give back the store hold %r", name)

    async def take_run(self, key: str) -> bool:
        return bool(await self.io.read(self.coordination.try_hold, self._name("run", key)))

    async def release_run(self, key: str) -> None:
        await self._release(self._name("run", key))

    async def run_taken(self, key: str) -> bool:
        return bool(await self.io.read(self.coordination.hold_taken, self._name("run", key)))

    def scheduler(self, agent: ServedAgent, store: Store, io: StoreIO, **limits: int) -> Scheduler:
        """The scheduler for a store several processes serve (``_shared.SharedScheduler``)."""
        from ._shared import SharedScheduler  # (made here, imported when asked: it imports this module's types)

        return SharedScheduler(agent, store, io, self, **limits)

    def remote(self, live: Live) -> bool:
        """Whether another process may be driving the session: when this one does not."""
        return not live.owned

    def resumes_at_load(self) -> bool:
        """Sessions left busy are taken over by the sweep, once no process holds their ``run``."""
        return False

    def creations(self, lock: asyncio.Lock) -> contextlib.AbstractAsyncContextManager:
        """What serializes the creation of sessions: the session's ``accept`` hold, across
        processes (this process's ``lock`` adds nothing)."""
        return contextlib.nullcontext()

    def busy_elsewhere(self, store: Store, busy_key: str, busy_kind: str) -> set[str]:
        """The sessions the store's busy records name (read inside a store read)."""
        return {
            v["key"]
            for _, v in store.session_records.get(busy_key, busy_kind)
            if isinstance(v, dict) and isinstance(v.get("key"), str)
        }

    def owns_busy_records(self) -> bool:
        """Every process writes busy records: none compacts them."""
        return False

    async def tell(self, key: str, kind: str, data: JSON = None) -> None:
        try:
            await self.io.read(self.coordination.signal, key, kind, data)
        except Exception:
            log.exception("sessionkit server: could not signal %s about %r to the other processes", kind, key)


#: Who may drive a session's runs (see the module docstring).
Coordinator: TypeAlias = "LocalCoordinator | SharedCoordinator"


def coordinator_for(store: Store) -> Coordinator:
    """The coordinator the store calls for, chosen once."""
    coordination = store.coordination
    if coordination is not None:
        return SharedCoordinator(store, coordination)
    return LocalCoordinator(store)
