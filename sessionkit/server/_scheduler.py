"""The run scheduler: messages into runs, runs one after another, each saved as it ends.

A message to an idle session starts run ``n + 1``; a message to a busy session joins
the active run at its next turn boundary, or waits for the next run (see
:meth:`Scheduler.submit`). One task per busy session drives its runs in order
(:meth:`Scheduler._drive`); at most ``max_concurrent_runs`` run at once
(:class:`~._state.Slots`, a semaphore: a run that must wait awaits a place).

Durability, for every message answered ``202``:

* the message's record (with its run number) is committed before the answer, and
  before the run can take the message (one ordered writer, :mod:`._storeio`);
* a run saves its new messages, the new conversation digest and "saved" in one
  transaction (:class:`RunSession`); its start, events and end go through the same
  writer, in order;
* a run takes queued messages for at most ``run_seconds`` seconds or
  ``run_messages`` messages; later ones open the next run, so a long exchange is
  saved in steps and a crash never loses more than one run's work;
* a server that stops leaves records that say what to do next: a run it did not
  finish is started again by the next server with the messages accepted for it
  (:func:`._records.plan_recovery`; ``attempts`` + 1, at most
  :data:`._records.MAX_ATTEMPTS`, then ``failed`` with the reason).

Which process drives a session is the coordinator's business (:mod:`._coordinate`);
on a shared store, a message accepted by another process reaches the driving one
through the store (a ``pending`` record and a signal).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..agent import RunController
from ..errors import RunFailed
from ..store import AppendResult, RunRecord, Store
from . import _records as R
from ._bodies import Accepted
from ._errors import Rejected
from ._state import FOLLOW_UP, STEER, Busy, Item, Live, Run, Slots

if TYPE_CHECKING:
    from ._coordinate import Coordinator
    from ._sessions import Sessions
    from ._storeio import StoreIO

log = logging.getLogger("sessionkit.server")

__all__ = ["Scheduler", "ServedAgent", "served_agent"]

#: How long DELETE and shutdown wait for an interrupted run to record its end.
STOP_GRACE = 10.0
#: Who drives a session, in its status record: ``host:pid``.
OWNER = f"{socket.gethostname()}:{os.getpid()}"


@runtime_checkable
class ServedAgent(Protocol):
    """What the server needs of the agent it serves (a :class:`~sessionkit.Agent` has it): ``run``,
    called as below for each run of a session."""

    async def run(
        self,
        prompt: str,
        *,
        session: RunSession,
        controller: RunController,
        run_id: str,
        metadata: dict | None,
        context: dict | None,
        at: str | None,
    ) -> object: ...


def served_agent(agent: object) -> ServedAgent:
    """``agent`` as the server runs it; TypeError unless it has a callable ``run`` (an Agent's)."""
    if not isinstance(agent, ServedAgent) or not callable(agent.run):
        raise TypeError(f"agent must be a sessionkit Agent, got {type(agent).__name__}")
    return agent


def _history(store: Store, key: str) -> tuple[dict | None, list[dict]]:
    """What a run reads before it starts: the latest leaf and the path to it (compaction applied)."""
    session = store.session(key)
    leaf = session.latest_leaf()
    if leaf is None:
        return None, []
    return leaf, session.get_history(leaf_id=leaf["id"])


def _lacks_message(store: Store, key: str, message_id: str) -> bool:
    """Whether the session has no message ``message_id`` (a message body's ``at``)."""
    try:
        return store.session(key).get(message_id) is None
    except ValueError:  # an id no engine can hold (a NUL, a lone surrogate) names no message
        return True


def _check(store: Store, key: str, with_status: bool) -> tuple[R.Snapshot, R.Verdict, tuple, int]:
    """Before a session's runs start from idle: its records, whether the conversation is the
    server's, what the first run reads, and the last event's seq."""
    snap = R.read_snapshot(store, key, status=with_status)
    if not snap.exists:
        return snap, R.Verdict(False), (None, []), -1
    verdict = R.verify(store, snap)
    session = store.session(key)
    path = verdict.path
    if path and not session.compactions():
        preload = (path[-1], path)
    else:
        preload = _history(store, key)
    return snap, verdict, preload, R.last_event_seq(store, key, snap.last_seq)


class ServedRunLog:
    """Where the agent records a run of a served session: the store, through the ordered writer.

    The agent calls these on the event loop; each call queues its write and returns
    at once (``append_events`` numbers the events as the store will), so no run
    waits on the store between model calls.
    """

    def __init__(self, scheduler: Scheduler, live: Live, run: Run) -> None:
        self._s = scheduler
        self._live = live
        self._run = run

    def begin(self, session_id: str, run_id: str, input: str, *, meta: dict | None = None) -> None:
        s, live, run = self._s, self._live, self._run
        run.attempts += 1
        value: R.RunState = {"attempts": run.attempts, "agentId": s.agent_id, "state": "running"}
        recorded, run.recorded = run.recorded, True
        store, key, n = s.store, live.key, run.n

        def job() -> None:
            if recorded:
                store.run_log.reopen(run_id)
            else:
                store.run_log.begin(key, run_id, input, meta=meta)
            store.session_records.put(key, R.RUN, [(n, value)])

        s.io.submit(job, after=lambda _: None)

    def append_events(self, session_id: str, events: Iterable[dict]) -> list[dict]:
        s, live = self._s, self._live
        out = []
        for event in events:
            seq = live.next_seq if live.next_seq is not None else -1
            out.append({"v": 1, "ts": R.now(), **event, "session_id": live.key, "seq": seq})
            if live.next_seq is not None:
                live.next_seq += 1
        rows = copy.deepcopy(out)
        s.io.submit(
            lambda: s.store.run_log.append_events(live.key, rows), after=lambda stored: s.stored_events(live, stored)
        )
        return out

    def end(self, run_id: str, *, status: str, error: str | None = None, usage: dict | None = None) -> None:
        s, live, run = self._s, self._live, self._run
        again = status == "interrupted" and run.retry_later
        value: R.RunState = {"attempts": run.attempts, "agentId": s.agent_id, "state": "running" if again else "done"}
        if error is not None and not again:
            value["error"] = error
        store, key, n = s.store, live.key, run.n

        def job() -> None:
            store.run_log.end(run_id, status=status, error=error, usage=usage)
            store.session_records.put(key, R.RUN, [(n, value)])

        s.io.submit(job, after=lambda _: None)

    def runs(self, session_id: str) -> list[RunRecord]:
        return self._s.store.runs(session_id)

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict]:
        return self._s.store.events(session_id, after_seq)


class RunSession:
    """The session a served run reads and writes (what ``agent.run(session=...)`` gets).

    It reads what was loaded off the event loop just before the run, and saves the
    run's messages together with the new conversation digest and the run's "saved"
    mark, in one transaction of the ordered writer.
    """

    def __init__(self, scheduler: Scheduler, live: Live, run: Run, preload: tuple) -> None:
        self._s = scheduler
        self._live = live
        self._run = run
        self._leaf, self._history = preload
        self.session_id = live.key
        self.run_log = ServedRunLog(scheduler, live, run)

    #: A served run may start from any message of the stored tree (``at``).
    can_branch = True

    def get(self, message_id: str) -> dict | None:
        """The stored message with that id, or None."""
        return self._s.store.session(self._live.key).get(message_id)

    def latest_leaf(self) -> dict | None:
        return copy.deepcopy(self._leaf)

    def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict]:
        if compacted and self._leaf is not None and leaf_id in (None, self._leaf["id"]):
            return copy.deepcopy(self._history)
        return self._s.store.session(self._live.key).get_history(leaf_id=leaf_id, compacted=compacted)

    def append_many(
        self, messages: Iterable[dict], *, parent_id: str | None = None, source: str = "server"
    ) -> list[AppendResult]:
        """Save the run's messages (called by the agent on a worker thread; waits for the commit)."""
        s, live, run = self._s, self._live, self._run
        store, key, n = s.store, live.key, run.n
        value: R.RunState = {"attempts": run.attempts, "agentId": s.agent_id, "state": "saved"}
        last_seq = live.next_seq - 1 if live.next_seq is not None else None
        messages = list(messages)
        # Chained onto the digest only when the run continues the path the digest describes;
        # a run from another message (``at``) makes a new latest path: its digest is read whole.
        continues = parent_id is None or (self._leaf is not None and parent_id == self._leaf["id"])

        def job() -> list[AppendResult]:
            session = store.session(key)
            results = session.append_many(messages, parent_id=parent_id, source=source)
            ids = [r.message["id"] for r in results]
            stored = session.get_many(ids)
            previous = None
            for _, record in store.session_records.get(key, R.DIGEST):
                previous = record.get("digest") if isinstance(record, dict) else None
            if previous is not None and continues:
                digest = R.chain_digest(previous, [stored[i] for i in ids if i in stored])
            else:  # no digest yet: the whole path
                digest = R.conversation_digest(session.get_history(compacted=False))
            store.session_records.put(key, R.DIGEST, [(0, {"digest": digest, "lastSeq": last_seq})])
            store.session_records.put(key, R.RUN, [(n, value)])
            return results

        return s.io.submit(job).result()


class Scheduler:
    """Accepts messages into runs and drives each busy session's runs (see the module docstring),
    for a store one process serves; ``_shared.SharedScheduler`` is the one for a shared store."""

    #: Whether taking a session over reads the status record another process's driver left.
    READS_STATUS = False

    def __init__(
        self,
        agent: ServedAgent,
        store: Store,
        io: StoreIO,
        coord: Coordinator,
        *,
        max_concurrent_runs: int,
        max_queued: int,
    ) -> None:
        self.agent = agent
        self.agent_id = getattr(agent, "name", None) or type(agent).__name__
        self.store = store
        self.io = io
        self.coord = coord
        self.slots = Slots(max_concurrent_runs)
        self.max_queued = max_queued
        #: A run takes queued messages for at most this long, and at most this many;
        #: later messages open the next run, so what a long exchange did is saved in steps.
        self.run_seconds = 10.0
        self.run_messages = 8
        self.closing = False
        self.sessions: Sessions | None = None  # the registry (set by the server): event hubs, loading

    # ------------------------------------------------------------------ helpers

    def _open(self, live: Live) -> None:
        if live.deleted or live.stopping:
            raise Rejected(404, "session_not_found")
        if self.closing:
            raise Rejected(503, "server_stopping")

    def _takes(self, run: Run | None) -> bool:
        """Whether the active run still takes a queued message at a turn boundary."""
        if run is None or not run.accepting:
            return False
        if run.handed >= self.run_messages or time.monotonic() - run.started >= self.run_seconds:
            run.accepting = False  # the rest goes to the next run: this one can be saved
            return False
        return True

    def _room(self, run: Run) -> bool:
        """Whether a waiting run takes one more message (at most ``run_messages`` join its first)."""
        return len(run.items) <= self.run_messages

    def _index_entry(self, live: Live) -> R.IndexEntry:
        return {
            "sessionId": live.public_id,
            "key": live.key,
            "createdAt": live.created_at,
            "updatedAt": R.now(),
            "firstRun": live.first_run,
            "runN": live.run_n,
        }

    def _accept_job(
        self, live: Live, items: list[tuple[int, R.MessageRecord]], new_runs: list[int]
    ) -> Callable[[], None]:
        """The write that records accepted messages (and runs opened for them), busy and indexed."""
        store, key = self.store, live.key
        runs = [(n, R.RunState(attempts=0, agentId=self.agent_id, state="queued")) for n in new_runs]
        entry = self._index_entry(live)
        index_key, index_slot = live.index, R.slot(live.public_id)

        def job() -> None:
            store.session_records.put(key, R.MESSAGE, items)
            if runs:
                store.session_records.put(key, R.RUN, runs)
            store.session_records.put(R.BUSY_KEY, R.BUSY, [(R.slot(key), R.BusyRecord(key=key, index=index_key))])
            store.session_records.put(index_key, R.INDEX, [(index_slot, entry)])

        return job

    def _new_item(
        self, live: Live, text: str, mode: str, author: str | None, context: dict | None, node: str | None = None
    ) -> Item:
        item = Item(live.next_msg, text, mode, author, context, node)
        live.next_msg += 1
        return item

    def _hand(self, live: Live, run: Run, item: Item) -> None:
        """Give a message to the active run's controller (it joins at the next turn boundary)."""
        (live.controller.steer if item.mode == STEER else live.controller.follow_up)(item.text, metadata=item.metadata)
        run.in_controller[item.mode].append(item)
        run.handed += 1

    def _unhand(self, live: Live, run: Run | None, item: Item) -> None:
        """Take back a message whose record could not be written (if the run has not taken it yet)."""
        for r in [run, *live.queue]:
            if r is not None and item in r.items and r is not live.active:
                r.items.remove(item)
                return
        if run is None or item not in run.in_controller[item.mode]:
            return
        items = live.controller.items
        for index in range(len(items) - 1, -1, -1):
            if items[index]["mode"] == item.mode and items[index]["text"] == item.text:
                live.controller.clear(index)
                run.in_controller[item.mode].remove(item)
                run.items.remove(item)
                return

    # ------------------------------------------------------------------ messages

    async def submit(
        self, live: Live, text: str, mode: str, author: str | None, context: dict | None, node: str | None = None
    ) -> Accepted:
        """Accept a caller's message (docs/server.md): start a run, join the active one, or wait for the next.

        A message with a ``node`` (the body's ``at``) runs from that message of the conversation:
        404 ``message_not_found`` when the session has no such message, nothing recorded."""
        self._open(live)
        if node is not None and await self.io.read(_lacks_message, self.store, live.key, node):
            raise Rejected(404, "message_not_found")
        return await self._accept(live, text, mode, author, context, node)

    async def _accept(
        self, live: Live, text: str, mode: str, author: str | None, context: dict | None, node: str | None
    ) -> Accepted:
        """Decide about a message on this process's loop (one process serves the store)."""
        async with live.lock:
            self._open(live)
            if live.task is None:
                answer, future, item = await self._start(live, text, mode, author, context, node=node)
            else:
                answer, future, item = self._place(live, text, mode, author, context, node)
        await self._committed(live, future, item)
        return answer

    async def _committed(self, live: Live, future: concurrent.futures.Future[None], item: Item) -> None:
        try:
            await asyncio.wrap_future(future)
        except Exception:
            self._unhand(live, live.active, item)
            raise

    async def _start(
        self,
        live: Live,
        text: str,
        mode: str,
        author: str | None,
        context: dict | None,
        checked: tuple[R.Verdict, tuple] | None = None,
        node: str | None = None,
    ) -> tuple[Accepted, concurrent.futures.Future[None], Item]:
        """A message to an idle session: check the conversation, then open run ``n + 1``."""
        if not self.slots.free:
            raise Rejected(429, "too_busy")
        if checked is None:
            snap, verdict, preload, last_seq = await self.io.read(_check, self.store, live.key, False)
            if not snap.exists:
                raise Rejected(404, "session_not_found")
            live.next_seq = last_seq + 1
        else:
            verdict, preload = checked
        if not verdict.ok:
            raise Rejected(409, "conversation_unrecoverable")
        self._open(live)
        if not self.slots.take_now():  # others started meanwhile
            raise Rejected(429, "too_busy")
        if verdict.digest is not None:  # the digest in its current form
            digest, key = verdict.digest, live.key
            self.io.submit(
                lambda: self.store.session_records.put(key, R.DIGEST, [(0, {"digest": digest, "lastSeq": None})])
            )
        live.run_n += 1
        item = self._new_item(live, text, mode, author, context, node)
        run = Run(live.run_n, [item], preload=preload)
        value = R.message_value(run.n, text, mode, author, queued=False, node=node)
        future = self.io.submit(self._accept_job(live, [(item.rec, value)], [run.n]))
        run.ready = future
        live.queue.append(run)
        live.owned = True
        self._launch(live, slot_taken=True)
        return {"runId": live.public_run(run.n), "queued": False}, future, item

    def _place(
        self, live: Live, text: str, mode: str, author: str | None, context: dict | None, node: str | None = None
    ) -> tuple[Accepted, concurrent.futures.Future[None], Item]:
        """A message to a busy session: the active run, the waiting run, or a new one after them."""
        if live.waiting >= self.max_queued:
            raise Rejected(429, "too_busy")
        item = self._new_item(live, text, mode, author, context, node)
        new_runs = []
        run = live.active
        if not item.alone and not live.queue and self._takes(run):
            assert run is not None
            run.items.append(item)
            self._hand(live, run, item)
        elif not item.alone and live.queue and self._room(live.queue[-1]):
            run = live.queue[-1]
            run.items.append(item)
        else:  # a run of its own: for its context or node, or the waiting run is full
            live.run_n += 1
            run = Run(live.run_n, [item])
            live.queue.append(run)
            new_runs.append(run.n)
        value = R.message_value(run.n, text, mode, author, queued=True, node=node)
        future = self.io.submit(self._accept_job(live, [(item.rec, value)], new_runs))
        if new_runs:
            run.ready = future
        self.write_status(live)
        return {"runId": live.public_run(run.n), "queued": True}, future, item

    # ------------------------------------------------------------------ driving runs

    def _launch(self, live: Live, *, slot_taken: bool) -> None:
        live.task = asyncio.get_running_loop().create_task(
            self._drive(live, slot_taken), name=f"sessionkit runs of {live.public_id}"
        )

    async def _drive(self, live: Live, slot_taken: bool) -> None:
        """Run the session's runs one after another while there are any."""
        has_slot = slot_taken
        try:
            while True:
                if live.stopping or self.closing:
                    return
                if not live.queue:
                    if await self._idle(live):
                        return
                    continue
                run = live.queue[0]
                if not run.items:  # its only message could not be recorded
                    live.queue.popleft()
                    continue
                if run.ready is not None:
                    try:
                        await asyncio.wrap_future(run.ready)
                    except Exception:  # never accepted: its caller got an error, not a 202
                        if live.queue and live.queue[0] is run:
                            live.queue.popleft()
                        continue
                    run.ready = None
                if not has_slot:
                    await self.slots.take()
                    has_slot = True
                    continue  # the queue may have changed meanwhile
                preload, run.preload = run.preload, None
                if preload is None:
                    preload = await self.io.read(_history, self.store, live.key)
                if live.stopping or self.closing or not live.queue or live.queue[0] is not run:
                    continue
                live.queue.popleft()
                try:
                    await self._run(live, run, preload)
                finally:
                    self.slots.give()
                    has_slot = False
                await self._carry(live, run)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sessionkit server: the runs of session %r stopped", live.public_id)
        finally:
            if has_slot:
                self.slots.give()
            live.active = None
            if live.task is asyncio.current_task():
                live.task = None
            if live.owned:  # stopped, or failed: give the session up (idle() already did otherwise)
                # what the run wrote is committed before another process may drive the session
                try:
                    await self.io.flush()
                finally:
                    live.owned = False
                    await self.coord.release_run(live.key)
            if self.sessions is not None:
                self.sessions.trim()

    async def _run(self, live: Live, run: Run, preload: tuple) -> None:
        live.active = run
        live.last_started = max(live.last_started, run.n)
        run.started = time.monotonic()
        run.started_at = R.now()
        run.accepting = True
        run.handed = 0
        run.turn_had_tools = False
        for item in run.items[1:]:
            self._hand(live, run, item)
        self.write_status(live)
        first = run.items[0]
        attempts = run.attempts
        try:
            await self.agent.run(
                first.text,
                session=RunSession(self, live, run, preload),
                controller=live.controller,
                run_id=live.run_id(run.n),
                metadata=first.metadata,
                context=next((it.context for it in run.items if it.context is not None), None),
                at=first.node,
            )
        except RunFailed:
            pass  # recorded by the agent: status, error, run.end event
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("sessionkit server: run %s of session %r failed", run.n, live.public_id)
            if run.attempts == attempts:  # refused before it started: recorded failed, never retried
                # the run is active until its failure is stored: a reader never sees it nowhere
                with contextlib.suppress(Exception):  # a stopped writer: the restart's recovery records it
                    await asyncio.wrap_future(self._refused(live, run, exc))
        finally:
            live.active = None
            self.write_status(live)

    def _refused(self, live: Live, run: Run, exc: Exception) -> concurrent.futures.Future:
        store, key, run_id, n = self.store, live.key, live.run_id(run.n), run.n
        error = f"{type(exc).__name__}: {exc}"
        value: R.RunState = {
            "attempts": max(run.attempts, 1),
            "agentId": self.agent_id,
            "state": "done",
            "error": error,
        }
        recorded = run.recorded

        def job() -> list[dict]:
            if recorded:
                store.run_log.reopen(run_id)
            else:
                store.run_log.begin(key, run_id, run.input)
            store.run_log.end(run_id, status="failed", error=error)
            store.session_records.put(key, R.RUN, [(n, value)])
            return store.run_log.append_events(
                key,
                [
                    {
                        "run_id": run_id,
                        "kind": "run.end",
                        "status": "failed",
                        "error": error,
                        "error_type": type(exc).__name__,
                        "usage": None,
                    }
                ],
            )

        return self.io.submit(job, after=lambda stored: self.stored_events(live, stored))

    async def _carry(self, live: Live, run: Run) -> None:
        """Messages a failed run did not take open the next run (their records say so)."""
        leftovers = live.controller.clear()
        if not leftovers or live.stopping or self.closing:
            return
        counts = {STEER: 0, FOLLOW_UP: 0}
        for entry in leftovers:
            counts[entry["mode"]] += 1
        items: list[Item] = []
        for mode, count in counts.items():
            if count:
                items.extend(list(run.in_controller[mode])[-count:])
        items.sort(key=lambda it: it.rec)
        for item in items:
            run.items.remove(item)
        try:
            await self._carry_locked(live, items)
        except Busy:  # they stay in the failed run's records: "failed, with its reason"
            log.warning(
                "sessionkit server: session %r: %d message(s) a failed run did not take stay with it",
                live.public_id,
                len(items),
            )

    async def _carry_locked(self, live: Live, items: list[Item]) -> None:
        async with self.coord.hold("accept", live.key):
            await self._catch_up(live)
            new_runs = []
            if live.queue:
                target = live.queue[0]
                target.items[:0] = items
            else:
                live.run_n += 1
                target = Run(live.run_n, items)
                live.queue.append(target)
                new_runs.append(target.n)
            recs = dict(await self.io.read(self.store.session_records.get, live.key, R.MESSAGE))
            updates = [(it.rec, dict(recs.get(it.rec) or {}, run=target.n)) for it in items if it.rec in recs]
            await self._record_placed(live, updates, new_runs)

    async def _record_placed(
        self, live: Live, updates: Sequence[tuple[int, Mapping[str, object]]], new_runs: list[int]
    ) -> None:
        """Store where messages went (their records, ``updates``) and the runs opened for them."""
        store, key = self.store, live.key
        runs = [(n, R.RunState(attempts=0, agentId=self.agent_id, state="queued")) for n in new_runs]

        def job() -> None:
            store.session_records.put(key, R.MESSAGE, updates)
            if runs:
                store.session_records.put(key, R.RUN, runs)

        await self.io.write(job)

    async def _idle(self, live: Live) -> bool:
        """The queue is empty: go idle (True), unless messages came meanwhile (False)."""
        key = live.key
        live.task = None if live.task is asyncio.current_task() else live.task
        live.owned = False
        self.io.submit(lambda: self.store.session_records.put(R.BUSY_KEY, R.BUSY, [(R.slot(key), None)]))
        return True

    # ------------------------------------------------------------------ events of runs

    def on_event(self, live: Live, event: dict) -> None:
        """Every event of the session's runs, as the agent records it (on the loop)."""
        run = live.active
        if run is None:
            return
        kind = event.get("kind")
        if kind == "turn.start":
            run.turn_had_tools = False
        elif kind == "tool.call":
            run.turn_had_tools = True
        elif kind == "turn.end":
            # The run takes the next queued message right after this event; with none
            # queued and no tool call to answer, this was its last turn boundary.
            if not run.turn_had_tools and live.controller.queued == 0:
                run.accepting = False
                self.write_status(live)
        elif kind == "run.end":
            run.accepting = False

    def stored_events(self, live: Live, stored: list[dict]) -> None:
        """Events committed by the writer: to the live readers (on the loop)."""
        if stored and live.next_seq is not None and stored[-1]["seq"] >= live.next_seq:
            live.next_seq = stored[-1]["seq"] + 1  # numbered differently by the store: follow it
        if self.sessions is not None:
            self.sessions.publish(live, stored)

    # ------------------------------------------------------------------ recovery

    async def take_over(self, live: Live) -> tuple[R.Verdict, tuple]:
        """Become the session's driver: close what a stopped server left, queue its retries.

        Called with ``live.lock`` held (and, on a shared store, ``accept`` and ``run``
        held). Returns the verdict on the conversation and what a run would read.
        """
        snap, verdict, preload, last_seq = await self.io.read(_check, self.store, live.key, self.READS_STATUS)
        if not snap.exists:
            raise Rejected(404, "session_not_found")
        live.next_seq = last_seq + 1
        live.run_n = max(live.run_n, snap.top_run())
        live.next_msg = max(live.next_msg, snap.next_message())
        started = [n for n, v in snap.runs.items() if v.get("state") != "queued"]
        started += [n for n in (R.run_number(live.key, r.run_id) for r in snap.run_records) if n is not None]
        live.last_started = max([live.last_started, *started])
        store, agent_id = self.store, self.agent_id
        recovery = await self.io.write(lambda: R.plan_recovery(store, snap, verdict, agent_id=agent_id))
        if recovery.events:
            self.stored_events(live, recovery.events)
        known = {r.n for r in live.queue}
        for retry in recovery.retries:
            if retry.n in known:
                continue
            items = [Item(n, *R.item_fields(v)) for n, v in retry.messages]
            live.queue.append(Run(retry.n, items, attempts=retry.attempts, recorded=retry.recorded))
        if recovery.retries:
            log.warning(
                "sessionkit server: session %r: %d run(s) a stopped server left unfinished start again",
                live.public_id,
                len(recovery.retries),
            )
        live.queue = deque(sorted(live.queue, key=lambda r: r.n))
        return verdict, preload

    async def resume(self, live: Live) -> None:
        """Take over a session a stopped server left busy, and run what it left (the sweep)."""
        async with live.lock:
            if live.task is not None or live.deleted:
                return
            await self.take_over(live)
            if live.queue:
                live.owned = True
                self._launch(live, slot_taken=False)
            else:
                key = live.key
                self.io.submit(lambda: self.store.session_records.put(R.BUSY_KEY, R.BUSY, [(R.slot(key), None)]))

    # ------------------------------------------------------------------ other processes (none here)

    async def _catch_up(self, live: Live) -> None:
        """Take what other processes accepted for the session (``accept`` held): nothing here."""

    async def absorb(self, live: Live) -> None:
        """Another process's signal about the session: none reaches a store one process serves."""

    def write_status(self, live: Live) -> None:
        """The driver's view of the session for other processes: there are none here."""

    # ------------------------------------------------------------------ stopping

    async def stop(self, live: Live, *, retry_later: bool = False) -> None:
        """Interrupt the active run and wait for the session's task to end.

        ``retry_later`` (a shutdown): the run and the waiting ones stay recorded, and
        the next server starts them again. Otherwise (a delete) the queue is dropped.
        """
        live.stopping = True
        if not retry_later:
            live.queue.clear()
            live.controller.clear()
        if live.active is not None:
            live.active.retry_later = retry_later
        task = live.task
        if task is None:
            return
        live.controller.interrupt()
        done, _ = await asyncio.wait({task}, timeout=STOP_GRACE)
        if not done:
            log.warning(
                "sessionkit server: the run of %r did not stop within %.0f s; cancelling it", live.public_id, STOP_GRACE
            )
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_GRACE)

    async def shutdown(self, lives: list[Live]) -> None:
        """Stop every run; what was accepted stays recorded for the next server."""
        self.closing = True
        await asyncio.gather(
            *(self.stop(live, retry_later=True) for live in lives if live.task is not None), return_exceptions=True
        )


if TYPE_CHECKING:  # mypy checks that a served run's session is a Conversation (no cost at run time)
    from ..agent.events import Conversation

    def _conversation(session: RunSession) -> Conversation:
        return session
