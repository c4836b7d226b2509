"""The scheduler of a store several server processes share (PostgreSQL; see ``_coordinate``).

What differs from one process serving a store lives here, in :class:`SharedScheduler`,
which the shared coordinator makes (``SharedCoordinator.scheduler``): a message is decided
with the session held across processes (``accept``), a session is driven by the one process
holding its ``run``, messages other processes accepted are taken at turn boundaries and
before going idle, and the driver writes its view of the session (a status record) for
the others. The :class:`~._scheduler.Scheduler` it extends is the single-process one.
"""

from __future__ import annotations

import asyncio
import logging

from . import _records as R
from ._bodies import Accepted
from ._errors import Rejected
from ._scheduler import OWNER, Scheduler
from ._state import Busy, Item, Live, Run, coalesced

log = logging.getLogger("sessionkit.server")

__all__ = ["SharedScheduler"]


class SharedScheduler(Scheduler):
    """A :class:`~._scheduler.Scheduler` for a store several processes serve."""

    #: Taking a session over reads the status record its last driver left.
    READS_STATUS = True

    async def _catch_up(self, live: Live) -> None:
        await self._absorb_locked(live)

    async def _idle(self, live: Live) -> bool:
        """The queue is empty: go idle (True), unless messages came meanwhile (False); the
        messages other processes accepted meanwhile are looked for first, and the driver's
        status is left for them."""
        try:
            # a DELETE holds ``accept`` while it waits for this task to stop: give way to it
            async with self.coord.hold("accept", live.key, give_up=lambda: live.stopping or self.closing):
                await self._absorb_locked(live)
                if live.queue:
                    return False
                key = live.key
                status = self._status_value(live)

                def job() -> None:
                    self.store.session_records.put(key, R.STATUS, [(0, status)])
                    self.store.session_records.put(R.BUSY_KEY, R.BUSY, [(R.slot(key), None)])

                await self.io.write(job)
                live.status = status
                live.owned = False
                if live.task is asyncio.current_task():
                    live.task = None
                await self.coord.release_run(live.key)
                return True
        except Busy:
            # Stopping, or other processes held the session too long: give it up busy; the
            # sweep of some process takes it over and finds what was queued meanwhile.
            if not (live.stopping or self.closing):
                log.warning(
                    "sessionkit server: session %r: could not look for queued messages before going idle",
                    live.public_id,
                )
            await self.io.flush()
            live.owned = False
            if live.task is asyncio.current_task():
                live.task = None
            await self.coord.release_run(live.key)
            return True

    async def resume(self, live: Live) -> None:
        """Take over a session a stopped (or dead) server left busy, when no process drives it."""
        async with live.lock:
            if live.task is not None or live.deleted:
                return
            try:
                async with self.coord.hold("accept", live.key):
                    if not await self.coord.take_run(live.key):
                        return
                    live.owned = True
                    try:
                        await self.take_over(live)
                        await self._absorb_locked(live)
                    except BaseException:
                        live.owned = False
                        await self.coord.release_run(live.key)
                        raise
                    self._launch(live, slot_taken=False)  # goes idle at once if nothing is queued
            except Busy:
                return

    async def _accept(
        self, live: Live, text: str, mode: str, author: str | None, context: dict | None, node: str | None
    ) -> Accepted:
        """Decide about a message with the session held across processes (``accept``): join the
        run this process drives, take the session over, or leave it to the process driving it."""
        key = live.key
        async with live.lock:
            self._open(live)
            try:
                async with self.coord.hold("accept", key):
                    snap = await self.io.read(R.read_snapshot, self.store, key, status=True, runs=True)
                    if not snap.exists:
                        live.deleted = True
                        raise Rejected(404, "session_not_found")
                    live.next_msg = max(live.next_msg, snap.next_message())
                    live.run_n = max(live.run_n, snap.top_run())
                    if live.owned and live.task is not None:  # this process drives it
                        await self._absorb_locked(live, snap)
                        answer, future, item = self._place(live, text, mode, author, context, node)
                        await self._committed(live, future, item)
                        return answer
                    if await self.coord.take_run(key):
                        live.owned = True
                        try:
                            checked = await self.take_over(live)
                            await self._absorb_locked(live)
                            if live.queue:
                                answer, future, item = self._place(live, text, mode, author, context, node)
                                self._launch(live, slot_taken=False)
                            else:
                                answer, future, item = await self._start(
                                    live, text, mode, author, context, checked=checked, node=node
                                )
                        except BaseException:
                            if live.task is None:
                                live.owned = False
                                await self.coord.release_run(key)
                            raise
                        self.write_status(live)
                        await self._committed(live, future, item)
                        return answer
                    answer = await self._place_remote(live, snap, text, mode, author, context, node)
            except Busy:
                raise Rejected(429, "too_busy") from None
        await self.coord.tell(key, "message")
        return answer

    async def _place_remote(
        self,
        live: Live,
        snap: R.Snapshot,
        text: str,
        mode: str,
        author: str | None,
        context: dict | None,
        node: str | None = None,
    ) -> Accepted:
        """A message while another process drives the session: recorded ``pending``, its driver told."""
        status = snap.status or {}
        pending = sum(1 for _, v in snap.messages if v.get("pending"))
        if pending + int(status.get("queued") or 0) >= self.max_queued:
            raise Rejected(429, "too_busy")
        new_runs = []
        active, nxt = status.get("active"), status.get("next")
        alone = context is not None or node is not None
        if not alone and isinstance(active, int) and status.get("accepting") and nxt is None:
            n = active
        elif not alone and isinstance(nxt, int):
            n = nxt
        else:
            n = snap.top_run() + 1
            new_runs.append(n)
            live.run_n = max(live.run_n, n)
        rec = max(live.next_msg, snap.next_message())
        live.next_msg = rec + 1
        value = R.message_value(n, text, mode, author, queued=True, pending=True, context=context, node=node)
        await self.io.write(self._accept_job(live, [(rec, value)], new_runs))
        return {"runId": live.public_run(n), "queued": True}

    async def absorb(self, live: Live) -> None:
        """Take what other processes accepted for this session (on their signal)."""

        async def one_pass() -> bool:
            if not live.owned or live.task is None or live.stopping or self.closing:
                return False
            try:
                async with self.coord.hold("accept", live.key):
                    await self._absorb_locked(live)
            except Busy:
                pass  # taken at the next look (a turn boundary, or before going idle)
            return True

        await coalesced(live, "absorbing", "absorb_again", one_pass)

    async def _absorb_locked(self, live: Live, snap: R.Snapshot | None = None) -> None:
        """Place the ``pending`` messages (``accept`` held): the active run, a waiting one, or the next."""
        if snap is None:
            snap = await self.io.read(R.read_snapshot, self.store, live.key, status=False, runs=True)
        pending = [(n, v) for n, v in snap.messages if v.get("pending")]
        live.next_msg = max(live.next_msg, snap.next_message())
        live.run_n = max(live.run_n, snap.top_run())
        if not pending or live.stopping or self.closing:
            return
        updates: list[tuple[int, R.MessageRecord]] = []
        new_runs: list[int] = []
        for rec, value in pending:
            item = Item(rec, *R.item_fields(value))
            n = value.get("run")
            by_n = {r.n: r for r in live.queue}
            active = live.active
            if not item.alone and active is not None and n == active.n and not live.queue and self._takes(active):
                active.items.append(item)
                self._hand(live, active, item)
            elif n in by_n:
                by_n[n].items.append(item)
            elif isinstance(n, int) and n > live.last_started:
                # A run another process opened for it (recorded "queued", its number told to the
                # caller): it keeps its message, in number order, even behind a run this look
                # opened for an earlier message (moved, it would be left with none, and the next
                # takeover would record it failed).
                position = sum(1 for r in live.queue if r.n < n)
                live.queue.insert(position, Run(n, [item]))
            elif not item.alone and live.queue and self._room(live.queue[-1]):  # its run stopped taking
                run = live.queue[-1]
                run.items.append(item)
                n = run.n
            else:
                live.run_n += 1
                n = live.run_n
                live.queue.append(Run(n, [item]))
                new_runs.append(n)
            placed = R.taken(value)
            placed["run"] = n
            updates.append((rec, placed))
        await self._record_placed(live, updates, new_runs)
        self.write_status(live)

    def _status_value(self, live: Live) -> R.StatusRecord:
        run = live.active
        nxt = live.queue[-1].n if live.queue and self._room(live.queue[-1]) else None
        return {
            "runN": live.run_n,
            "active": run.n if run is not None else None,
            "accepting": bool(run is not None and run.accepting),
            "next": nxt,
            "queued": live.waiting,
            "input": run.input if run is not None else None,
            "startedAt": run.started_at if run is not None else None,
            "owner": OWNER,
        }

    def write_status(self, live: Live) -> None:
        """The driver's view of the session, for the other processes (written when it changes)."""
        if not live.owned or live.deleted:
            return
        value = self._status_value(live)
        if value == live.status:
            return
        live.status = value
        store, key = self.store, live.key
        self.io.submit(lambda: store.session_records.put(key, R.STATUS, [(0, value)]), after=lambda _: None)
