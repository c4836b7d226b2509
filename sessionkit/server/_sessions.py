"""Sessions the server owns: their runs, queues, event windows and durable records.

What lives where:

* in the store, as records beside each session (``Store.records``):
  ``server.session`` (n=0: ``createdAt``, ``digest`` of the conversation after the
  last run, ``lastSeq``) and ``server.message`` (n=1, 2, ...: what callers sent,
  with the run it was given to); runs and events are the agent's own records;
* in memory, per loaded session: the :class:`~sessionkit.RunController` that
  carries queued messages into the active run, the task driving the runs, and the
  window of recent events for live readers. All of it can be rebuilt from the
  store, which is what a restart does.

Everything here runs on the server's event loop; blocking reads of a whole
conversation (the digest) go to a worker thread.

Several processes on one store (PostgreSQL, ``store.capabilities.coordination``): any worker takes any
request, and the store keeps them in step.

* Two store-wide holds per session (advisory locks, given back if a process dies):
  ``accept`` is held for every decision about a message (start a run, join one) and
  for creating the session; ``run`` is held by the one worker driving the session's
  runs, its *owner*, from the start of a run until it goes idle. A worker that takes
  ``run`` first closes the runs a dead owner left ``running``.
* The owner keeps a ``server.status`` record (n=0: the current run number, whether a
  run is active and still takes queued messages, the queue length) that other
  workers read to answer requests. A message sent to another worker while a run is
  active is recorded ``pending`` and signalled to the owner, which hands it to the
  active run (or the next one) and records the run that took it. Before the owner
  goes idle it looks once more for pending messages, holding ``accept``, so none is
  left behind.
* Every worker streams every session's events: the engine signals each event
  append, and a worker with live readers reads the new events from the store.
* Deleting a session asks its owner to stop, takes ``run``, then deletes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import socket
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .. import messages as _msg
from ..agent import RunController
from ..errors import RunFailed, SessionNotFound
from ._events import EventHub, Subscriber

log = logging.getLogger("sessionkit.server")

__all__ = ["SESSION_ID", "Rejected", "SessionManager", "conversation_digest"]

#: SPEC H1: what a session id may look like.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,125}\Z")

SESSION_KIND = "server.session"
MESSAGE_KIND = "server.message"
STATUS_KIND = "server.status"
STEER = "steer"
FOLLOW_UP = "followUp"
MODES = (FOLLOW_UP, STEER)

#: How long DELETE and shutdown wait for an interrupted run to record its end.
_STOP_GRACE = 10.0
#: How long a request waits for another worker's decision on the same session.
_ACCEPT_WAIT = 30.0


class Rejected(Exception):
    """A request the server refuses: HTTP ``status`` and the ``error`` code of the body."""

    def __init__(self, status: int, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.extra = extra

    def body(self) -> dict:
        return {"error": self.error, **self.extra}


def conversation_digest(messages) -> str:
    """SHA-256 over the messages of a path (ids and content, canonical JSON)."""
    h = hashlib.sha256()
    for message in messages:
        h.update(json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def stored_session_id(principal: str, session_id: str) -> str:
    """The store's id for a principal's session: the id itself for the bearer token,
    ``<principal, percent-escaped>/<id>`` for ``authenticate`` principals.

    Public ids never contain ``/`` and escaped principals never do either, so the
    mapping is one to one and no two principals share a stored session.
    """
    if principal == "":
        return session_id
    return f"{quote(principal, safe='')}/{session_id}"


@dataclass
class _Item:
    """A message waiting for a run: its text, mode, metadata and record number."""

    text: str
    mode: str
    metadata: dict | None
    rec: int


@dataclass
class SessionState:
    """A session loaded into the server (see the module docstring)."""

    stored_id: str
    public_id: str
    controller: RunController
    run_n: int = 0  # the number of the current or last run
    next_msg: int = 1  # the next message record number
    task: asyncio.Task | None = None
    running: bool = False  # an agent run is in progress
    accepting: bool = False  # that run will still take queued messages at a turn boundary
    stopping: bool = False  # being deleted or the server is stopping: start no run
    deleted: bool = False
    pending: deque = field(default_factory=deque)  # messages for the run after this one
    queued_recs: dict = field(default_factory=lambda: {STEER: deque(), FOLLOW_UP: deque()})
    hub: EventHub | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    turn_had_tools: bool = False
    started_at: str | None = None
    current_input: str | None = None
    holds_run: bool = False  # this worker is the session's owner (shared stores)
    status: dict | None = None  # the last status record this worker wrote

    @property
    def run_prefix(self) -> str:
        return self.stored_id + "."

    def stored_run_id(self, n: int) -> str:
        return f"{self.stored_id}.{n}"

    def public_run_id(self, run_id: Any) -> Any:
        if isinstance(run_id, str) and run_id.startswith(self.run_prefix):
            return f"{self.public_id}.{run_id[len(self.run_prefix):]}"
        return run_id

    def public_event(self, event: dict) -> dict:
        out = dict(event)
        out["session_id"] = self.public_id
        if "run_id" in out:
            out["run_id"] = self.public_run_id(out["run_id"])
        return out

    @property
    def queued(self) -> int:
        return self.controller.queued + len(self.pending)

    @property
    def idle(self) -> bool:
        return self.task is None and not (self.hub is not None and self.hub.subscribers)


class SessionManager:
    """Loads sessions, accepts messages, drives runs and feeds live readers."""

    def __init__(
        self,
        agent: Any,
        store: Any,
        *,
        max_concurrent_runs: int,
        max_queued: int,
        events_window: int,
        keep_idle: int = 1024,
    ) -> None:
        self.agent = agent
        self.store = store
        self.max_concurrent_runs = max_concurrent_runs
        self.max_queued = max_queued
        self.events_window = events_window
        self.keep_idle = keep_idle
        self.states: OrderedDict[str, SessionState] = OrderedDict()
        self.active_runs = 0
        self.closing = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.shared = store.capabilities.coordination
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self._listening = False

    def bind_loop(self) -> None:
        """Start serving on the running loop (a restarted app starts from the store again)."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.closing = False
        self.states.clear()
        self.active_runs = 0
        if self.shared and not self._listening:
            self.store.on_signal(self._signal_from_thread)
            self._listening = True

    # ------------------------------------------------------------------ lookup

    def session_record(self, stored_id: str) -> dict | None:
        rows = self.store.records(stored_id, SESSION_KIND)
        return rows[0][1] if rows else None

    def get(self, stored_id: str, public_id: str) -> SessionState:
        """The loaded state of an existing session; :class:`Rejected` 404 otherwise."""
        state = self.states.get(stored_id)
        if state is not None and state.deleted:
            raise Rejected(404, "session_not_found")
        record = self.session_record(stored_id)
        if record is None:
            if state is not None and state.task is None:  # deleted behind the server's back
                self._drop(state)
            raise Rejected(404, "session_not_found")
        if state is None:
            state = self._load(stored_id, public_id, record)
        self.states.move_to_end(stored_id)
        return state

    def _load(self, stored_id: str, public_id: str, record: dict) -> SessionState:
        controller = RunController()
        state = SessionState(stored_id=stored_id, public_id=public_id, controller=controller)
        controller.on_event(functools.partial(self._on_event, state))
        runs = self.store.runs(stored_id)
        state.run_n = self._top_run(state, runs)
        messages = self.store.records(stored_id, MESSAGE_KIND)
        state.next_msg = (messages[-1][0] + 1) if messages else 1
        if self.shared:  # another worker may be running it: recovery waits for the run hold
            state.run_n = max(state.run_n, self._status(stored_id).get("runN", 0))
        else:
            self._recover_stale_runs(state, runs, record)
        self._trim()  # before adding: the caller is about to use this one
        self.states[stored_id] = state
        return state

    @staticmethod
    def _top_run(state: SessionState, runs) -> int:
        """The highest run number the store knows for the session."""
        top = len(runs)
        for run in runs:
            rest = run.run_id[len(state.run_prefix):] if run.run_id.startswith(state.run_prefix) else ""
            if rest.isdigit():
                top = max(top, int(rest))
        return top

    def _recover_stale_runs(self, state: SessionState, runs, record: dict) -> None:
        """Close runs a stopped server left ``running`` (this process drives none of them).

        A server killed between saving a run's messages and recording the run's end
        leaves a conversation that no longer matches the stored digest although only
        that run wrote to it: such a run is recorded completed and the digest moves
        on; any other difference is a change behind the server's back (409 later).
        """
        stale = [r for r in runs if r.status == "running" and r.run_id.startswith(state.run_prefix)]
        if not stale:
            return
        session = self.store.session(state.stored_id)
        path = session.get_history(compacted=False)
        for run in stale:
            tail = len(path)
            while tail and (path[tail - 1].get("metadata") or {}).get("run_id") == run.run_id:
                tail -= 1
            saved = tail < len(path) and record.get("digest") == conversation_digest(path[:tail])
            status = "completed" if saved else "interrupted"
            error = None if saved else "the server stopped during this run"
            self.store.end_run(run.run_id, status=status, error=error, usage=run.usage)
            stored = self.store.append_events(
                state.stored_id,
                [{"run_id": run.run_id, "kind": "run.end", "status": status, "error": error,
                  "error_type": None if saved else "ServerStopped", "usage": run.usage}],
            )[0]
            if saved:
                record = dict(record, digest=conversation_digest(path))
            record["lastSeq"] = stored["seq"]
            self.store.put_records(state.stored_id, SESSION_KIND, [(0, record)])

    def _trim(self) -> None:
        """Forget idle sessions beyond ``keep_idle`` (they load again from the store)."""
        excess = len(self.states) - self.keep_idle
        if excess <= 0:
            return
        for stored_id, state in list(self.states.items()):
            if excess <= 0:
                break
            if state.idle and not state.lock.locked():
                del self.states[stored_id]
                excess -= 1

    def _drop(self, state: SessionState) -> None:
        if self.states.get(state.stored_id) is state:
            del self.states[state.stored_id]
        if state.hub is not None:
            state.hub.close_all("session_deleted")
            state.hub = None

    # ------------------------------------------------------------------ sessions

    async def create(self, stored_id: str, public_id: str) -> bool:
        """Create a session; False when it already exists."""
        state = self.states.get(stored_id)
        if state is not None and state.deleted:
            async with state.lock:  # a DELETE is finishing: create afresh after it
                pass
        async with self._hold("accept", stored_id):  # another worker may be creating it too
            if self.session_record(stored_id) is not None:
                return False
            if state is not None and state.task is None:  # it was deleted behind the server's back
                self._drop(state)
            session = self.store.session(stored_id)
            digest = await asyncio.to_thread(lambda: conversation_digest(session.history(compacted=False)))
            if self.session_record(stored_id) is not None:  # created meanwhile
                return False
            self.store.put_records(stored_id, SESSION_KIND,
                                    [(0, {"createdAt": _msg.now_iso(), "digest": digest})])
            return True

    async def delete(self, state: SessionState) -> None:
        """Cancel the active run, drop the queue, remove the session and everything of it."""
        async with state.lock:
            if state.deleted:
                raise Rejected(404, "session_not_found")
            state.deleted = True
            await self._stop(state)
            held = await self._take_run_for_delete(state) if self.shared else False
            try:
                await asyncio.to_thread(self.store.delete_session, state.stored_id)
            except SessionNotFound:
                pass
            finally:
                if held:
                    self.store.release_hold(self._hold_name("run", state.stored_id))
            if self.shared:
                self.store.signal(state.stored_id, "deleted")
            self._drop(state)

    async def _take_run_for_delete(self, state: SessionState) -> bool:
        """Ask the worker running the session to stop; True once this worker holds ``run``."""
        name = self._hold_name("run", state.stored_id)
        loop = asyncio.get_running_loop()  # the one bind_loop() recorded
        deadline = loop.time() + 2 * _STOP_GRACE + 5
        asked = False
        while not self.store.try_hold(name):
            if not asked:
                self.store.signal(state.stored_id, "stop")
                asked = True
            if loop.time() > deadline:
                log.warning("session %r: the worker running it did not stop; deleting anyway", state.public_id)
                return False
            await asyncio.sleep(0.02)
        return True

    async def _stop(self, state: SessionState) -> None:
        """Interrupt the run, drop queued messages, wait for the run to record its end."""
        state.stopping = True
        state.pending.clear()
        state.controller.clear()
        for recs in state.queued_recs.values():
            recs.clear()
        task = state.task
        if task is None:
            return
        state.controller.interrupt()
        done, _ = await asyncio.wait({task}, timeout=_STOP_GRACE)
        if not done:
            log.warning("session %r: the run did not stop within %.0f s; cancelling it", state.public_id, _STOP_GRACE)
            task.cancel()
            await asyncio.wait({task}, timeout=_STOP_GRACE)

    async def shutdown(self) -> None:
        """Stop every run (recorded ``interrupted``) and close every live reader."""
        self.closing = True
        states = list(self.states.values())
        await asyncio.gather(*(self._stop(s) for s in states if s.task is not None), return_exceptions=True)
        self.close_streams("server_stopping")

    def close_streams(self, reason: str) -> None:
        for state in list(self.states.values()):
            if state.hub is not None:
                state.hub.close_all(reason)
                state.hub = None

    # ------------------------------------------------------------------ reading

    def describe(self, state: SessionState) -> dict:
        """``GET /sessions/{id}``: runs, active run, queue length, messages callers sent."""
        runs = []
        seen = set()
        for run in self.store.runs(state.stored_id):
            public = state.public_run_id(run.run_id)
            seen.add(public)
            runs.append({"runId": public, "status": run.status, "input": run.input,
                         "startedAt": run.started_at, "endedAt": run.ended_at})
        active = None
        queued = state.queued
        running, run_n, run_input, started_at = state.task is not None and state.running, state.run_n, \
            state.current_input, state.started_at
        records = self.store.records(state.stored_id, MESSAGE_KIND)
        if self.shared and state.task is None:  # another worker may own it: its status record says
            status = self._status(state.stored_id)
            running = bool(status.get("running")) and self._owner_alive(state.stored_id)
            queued = sum(1 for _, rec in records if rec.get("pending"))
            if running:
                run_n, run_input, started_at = status.get("runN", 0), status.get("input"), status.get("startedAt")
                queued += status.get("queued", 0)
        if running:
            active = f"{state.public_id}.{run_n}"
            if active not in seen:  # accepted, not yet recorded by the agent
                runs.append({"runId": active, "status": "running", "input": run_input,
                             "startedAt": started_at, "endedAt": None})
        messages = []
        for _, rec in records:
            item = {"runId": f"{state.public_id}.{rec['run']}", "text": rec["text"], "mode": rec["mode"],
                    "queued": rec["queued"], "at": rec["at"]}
            if rec.get("author") is not None:
                item["author"] = rec["author"]
            messages.append(item)
        return {"sessionId": state.public_id, "runs": runs, "active": active,
                "queued": queued, "messages": messages}

    # ------------------------------------------------------------------ events

    def hub(self, state: SessionState) -> EventHub:
        """The session's event window, read from the store when first needed."""
        if state.hub is None:
            record = self.session_record(state.stored_id) or {}
            hint = record.get("lastSeq")
            after = None
            if isinstance(hint, int) and hint - self.events_window >= 0:
                after = hint - self.events_window
            events = self.store.events(state.stored_id, after)
            events = events[-self.events_window:]
            hub = EventHub(self.events_window, after_seq=events[0]["seq"] - 1 if events else -1)
            hub.load(state.public_event(e) for e in events)
            state.hub = hub
        return state.hub

    def subscribe(self, state: SessionState, after: int | None) -> Subscriber:
        sub = Subscriber(limit=self.events_window + 4096)
        self.hub(state).subscribe(sub, after)
        return sub

    def unsubscribe(self, state: SessionState, sub: Subscriber) -> None:
        hub = state.hub
        if hub is None:
            return
        hub.unsubscribe(sub)
        if not hub.subscribers:  # nobody reads: free the window (the store keeps the events)
            state.hub = None
            self._trim()

    def _on_event(self, state: SessionState, event: dict) -> None:
        """Every event of the session's runs, as the agent records it (on the loop)."""
        loop = self.loop  # set with _loop_thread
        if loop is not None and self._loop_thread is not None and threading.get_ident() != self._loop_thread:
            loop.call_soon_threadsafe(self._on_event, state, event)
            return
        kind = event.get("kind")
        if kind == "turn.start":
            state.turn_had_tools = False
        elif kind == "tool.call":
            state.turn_had_tools = True
        elif kind == "turn.end":
            # The run takes the next queued message right after this event; with none
            # queued and no tool call to answer, this was its last turn boundary.
            if not state.turn_had_tools and state.controller.queued == 0:
                state.accepting = False
        elif kind == "run.end":
            state.accepting = False
        if state.hub is not None:
            state.hub.publish(state.public_event(event))
        if state.holds_run:
            self._write_status(state)

    # ------------------------------------------------------------------ messages

    async def submit(self, state: SessionState, text: str, mode: str, author: str | None) -> dict:
        """Accept a caller's message: start a run, or join the active one (SPEC H2)."""
        if state.deleted or state.stopping:
            raise Rejected(404, "session_not_found")
        if self.closing:
            raise Rejected(503, "server_stopping")
        metadata = {"author": author} if author is not None else None
        if self.shared:
            return await self._submit_shared(state, text, mode, author, metadata)
        if state.task is None:
            async with state.lock:
                if state.deleted:
                    raise Rejected(404, "session_not_found")
                if state.task is None:
                    return await self._start(state, text, mode, author, metadata)
        return self._join(state, text, mode, author, metadata)

    def _join(self, state: SessionState, text, mode, author, metadata) -> dict:
        """A message while this worker runs the session: into the active run, or the next."""
        if state.queued >= self.max_queued:
            raise Rejected(429, "too_busy")  # this session's queue is full
        if state.accepting:
            rec = self._record_message(state, state.run_n, text, mode, author, queued=True)
            (state.controller.steer if mode == STEER else state.controller.follow_up)(text, metadata=metadata)
            state.queued_recs[mode].append(rec)
            return {"runId": f"{state.public_id}.{state.run_n}", "queued": True}
        # The active run is past its last turn boundary (or already over, its digest being
        # recorded): the message opens the next run, which starts as soon as that is done.
        # It is queued only if it has to wait for a run still in progress.
        queued = state.running
        rec = self._record_message(state, state.run_n + 1, text, mode, author, queued=queued)
        state.pending.append(_Item(text, mode, metadata, rec))
        if self.shared:
            self._write_status(state)
        return {"runId": f"{state.public_id}.{state.run_n + 1}", "queued": queued}

    async def _submit_shared(self, state: SessionState, text, mode, author, metadata) -> dict:
        """``submit`` when other workers serve the same store (see the module docstring)."""
        sid = state.stored_id
        async with state.lock:
            if state.deleted or state.stopping:
                raise Rejected(404, "session_not_found")
            async with self._hold("accept", sid):
                record = self.session_record(sid)
                if record is None:  # deleted by another worker
                    raise Rejected(404, "session_not_found")
                messages = self.store.records(sid, MESSAGE_KIND)
                state.next_msg = max(state.next_msg, messages[-1][0] + 1 if messages else 1)
                if state.task is not None:  # this worker runs it
                    return self._join(state, text, mode, author, metadata)
                if not self.store.try_hold(self._hold_name("run", sid)):
                    return self._join_remote(state, text, mode, author, messages)
                state.holds_run = True
                try:
                    runs = self.store.runs(sid)
                    state.run_n = max(state.run_n, self._status(sid).get("runN", 0), self._top_run(state, runs))
                    self._recover_stale_runs(state, runs, record)  # a dead owner's runs
                    answer = await self._start(state, text, mode, author, metadata)
                except BaseException:
                    if state.task is None:
                        self._release_run(state)
                    raise
                self._write_status(state)  # before answering: every worker now reports the run
                self._absorb(state)  # messages a dead owner accepted and never ran
                return answer

    def _join_remote(self, state: SessionState, text, mode, author, messages) -> dict:
        """A message while another worker runs the session: recorded pending, its owner told."""
        status = self._status(state.stored_id)
        waiting = sum(1 for _, rec in messages if rec.get("pending")) + status.get("queued", 0)
        if waiting >= self.max_queued:
            raise Rejected(429, "too_busy")
        if status.get("accepting"):  # joins the active run at its next turn boundary
            run_n, queued = status.get("runN", 0), True
        else:  # opens the next run; it waits only if a run is still in progress
            run_n, queued = status.get("runN", 0) + 1, bool(status.get("running"))
        self._record_message(state, run_n, text, mode, author, queued=queued, pending=True)
        self.store.signal(state.stored_id, "message")
        return {"runId": f"{state.public_id}.{run_n}", "queued": queued}

    async def _start(self, state: SessionState, text, mode, author, metadata) -> dict:
        if self.active_runs >= self.max_concurrent_runs:
            raise Rejected(429, "too_busy")
        record = self.session_record(state.stored_id)
        if record is None:
            raise Rejected(404, "session_not_found")
        expected = record.get("digest")
        if expected is not None:
            session = self.store.session(state.stored_id)
            actual = await asyncio.to_thread(lambda: conversation_digest(session.history(compacted=False)))
            if actual != expected:
                raise Rejected(409, "conversation_unrecoverable")
        if state.deleted or state.stopping:
            raise Rejected(404, "session_not_found")
        if self.closing:
            raise Rejected(503, "server_stopping")
        if self.active_runs >= self.max_concurrent_runs:  # others started while we read
            raise Rejected(429, "too_busy")
        n = state.run_n + 1
        rec = self._record_message(state, n, text, mode, author, queued=False)
        state.run_n = n
        state.running = state.accepting = True
        state.started_at = _msg.now_iso()
        state.current_input = text
        self.active_runs += 1
        state.task = asyncio.create_task(self._drive(state, _Item(text, mode, metadata, rec)),
                                         name=f"sessionkit run {state.public_id}.{n}")
        return {"runId": f"{state.public_id}.{n}", "queued": False}

    def _record_message(self, state, run_n, text, mode, author, *, queued, pending=False) -> int:
        rec = state.next_msg
        value = {"run": run_n, "text": text, "mode": mode, "queued": queued, "at": _msg.now_iso()}
        if author is not None:
            value["author"] = author
        if pending:
            value["pending"] = True
        self.store.put_records(state.stored_id, MESSAGE_KIND, [(rec, value)])
        state.next_msg = rec + 1
        return rec

    # ------------------------------------------------------------------ runs

    async def _drive(self, state: SessionState, item: _Item | None) -> None:
        """Run the session's runs one after another while messages keep coming.

        ``active_runs`` counts runs in progress: _start counted the first; a later one,
        for messages already accepted, waits for a free place rather than being refused.
        """
        counted = True
        try:
            while item is not None:
                while not counted and self.active_runs >= self.max_concurrent_runs:
                    if state.stopping or self.closing:
                        break
                    await asyncio.sleep(0.01)
                if state.stopping or self.closing:
                    break
                if not counted:
                    self.active_runs += 1
                    counted = True
                state.running = state.accepting = True
                state.turn_had_tools = False
                state.current_input = item.text
                if self.shared:
                    self._write_status(state)
                try:
                    await self.agent.run(
                        item.text,
                        session=self.store.session(state.stored_id),
                        controller=state.controller,
                        run_id=state.stored_run_id(state.run_n),
                        metadata=item.metadata,
                    )
                except RunFailed:
                    pass  # recorded by the agent (status, error, run.end event)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("session %r: run %s failed", state.public_id, state.run_n)
                finally:
                    state.running = state.accepting = False
                    self.active_runs -= 1  # the run is over: its place is free for any session
                    counted = False
                    if state.holds_run:
                        self._write_status(state)
                await self._checkpoint(state)
                item = self._next_item(state)
                if item is None and self.shared and not (state.stopping or self.closing):
                    try:
                        item = await self._last_look(state)
                    except Rejected:  # other workers held the session too long; what they
                        # queued stays pending and rides with the session's next run
                        log.warning("session %r: could not look for queued messages before going idle",
                                    state.public_id)
                        item = None
        finally:
            state.running = state.accepting = False
            state.task = None
            if counted:
                self.active_runs -= 1
            if state.holds_run:
                self._write_status(state)
                self._release_run(state)
            self._trim()

    async def _last_look(self, state: SessionState) -> _Item | None:
        """Before going idle: take what other workers queued meanwhile, or give ``run`` back.

        Holding ``accept``, no other worker can record a message for this owner between
        the look and the release, so nothing pending is left behind.
        """
        async with self._hold("accept", state.stored_id):
            item = self._next_item(state)
            if item is None:
                state.running = state.accepting = False
                self._write_status(state)
                self._release_run(state)
            return item

    async def _checkpoint(self, state: SessionState) -> None:
        """After a run: record the conversation's digest and the last event's seq."""
        if state.deleted:
            return
        session = self.store.session(state.stored_id)
        try:
            digest = await asyncio.to_thread(lambda: conversation_digest(session.history(compacted=False)))
            record = self.session_record(state.stored_id)
            if record is None or state.deleted:
                return
            record["digest"] = digest
            last: object
            if state.hub is not None:  # it saw every event live
                last = state.hub.last_seq
            else:  # the events after the previous checkpoint: about one run's worth
                hint = record.get("lastSeq")
                newer = self.store.events(state.stored_id, hint if isinstance(hint, int) else None)
                last = newer[-1]["seq"] if newer else hint
            if isinstance(last, int) and last >= 0:
                record["lastSeq"] = last
            self.store.put_records(state.stored_id, SESSION_KIND, [(0, record)])
        except Exception:
            log.exception("session %r: could not record the conversation digest", state.public_id)

    def _next_item(self, state: SessionState) -> _Item | None:
        """The message that opens the next run (messages the last run did not take first)."""
        if self.shared:
            self._absorb(state)
        leftovers = state.controller.clear()  # a failed or interrupted run leaves its queue
        items: list[_Item] = []
        if leftovers:
            counts = {STEER: 0, FOLLOW_UP: 0}
            for entry in leftovers:
                counts[entry["mode"]] += 1
            recs = {mode: list(state.queued_recs[mode])[-counts[mode]:] if counts[mode] else []
                    for mode in counts}
            for entry in leftovers:
                rec = recs[entry["mode"]].pop(0) if recs[entry["mode"]] else 0
                items.append(_Item(entry["text"], entry["mode"], entry.get("metadata"), rec))
        for recs in state.queued_recs.values():
            recs.clear()
        items.extend(state.pending)
        state.pending.clear()
        if not items or state.stopping or self.closing:
            return None
        state.run_n += 1
        if leftovers:  # they were told the run that failed: record the run that takes them
            updates = []
            for rec_n, value in self.store.records(state.stored_id, MESSAGE_KIND):
                if any(it.rec == rec_n for it in items[: len(leftovers)]):
                    updates.append((rec_n, dict(value, run=state.run_n)))
            if updates:
                self.store.put_records(state.stored_id, MESSAGE_KIND, updates)
        first, rest = items[0], items[1:]
        for it in rest:
            (state.controller.steer if it.mode == STEER else state.controller.follow_up)(
                it.text, metadata=it.metadata
            )
            state.queued_recs[it.mode].append(it.rec)
        state.started_at = _msg.now_iso()
        return first

    # ------------------------------------------------------------------ several workers

    @staticmethod
    def _hold_name(kind: str, stored_id: str) -> str:
        return f"server.{kind}\x00{stored_id}"

    @contextlib.asynccontextmanager
    async def _hold(self, kind: str, stored_id: str):
        """Hold ``kind`` for the session across workers (nothing to hold on a store of one server)."""
        if not self.shared:
            yield
            return
        name = self._hold_name(kind, stored_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _ACCEPT_WAIT
        delay = 0.002
        while not self.store.try_hold(name):
            if loop.time() > deadline:
                raise Rejected(429, "too_busy")  # another worker has held the session this long
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
        try:
            yield
        finally:
            self.store.release_hold(name)

    def _release_run(self, state: SessionState) -> None:
        if state.holds_run:
            state.holds_run = False
            try:
                self.store.release_hold(self._hold_name("run", state.stored_id))
            except Exception:
                log.exception("session %r: could not give back the run hold", state.public_id)

    def _status(self, stored_id: str) -> dict:
        rows = self.store.records(stored_id, STATUS_KIND)
        return rows[0][1] if rows and isinstance(rows[0][1], dict) else {}

    def _owner_alive(self, stored_id: str) -> bool:
        """Whether some worker holds the session's ``run`` (a dead one's hold is gone)."""
        return self.store.hold_taken(self._hold_name("run", stored_id))

    def _write_status(self, state: SessionState) -> None:
        """The owner's view of the session, for the other workers (written when it changes)."""
        if state.deleted:
            return
        value = {"runN": state.run_n, "running": state.running, "accepting": state.accepting,
                 "queued": state.queued, "input": state.current_input, "startedAt": state.started_at,
                 "owner": self.worker}
        if value == state.status:
            return
        try:
            self.store.put_records(state.stored_id, STATUS_KIND, [(0, value)])
            state.status = value
        except Exception:
            log.exception("session %r: could not record its status for the other workers", state.public_id)

    def _signal_from_thread(self, stored_id: str, kind: str, data: Any) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._on_signal, stored_id, kind, data)

    def _on_signal(self, stored_id: str, kind: str, data: Any) -> None:
        """Another worker's news about a session this worker has loaded (on the loop)."""
        state = self.states.get(stored_id)
        if state is None:
            return
        try:
            if kind == "events":
                self._pull_events(state, data)
            elif kind == "message":
                self._absorb(state)
            elif kind == "stop":
                if state.task is not None and not state.deleted:
                    state.deleted = True  # another worker is deleting it
                    asyncio.get_running_loop().create_task(self._stop_and_drop(state))
            elif kind == "deleted":
                if state.task is None and not state.holds_run:
                    self._drop(state)
        except Exception:
            log.exception("session %r: could not handle the %s signal of another worker", state.public_id, kind)

    async def _stop_and_drop(self, state: SessionState) -> None:
        await self._stop(state)
        self._drop(state)

    def _pull_events(self, state: SessionState, last: Any) -> None:
        """Read the events another worker appended into the session's window (live readers only)."""
        hub = state.hub
        if hub is None or (isinstance(last, int) and last <= hub.last_seq):
            return
        for event in self.store.events(state.stored_id, hub.last_seq if hub.last_seq >= 0 else None):
            hub.publish(state.public_event(event))

    def _absorb(self, state: SessionState) -> None:
        """Take the messages other workers recorded pending: into the active run, or the next."""
        if not state.holds_run or state.task is None or state.stopping or self.closing:
            return
        updates = []
        for n, rec in self.store.records(state.stored_id, MESSAGE_KIND):
            if not rec.get("pending"):
                continue
            metadata = {"author": rec["author"]} if rec.get("author") is not None else None
            if state.accepting:
                (state.controller.steer if rec["mode"] == STEER else state.controller.follow_up)(
                    rec["text"], metadata=metadata)
                state.queued_recs[rec["mode"]].append(n)
                run_n = state.run_n
            else:
                state.pending.append(_Item(rec["text"], rec["mode"], metadata, n))
                run_n = state.run_n + 1
            updates.append((n, dict(rec, pending=False, run=run_n)))
        if updates:
            self.store.put_records(state.stored_id, MESSAGE_KIND, updates)
            self._write_status(state)
