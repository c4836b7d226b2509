"""The sessions a server serves: finding, creating, describing, listing and deleting them,
and their event streams.

A session is loaded into memory (:class:`~._state.Live`) when a request first names
it, from its records (:mod:`._records`); idle ones beyond ``keep_idle`` are
forgotten and load again when needed. On a store served by one process, loading a
session that a stopped server left half-done also closes what it left and starts
its unfinished runs again (:meth:`~._scheduler.Scheduler.take_over`); at start, and
every few seconds on a shared store, :meth:`Sessions.sweep` looks for such sessions
without waiting for a request.

Every store call runs off the event loop (:mod:`._storeio`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import re
from collections import OrderedDict
from collections.abc import Coroutine
from typing import TYPE_CHECKING

from ..agent import RunController
from ..errors import MessageNotFound, SessionNotFound
from ..store import Session, Store
from . import _records as R
from ._bodies import (
    ConversationPage,
    ConversationQuery,
    RunView,
    SentMessage,
    SessionList,
    SessionSummary,
    SessionView,
    conversation_cursor,
)
from ._errors import Rejected
from ._events import EventHub, Subscriber
from ._scheduler import Scheduler, ServedAgent
from ._state import Busy, Live, coalesced

if TYPE_CHECKING:
    from ._coordinate import Coordinator
    from ._storeio import StoreIO

log = logging.getLogger("sessionkit.server")

__all__ = ["Sessions"]

_HEX16 = re.compile(r"[0-9a-f]{16}\Z")


def _in_flight(snap: R.Snapshot) -> list[int]:
    """The runs the records show running: recorded ``running``, or accepted and started
    (``running``/``saved``) with no record yet, or recorded ``interrupted`` by a stopped
    server and left to run again (the server's run record is not done: the recovery closed
    it and has yet to start it again). When no live process drives the session (its worker
    was killed), they stay in flight until a sweep closes them and starts them again under
    the same ids."""
    recorded = set()
    found = set()
    for record in snap.run_records:
        n = R.run_number(snap.key, record.run_id)
        if n is None:
            continue
        recorded.add(n)
        again = record.status == "interrupted" and snap.runs.get(n, {}).get("state") in ("running", "queued")
        if record.status == "running" or again:
            found.add(n)
    found.update(n for n, meta in snap.runs.items() if n not in recorded and meta.get("state") in ("running", "saved"))
    return sorted(found)


def _needs_recovery(snap: R.Snapshot) -> bool:
    return any(v.get("state") != "done" for v in snap.runs.values()) or any(
        r.status == "running" for r in snap.run_records
    )


#: How many pages ahead a page read from the whole path leaves anchors for in its cursor.
_ANCHORS_AHEAD = 128


def _conversation_page(store: Store, key: str, public_id: str, query: ConversationQuery) -> ConversationPage:
    """A page of one path of a session (``GET /sessions/{id}/conversation``), read off the loop.

    Without a compaction to apply, a page is read upwards from the nearest message known on
    the path at or below its end (``Session.path_slice``): the leaf for the last page, else
    an anchor of the cursor. A page without one reads the path's nodes once (no content) and
    leaves anchors for the pages after it in its cursor, so paging through a long
    conversation costs about one read of it. A compacted view of a session that has
    compactions places them on the whole path for each page.
    """
    session = store.session(key)
    try:  # MessageNotFound if the leaf is not in the session
        if query.compacted and session.compactions():
            return _compacted_page(session, public_id, query)
        if query.leaf is None:
            latest = session.latest_leaf()
            leaf = None if latest is None else latest["id"]
        else:
            leaf = query.leaf
        if leaf is None:
            return _page_body(public_id, None, query, 0, [])
        total = session.path_length(leaf)
        page, anchors = _raw_page(session, leaf, total, query)
    except ValueError as exc:  # an id no engine can hold (a NUL, a lone surrogate) names no message
        raise MessageNotFound(str(exc)) from None
    return _page_body(public_id, leaf, query, total, page, anchors)


def _raw_page(
    session: Session, leaf: str, total: int, query: ConversationQuery
) -> tuple[list[dict], list[tuple[int, str]]]:
    """The messages at positions ``offset`` .. of the raw path, and the anchors still ahead."""
    offset, limit = query.offset, query.limit
    want = max(0, min(limit, total - offset))
    if want == 0:
        return [], []
    last = offset + want - 1  # the depth of the page's last message
    if last == total - 1:  # the last page: read up from the leaf
        return session.path_slice(offset, want, leaf_id=leaf), []
    ahead = [(depth, mid) for depth, mid in query.anchors if depth >= last]
    if ahead and ahead[0][0] < total:
        try:
            page = session.path_slice(offset, want, leaf_id=ahead[0][1])
        except MessageNotFound:  # deleted since: the whole path tells
            page = []
        if len(page) == want:
            return page, [a for a in ahead if a[0] > last]
    # No anchor: the path's nodes once, the page's content, anchors for the pages after it
    nodes = session.path(leaf).nodes
    ids = [node.id for node in nodes[offset : offset + want]]
    found = session.get_many(ids)
    page = [found[i] for i in ids if i in found]
    ends = range(last + limit, min(len(nodes) - 1, last + limit * _ANCHORS_AHEAD + 1), limit)
    return page, [(depth, nodes[depth].id) for depth in ends]


def _page_body(
    public_id: str,
    leaf: str | None,
    query: ConversationQuery,
    total: int,
    page: list[dict],
    anchors: list[tuple[int, str]] | None = None,
) -> ConversationPage:
    end = query.offset + len(page)
    cursor = conversation_cursor(leaf, query.compacted, end, anchors or ()) if leaf and end < total else None
    return {
        "sessionId": public_id,
        "leaf": leaf,
        "compacted": query.compacted,
        "total": total,
        "messages": page,
        "nextCursor": cursor,
    }


def _compacted_page(session: Session, public_id: str, query: ConversationQuery) -> ConversationPage:
    """A page of the path as the model sees it: each compaction's summary stands for its range."""
    path = session.path(query.leaf)  # the path without content, compactions placed on it
    page: list[dict] = []
    total = 0
    if path.leaf_id is not None:
        total = len(path.model_view())
        # the store streams the path in bounded batches; reading stops after the page
        stop = query.offset + query.limit
        page = list(itertools.islice(session.history(leaf_id=path.leaf_id), query.offset, stop))
    return _page_body(public_id, path.leaf_id, query, total, page)


class Sessions:
    """The registry of loaded sessions, their event hubs, and the routes' session operations."""

    def __init__(
        self,
        agent: ServedAgent,
        store: Store,
        io: StoreIO,
        coord: Coordinator,
        scheduler: Scheduler,
        *,
        events_window: int,
        keep_idle: int = 1024,
    ) -> None:
        self.agent = agent
        self.store = store
        self.io = io
        self.coord = coord
        self.scheduler = scheduler
        scheduler.sessions = self
        self.events_window = events_window
        self.keep_idle = keep_idle
        self.states: OrderedDict[str, Live] = OrderedDict()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._create_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()

    def bind(self) -> None:
        """Start serving on the running loop (a restarted app starts from the store again)."""
        self.loop = asyncio.get_running_loop()
        self.states.clear()
        self._create_lock = asyncio.Lock()

    def spawn(self, coro: Coroutine[object, object, object], name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop_background(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ------------------------------------------------------------------ lookup

    async def get(self, principal: str, public_id: str) -> Live:
        """The loaded session, loading it from the store; :class:`Rejected` 404 if there is none."""
        key = R.stored_key(principal, public_id)
        live = self.states.get(key)
        if live is not None:
            if live.deleted:
                raise Rejected(404, "session_not_found")
            self.states.move_to_end(key)
            return live
        snap = await self.io.read(R.read_snapshot, self.store, key)
        if not snap.exists:
            raise Rejected(404, "session_not_found")
        return await self._adopt(key, public_id, R.index_key(principal), snap)

    async def load_key(self, key: str, index: str | None) -> Live | None:
        """A session by its stored key (for the sweep); None when it is gone."""
        live = self.states.get(key)
        if live is not None:
            return live
        snap = await self.io.read(R.read_snapshot, self.store, key)
        if not snap.exists:
            return None
        if index is None:
            index = _index_for_key(key)
        if index is None:  # under no principal's namespace: the server serves no such session
            return None
        return await self._adopt(key, R.public_id_of(key), index, snap)

    async def _adopt(self, key: str, public_id: str, index: str, snap: R.Snapshot) -> Live:
        live = self.states.get(key)  # loaded by a request that ran meanwhile
        if live is not None:
            return live
        live = Live(key, public_id, index, RunController())
        live.created_at = (snap.session or {}).get("createdAt") or R.now()
        live.event_base = snap.event_base
        tomb = snap.tombstone or {}
        live.first_run = (tomb["runN"] + 1) if isinstance(tomb.get("runN"), int) else 1
        live.run_n = snap.top_run()
        live.next_msg = snap.next_message()
        live.controller.on_event(functools.partial(self.scheduler.on_event, live))
        self.trim()  # before adding: the caller is about to use this one
        self.states[key] = live
        if self.coord.resumes_at_load() and _needs_recovery(snap):
            await self.scheduler.resume(live)  # what a stopped server left: closed, started again
        return live

    def trim(self) -> None:
        """Forget idle sessions beyond ``keep_idle`` (they load again from the store)."""
        excess = len(self.states) - self.keep_idle
        if excess <= 0:
            return
        for key, live in list(self.states.items()):
            if excess <= 0:
                break
            if live.idle and not live.lock.locked() and not live.queue:
                del self.states[key]
                excess -= 1

    def drop(self, live: Live, reason: str = "session_deleted") -> None:
        if self.states.get(live.key) is live:
            del self.states[live.key]
        if live.hub is not None:
            live.hub.close_all(reason)
            live.hub = None

    # ------------------------------------------------------------------ create, delete

    async def create(self, principal: str, public_id: str) -> bool:
        """Create a session; False when it already exists."""
        key = R.stored_key(principal, public_id)
        live = self.states.get(key)
        if live is not None and live.deleted:
            async with live.lock:  # a DELETE is finishing: create afresh after it
                pass
        lock = self.coord.creations(self._create_lock)
        try:
            async with lock, self.coord.hold("accept", key):
                return await self._create_locked(principal, public_id, key)
        except Busy:
            raise Rejected(429, "too_busy") from None

    async def _create_locked(self, principal: str, public_id: str, key: str) -> bool:
        store = self.store

        def read():
            snap = R.read_snapshot(store, key, runs=False)
            if snap.exists:
                return snap, True, None
            path = store.session(key).get_history(compacted=False)
            return snap, False, R.conversation_digest(path)

        snap, exists, digest = await self.io.read(read)
        if exists:
            return False
        live = self.states.get(key)
        if live is not None and live.task is None:  # deleted behind the server's back
            self.drop(live)
        now = R.now()
        event_base = snap.next_event_base()
        first_run = snap.top_run() + 1
        index, index_slot = R.index_key(principal), R.slot(public_id)
        entry: R.IndexEntry = {
            "sessionId": public_id,
            "key": key,
            "createdAt": now,
            "updatedAt": now,
            "firstRun": first_run,
            "runN": first_run - 1,
        }

        def job() -> None:
            store.session_records.put(key, R.SESSION, [(0, {"createdAt": now, "eventBase": event_base})])
            store.session_records.put(key, R.DIGEST, [(0, {"digest": digest, "lastSeq": None})])
            store.session_records.put(index, R.INDEX, [(index_slot, entry)])

        await self.io.write(job)
        return True

    async def delete(self, live: Live) -> None:
        """Cancel the active run, drop the queue, remove the session (a tombstone keeps its run count)."""
        async with live.lock:
            if live.deleted:
                raise Rejected(404, "session_not_found")
            try:
                async with self.coord.hold("accept", live.key):
                    await self._delete_locked(live)
            except Busy:
                raise Rejected(429, "too_busy") from None
        await self.coord.tell(live.key, "deleted")
        self.drop(live)

    async def _delete_locked(self, live: Live) -> None:
        key, store = live.key, self.store
        snap = await self.io.read(R.read_snapshot, store, key)
        if not snap.exists:
            live.deleted = True
            self.drop(live)
            raise Rejected(404, "session_not_found")
        live.deleted = True
        await self.scheduler.stop(live)
        held = False
        if self.coord.remote(live):
            held = await self._take_run_for_delete(live)
        top = max(snap.top_run(), live.run_n)
        index, index_slot = live.index, R.slot(live.public_id)
        tombstone: R.TombstoneRecord = {"runN": top, "eventN": snap.event_base, "deletedAt": R.now()}

        def job() -> None:
            # the next session of this id numbers its events after this one's last
            last = R.last_event_seq(store, key, snap.last_seq)
            tombstone["eventN"] = max(snap.event_base + last + 1, snap.next_event_base())
            try:
                store.delete_session(key)
            except SessionNotFound:
                pass
            store.session_records.put(key, R.TOMBSTONE, [(0, tombstone)])
            store.session_records.put(index, R.INDEX, [(index_slot, None)])
            store.session_records.put(R.BUSY_KEY, R.BUSY, [(R.slot(key), None)])

        try:
            await self.io.write(job)
        finally:
            if held:
                await self.coord.release_run(key)

    async def _take_run_for_delete(self, live: Live) -> bool:
        """Ask the process driving the session to stop; True once this one holds ``run``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * 10.0 + 5
        asked = False
        delay = 0.01
        while not await self.coord.take_run(live.key):
            if not asked:
                await self.coord.tell(live.key, "stop")
                asked = True
            if loop.time() > deadline:
                log.warning(
                    "sessionkit server: session %r: the process running it did not stop; deleting anyway",
                    live.public_id,
                )
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        return True

    # ------------------------------------------------------------------ reading

    async def describe(self, live: Live) -> SessionView:
        """``GET /sessions/{id}``: runs, active run, queue length, messages callers sent."""
        remote = self.coord.remote(live)
        snap = await self.io.read(R.read_snapshot, self.store, live.key, status=remote)
        if not snap.exists:
            if live.task is None:
                live.deleted = True
                self.drop(live)
            raise Rejected(404, "session_not_found")
        agent_id = self.scheduler.agent_id
        active = queued = None
        run_input = started_at = None
        if live.owned:
            run = live.active
            if run is not None:
                active, run_input, started_at = run.n, run.input, run.started_at
            queued = live.waiting
        elif remote:
            status = snap.status or {}
            pending = sum(1 for _, v in snap.messages if v.get("pending"))
            queued = pending
            if status and await self.coord.run_taken(live.key):  # its driver is alive: its view counts
                if isinstance(status.get("active"), int):
                    active, run_input, started_at = status["active"], status.get("input"), status.get("startedAt")
                queued += int(status.get("queued") or 0)
        if active is None:
            # No live process reports an active run, yet the records show one running (its worker
            # was killed and no sweep has taken it over yet, or it is between its end and its
            # record): that run is the active one, so the view never contradicts itself.
            left = _in_flight(snap)
            if left:
                active = left[0]
        runs: list[RunView] = []
        seen = set()
        for record in snap.run_records:
            n = R.run_number(live.key, record.run_id)
            meta = snap.runs.get(n, {}) if n is not None else {}
            status_ = "running" if n is not None and n == active else record.status
            attempts = meta.get("attempts")
            runs.append(
                {
                    "runId": live.public_run_id(record.run_id),
                    "status": status_,
                    "input": record.input,
                    "startedAt": record.started_at,
                    "endedAt": None if status_ == "running" else record.ended_at,
                    "agentId": meta.get("agentId") or agent_id,
                    "attempts": attempts if isinstance(attempts, int) else 1,
                }
            )
            seen.add(n)
        if active is not None and active not in seen:  # accepted, not yet recorded by the agent
            meta = snap.runs.get(active, {})
            runs.append(
                {
                    "runId": live.public_run(active),
                    "status": "running",
                    "input": run_input,
                    "startedAt": started_at,
                    "endedAt": None,
                    "agentId": meta.get("agentId") or agent_id,
                    "attempts": max(1, meta.get("attempts") or 1),
                }
            )
            seen.add(active)
        # Accepted runs with no record yet that no driver reports as active: between a run's end
        # and its record, or while a dead worker's run waits for another worker to take it up.
        # They are in flight, never absent (a reader waiting for the session to be idle must wait).
        for n, meta in sorted(snap.runs.items()):
            if n in seen or meta.get("state") not in ("running", "saved"):
                continue
            runs.append(
                {
                    "runId": live.public_run(n),
                    "status": "running",
                    "input": None,
                    "startedAt": None,
                    "endedAt": None,
                    "agentId": meta.get("agentId") or agent_id,
                    "attempts": max(1, meta.get("attempts") or 1),
                }
            )
        messages: list[SentMessage] = []
        for _, value in snap.messages:
            item: SentMessage = {
                "runId": live.public_run(value.get("run", 0)),
                "text": value.get("text", ""),
                "mode": value.get("mode", "followUp"),
                "queued": bool(value.get("queued")),
                "at": value.get("at", ""),
            }
            if value.get("author") is not None:
                item["author"] = value["author"]
            node = R.record_node(value)
            if node is not None:
                item["node"] = node
            messages.append(item)
        return {
            "sessionId": live.public_id,
            "runs": runs,
            "active": live.public_run(active) if active is not None else None,
            "queued": queued or 0,
            "messages": messages,
        }

    async def conversation(self, live: Live, query: ConversationQuery) -> ConversationPage:
        """``GET /sessions/{id}/conversation``: a page of the latest path or a leaf's, compactions
        applied or not; 404 ``message_not_found`` for a leaf the session does not have."""
        try:
            return await self.io.read(_conversation_page, self.store, live.key, live.public_id, query)
        except MessageNotFound:
            raise Rejected(404, "message_not_found") from None

    async def listing(self, principal: str) -> SessionList:
        """``GET /sessions``: the caller's sessions, newest activity first."""
        index = R.index_key(principal)
        store = self.store
        coord = self.coord

        def read():
            entries = [v for _, v in store.session_records.get(index, R.INDEX) if isinstance(v, dict)]
            return entries, coord.busy_elsewhere(store, R.BUSY_KEY, R.BUSY)

        entries, busy = await self.io.read(read)
        out: list[SessionSummary] = []
        for entry in entries:
            key, sid = entry.get("key"), entry.get("sessionId")
            if not isinstance(key, str) or not isinstance(sid, str):
                continue
            live = self.states.get(key)
            active, queued = None, 0
            if live is not None and live.owned:
                if live.active is not None:
                    active = live.public_run(live.active.n)
                queued = live.waiting
            elif key in busy and await self.coord.run_taken(key):
                status = await self.io.read(R.read_snapshot, store, key, status=True, runs=False)
                value = status.status or {}
                if isinstance(value.get("active"), int):
                    active = f"{sid}.{value['active']}"
                queued = int(value.get("queued") or 0)
            elif key in busy:  # nobody drives it (a killed worker's): its runs recorded running are active
                snap = await self.io.read(R.read_snapshot, store, key)
                left = _in_flight(snap)
                if left:
                    active = f"{sid}.{left[0]}"
                queued = sum(1 for _, v in snap.messages if v.get("pending"))
            first, top = entry.get("firstRun", 1), entry.get("runN", 0)
            runs = max(0, top - first + 1) if isinstance(first, int) and isinstance(top, int) else 0
            out.append(
                {
                    "sessionId": sid,
                    "runs": runs,
                    "active": active,
                    "queued": queued,
                    "updatedAt": entry.get("updatedAt") or entry.get("createdAt") or "",
                }
            )
        out.sort(key=lambda s: (s["updatedAt"], s["sessionId"]), reverse=True)
        return {"sessions": out}

    # ------------------------------------------------------------------ events

    async def subscribe(self, live: Live, after: int | None) -> Subscriber:
        hub = await self._hub(live)
        sub = Subscriber(limit=self.events_window + 4096)
        hub.subscribe(sub, after)
        return sub

    async def _hub(self, live: Live) -> EventHub:
        """The session's event window, read from the store when its first reader comes."""
        hub = live.hub
        if hub is not None:
            await hub.ready.wait()
            if live.hub is hub:
                return hub
            return await self._hub(live)
        hub = live.hub = EventHub(self.events_window, first_seq=live.event_base, loading=True)
        window = self.events_window
        hint = live.next_seq - 1 if live.next_seq is not None else None
        store, key = self.store, live.key

        def read():
            if not R.read_snapshot(store, key, runs=False).exists:
                return None
            last = hint
            if last is None:
                last = R.read_snapshot(store, key, runs=False).last_seq
            after = last - window if isinstance(last, int) and last - window >= 0 else None
            return store.events(key, after)[-window:]

        try:
            events = await self.io.read(read)
        except BaseException:
            if live.hub is hub:
                live.hub = None
            hub.load([])
            raise
        if events is None:
            hub.load([])
            if live.hub is hub:
                live.hub = None
            if live.task is None:
                live.deleted = True
                self.drop(live)
            raise Rejected(404, "session_not_found")
        hub.load(live.public_event(e) for e in events)
        if self.coord.remote(live):
            self.spawn(self._pull(live), "sessionkit events pull")  # what came while reading
        return hub

    def unsubscribe(self, live: Live, sub: Subscriber) -> None:
        hub = live.hub
        if hub is None:
            return
        hub.unsubscribe(sub)
        if not hub.subscribers and not hub.loading:  # nobody reads: free the window (the store keeps it)
            live.hub = None
            self.trim()

    def publish(self, live: Live, stored: list[dict]) -> None:
        """Stored events of this process's runs, to the session's live readers."""
        hub = live.hub
        if hub is not None:
            for event in stored:
                hub.publish(live.public_event(event))

    def close_streams(self, reason: str) -> None:
        for live in list(self.states.values()):
            if live.hub is not None:
                live.hub.close_all(reason)
                live.hub = None

    async def _pull(self, live: Live) -> None:
        """Read into the window the events another process stored (shared stores)."""

        async def one_pass() -> bool:
            hub = live.hub
            if hub is None:
                return False
            await hub.ready.wait()
            after = hub.last_seq - live.event_base  # the store's numbering
            events = await self.io.read(self.store.events, live.key, after if after >= 0 else None)
            if live.hub is hub:
                for event in events:
                    hub.publish(live.public_event(event))
            return True

        try:
            await coalesced(live, "pulling", "pull_again", one_pass)
        except Exception:
            log.exception("sessionkit server: could not read the events of session %r", live.public_id)

    # ------------------------------------------------------------------ other processes

    def signal_from_thread(self, key: str, kind: str, data: object) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._on_signal, key, kind, data)

    def _on_signal(self, key: str, kind: str, data: object) -> None:
        """Another process's news about a session this one has loaded (on the loop)."""
        live = self.states.get(key)
        if live is None:
            return
        if kind == "events":
            if live.hub is not None and not live.owned:
                self.spawn(self._pull(live), "sessionkit events pull")
        elif kind == "message":
            if live.owned:
                self.spawn(self.scheduler.absorb(live), "sessionkit absorb")
        elif kind == "stop":
            if live.task is not None and not live.deleted:
                live.deleted = True  # another process is deleting it
                self.spawn(self._stop_and_drop(live), "sessionkit stop")
        elif kind == "deleted":
            if live.task is None and not live.owned:
                live.deleted = True
                self.drop(live)

    async def _stop_and_drop(self, live: Live) -> None:
        await self.scheduler.stop(live)
        self.drop(live)

    # ------------------------------------------------------------------ recovery sweep

    async def sweep_forever(self) -> None:
        """At start, and every ``sweep_every`` seconds on a shared store: :meth:`sweep`."""
        every = self.coord.sweep_every
        while True:
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sessionkit server: looking for unfinished runs failed")
            if not every:
                return
            await asyncio.sleep(every)

    async def sweep(self) -> int:
        """Start again the runs of busy sessions nobody drives (a stopped server's); returns how many."""
        if self.coord.owns_busy_records():
            await self.io.write(self._compact_busy)
        entries = await self.io.read(self.store.session_records.get, R.BUSY_KEY, R.BUSY)
        resumed = 0
        for n, value in entries:
            if self.scheduler.closing:
                break
            if not isinstance(value, dict) or not isinstance(value.get("key"), str):
                continue
            key = value["key"]
            live = self.states.get(key)
            if live is not None and (live.task is not None or live.deleted):
                continue
            if await self.coord.run_taken(key):
                continue
            try:
                live = await self.load_key(key, value.get("index"))
                if live is None:  # gone: forget it
                    forget = functools.partial(self.store.session_records.put, R.BUSY_KEY, R.BUSY, [(n, None)])
                    await self.io.write(forget)
                    continue
                await self.scheduler.resume(live)
                resumed += 1
            except Rejected:
                continue
            except Exception:
                log.exception("sessionkit server: could not resume session %r", key)
        return resumed

    def _compact_busy(self) -> None:
        """Drop the busy index's idle entries when they are many (one process: nobody writes meanwhile)."""
        store = self.store
        rows = store.session_records.get(R.BUSY_KEY, R.BUSY)
        keep = [(n, v) for n, v in rows if v is not None]
        if len(rows) - len(keep) < 1000:
            return
        store.delete_session(R.BUSY_KEY)
        if keep:
            store.session_records.put(R.BUSY_KEY, R.BUSY, keep)


def _index_for_key(key: str) -> str | None:
    """The principal index a stored key belongs to (its hash prefix, or the bearer token's);
    None for a key under no principal's namespace."""
    if "/" not in key:
        return R.index_key("")
    prefix = key.rsplit("/", 1)[0]
    if _HEX16.match(prefix):
        return R.INDEX_PREFIX + prefix
    return None
