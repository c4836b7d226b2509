"""Sessions the server owns: their runs, queues, event windows and durable records.

What lives where:

* in the store, as internal records beside each session (``Store._records``):
  ``server.session`` (n=0: ``createdAt``, ``digest`` of the conversation after the
  last run, ``lastSeq``) and ``server.message`` (n=1, 2, ...: what callers sent,
  with the run it was given to); runs and events are the agent's own records;
* in memory, per loaded session: the :class:`~sessionkit.RunController` that
  carries queued messages into the active run, the task driving the runs, and the
  window of recent events for live readers. All of it can be rebuilt from the
  store, which is what a restart does.

Everything here runs on the server's event loop; blocking reads of a whole
conversation (the digest) go to a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
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
STEER = "steer"
FOLLOW_UP = "followUp"
MODES = (FOLLOW_UP, STEER)

#: How long DELETE and shutdown wait for an interrupted run to record its end.
_STOP_GRACE = 10.0


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

    def bind_loop(self) -> None:
        """Start serving on the running loop (a restarted app starts from the store again)."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self.closing = False
        self.states.clear()
        self.active_runs = 0

    # ------------------------------------------------------------------ lookup

    def session_record(self, stored_id: str) -> dict | None:
        rows = self.store._records(stored_id, SESSION_KIND)
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
        controller.on_event(lambda event, s=state: self._on_event(s, event))
        runs = self.store.runs(stored_id)
        top = len(runs)
        for run in runs:
            rest = run.run_id[len(state.run_prefix):] if run.run_id.startswith(state.run_prefix) else ""
            if rest.isdigit():
                top = max(top, int(rest))
        state.run_n = top
        messages = self.store._records(stored_id, MESSAGE_KIND)
        state.next_msg = (messages[-1][0] + 1) if messages else 1
        self._recover_stale_runs(state, runs, record)
        self._trim()  # before adding: the caller is about to use this one
        self.states[stored_id] = state
        return state

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
            self.store._run_end(run.run_id, status=status, error=error, usage=run.usage)
            stored = self.store._append_event(
                state.stored_id,
                {"run_id": run.run_id, "kind": "run.end", "status": status, "error": error,
                 "error_type": None if saved else "ServerStopped", "usage": run.usage},
            )
            if saved:
                record = dict(record, digest=conversation_digest(path))
            record["lastSeq"] = stored["seq"]
            self.store._put_records(state.stored_id, SESSION_KIND, [(0, record)])

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
        if self.session_record(stored_id) is not None:
            return False
        if state is not None and state.task is None:  # it was deleted behind the server's back
            self._drop(state)
        session = self.store.session(stored_id)
        digest = await asyncio.to_thread(lambda: conversation_digest(session.history(compacted=False)))
        if self.session_record(stored_id) is not None:  # created meanwhile
            return False
        self.store._put_records(stored_id, SESSION_KIND, [(0, {"createdAt": _msg.now_iso(), "digest": digest})])
        return True

    async def delete(self, state: SessionState) -> None:
        """Cancel the active run, drop the queue, remove the session and everything of it."""
        async with state.lock:
            if state.deleted:
                raise Rejected(404, "session_not_found")
            state.deleted = True
            await self._stop(state)
            try:
                await asyncio.to_thread(self.store.delete_session, state.stored_id)
            except SessionNotFound:
                pass
            self._drop(state)

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
        if state.task is not None and state.running:
            active = f"{state.public_id}.{state.run_n}"
            if active not in seen:  # accepted, not yet recorded by the agent
                runs.append({"runId": active, "status": "running", "input": state.current_input,
                             "startedAt": state.started_at, "endedAt": None})
        messages = []
        for _, rec in self.store._records(state.stored_id, MESSAGE_KIND):
            item = {"runId": f"{state.public_id}.{rec['run']}", "text": rec["text"], "mode": rec["mode"],
                    "queued": rec["queued"], "at": rec["at"]}
            if rec.get("author") is not None:
                item["author"] = rec["author"]
            messages.append(item)
        return {"sessionId": state.public_id, "runs": runs, "active": active,
                "queued": state.queued, "messages": messages}

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
        if self._loop_thread is not None and threading.get_ident() != self._loop_thread:
            self.loop.call_soon_threadsafe(self._on_event, state, event)
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

    # ------------------------------------------------------------------ messages

    async def submit(self, state: SessionState, text: str, mode: str, author: str | None) -> dict:
        """Accept a caller's message: start a run, or join the active one (SPEC H2)."""
        if state.deleted or state.stopping:
            raise Rejected(404, "session_not_found")
        if self.closing:
            raise Rejected(503, "server_stopping")
        metadata = {"author": author} if author is not None else None
        if state.task is None:
            async with state.lock:
                if state.deleted:
                    raise Rejected(404, "session_not_found")
                if state.task is None:
                    return await self._start(state, text, mode, author, metadata)
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
        return {"runId": f"{state.public_id}.{state.run_n + 1}", "queued": queued}

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

    def _record_message(self, state, run_n, text, mode, author, *, queued) -> int:
        rec = state.next_msg
        value = {"run": run_n, "text": text, "mode": mode, "queued": queued, "at": _msg.now_iso()}
        if author is not None:
            value["author"] = author
        self.store._put_records(state.stored_id, MESSAGE_KIND, [(rec, value)])
        state.next_msg = rec + 1
        return rec

    # ------------------------------------------------------------------ runs

    async def _drive(self, state: SessionState, item: _Item | None) -> None:
        """Run the session's runs one after another while messages keep coming."""
        try:
            while item is not None:
                if state.stopping or self.closing:
                    break
                state.running = state.accepting = True
                state.turn_had_tools = False
                state.current_input = item.text
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
                await self._checkpoint(state)
                item = self._next_item(state)
        finally:
            state.running = state.accepting = False
            state.task = None
            self.active_runs -= 1
            self._trim()

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
            if state.hub is not None:  # it saw every event live
                last = state.hub.last_seq
            else:  # the events after the previous checkpoint: about one run's worth
                hint = record.get("lastSeq")
                newer = self.store.events(state.stored_id, hint if isinstance(hint, int) else None)
                last = newer[-1]["seq"] if newer else hint
            if isinstance(last, int) and last >= 0:
                record["lastSeq"] = last
            self.store._put_records(state.stored_id, SESSION_KIND, [(0, record)])
        except Exception:
            log.exception("session %r: could not record the conversation digest", state.public_id)

    def _next_item(self, state: SessionState) -> _Item | None:
        """The message that opens the next run (messages the last run did not take first)."""
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
            for rec_n, value in self.store._records(state.stored_id, MESSAGE_KIND):
                if any(it.rec == rec_n for it in items[: len(leftovers)]):
                    updates.append((rec_n, dict(value, run=state.run_n)))
            if updates:
                self.store._put_records(state.stored_id, MESSAGE_KIND, updates)
        first, rest = items[0], items[1:]
        for it in rest:
            (state.controller.steer if it.mode == STEER else state.controller.follow_up)(
                it.text, metadata=it.metadata
            )
            state.queued_recs[it.mode].append(it.rec)
        state.started_at = _msg.now_iso()
        return first
