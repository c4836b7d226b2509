"""Every litellm completion recorded in a store: ``sk.capture(store)``.

::

    import litellm
    import sessionkit as sk

    store = sk.open_store("notebook.db")
    with sk.capture(store):                      # or session="experiments"
        litellm.completion(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])

While the block runs, each completion made through litellm (``completion`` and
``acompletion``, streamed or not, from any thread) is stored in one session (``session=``, by
default :data:`DEFAULT_SESSION`, ``"litellm"``): the call's input messages as a path from a root
(converted from the OpenAI chat format as ``sk.io.chat_to_messages`` converts them) and its reply
as the child of the last one. Ids come from the content and the parent
(``sk.io.openai.chat_message_id``), so a message already on the tree at that place is reused: calls
that share a beginning share one path, and a changed system prompt or another question starts a
branch where they differ. Each call is also a run (``store.runs``), with its tokens, cost
(litellm's, ``None`` for an unpriced model) and latency, and its events (``run.start``,
``turn.start``, ``delta.text``, ``tool.call``, ``usage``, ``turn.end``, ``run.end``, timed at the
call's start and end); a call that raised is a ``failed`` run. docs/integrations/litellm-capture.md
has the mapping.

The capture object is a litellm callback (a ``CustomLogger``): ``litellm.callbacks.append(capture)``
records every call until it is taken out again, without a ``with`` block.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from datetime import datetime
from typing import Any

from .. import parts as _parts
from ..agent.models import add_callback, callback_base, remove_callback, response_usage
from ..errors import UsageError
from ..io.openai import chat_message_id, chat_to_messages
from ..messages import to_iso
from ..store import Session, Store

__all__ = ["capture", "LiteLLMCapture", "DEFAULT_SESSION"]

log = logging.getLogger("sessionkit.capture")

_IN_ORDER = 5.0  # seconds a call's record waits for the calls that began before it

#: The session a capture records into when no ``session=`` is given.
DEFAULT_SESSION = "litellm"

# What litellm adds to a chat message of its own and a reader of the conversation does not need
# (a Message object passed back as the next call's input carries it; dropped so the same message
# gets the same id whether it is given as that object or as a plain dict).
_BOOKKEEPING = {"provider_specific_fields"}


def _plain(value: Any) -> Any:
    """A chat message (a dict or a litellm/pydantic object) as plain JSON values, ``None`` fields left out."""
    if hasattr(value, "model_dump") and callable(value.model_dump):
        value = value.model_dump()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None and k not in _BOOKKEEPING}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _chain(chat: list[dict], parent: str | None) -> list[dict]:
    """The chat's messages as one chain under ``parent``, each id from its own chat message and its parent.

    The conversion folds each tool result into the call's part; the id hashes the chat message
    alone (not the results folded into it), so the assistant message that asked for a tool has
    the same id as the reply that asked for it in the call before.
    """
    converted = [m for m, _ in chat_to_messages(chat, source="litellm call")]
    records = [r for r in chat if r.get("role") not in ("tool", "function")]
    for message, record in zip(converted, records, strict=True):
        message["id"] = chat_message_id(parent, [record])
        parent = message["id"]
    return converted


def _aware(moment: Any) -> datetime | None:
    """litellm's start or end time (a naive local time) as an aware datetime; None when it gave none."""
    if isinstance(moment, datetime):
        return moment.astimezone() if moment.tzinfo is None else moment
    return None


def _iso(moment: Any) -> str | None:
    aware = _aware(moment)
    return None if aware is None else to_iso(aware)


class _RunLog:
    """The store's run records, as a capture writes them: the one place that names them."""

    def __init__(self, store: Store):
        self._store = store

    def record(
        self,
        session_id: str,
        run_id: str,
        *,
        input: str | None,
        meta: dict,
        events: list[dict],
        status: str,
        error: str | None,
        usage: dict | None,
        started_at: datetime | None,
        ended_at: datetime | None,
    ) -> None:
        self._store.run_log.begin(session_id, run_id, input, meta=meta, started_at=started_at)
        self._store.run_log.append_events(session_id, events)
        self._store.run_log.end(run_id, status=status, error=error, usage=usage, ended_at=ended_at)


class LiteLLMCapture(callback_base()):  # type: ignore[misc]  # litellm's CustomLogger, imported by agent.models
    """Records litellm completions into a store (see the module docstring); made by :func:`capture`.

    A context manager (``with`` or ``async with``) that registers it for its block, or a litellm
    callback of its own (``litellm.callbacks.append(c)``). ``run_ids`` lists the runs it recorded,
    ``errors`` the calls it could not record (each also logged as a warning on the
    ``sessionkit.capture`` logger; the litellm call itself is never disturbed).
    """

    def __init__(self, store: Store, *, session: str | Session | None = None, timeout: float = 10.0):
        super().__init__()
        if not isinstance(store, Store):
            raise TypeError(f"store must be a sessionkit Store (sk.open_store(...)), got {type(store).__name__}")
        if session is None:
            session = store.session(DEFAULT_SESSION)
        elif isinstance(session, str):
            session = store.session(session)
        elif isinstance(session, Session):
            if session.store is not store:
                raise UsageError("session= is a session of another store than the one given")
        else:
            raise TypeError(f"session must be a session id, a Session or None, got {type(session).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        self.store = store
        self.session = session
        # litellm keeps one callback per class and public str/int/bool attributes: an id of its
        # own lets several captures (nested, or of other sessions) report at once
        self.capture_id = uuid.uuid4().hex
        self.timeout = float(timeout)
        self.run_ids: list[str] = []
        self.errors: list[BaseException] = []
        self._runs = _RunLog(store)
        self._cond = threading.Condition()
        self._active = True  # whether calls starting now are recorded
        self._registered = False  # whether the context manager put it in litellm.callbacks
        self._pending: dict[str, bool] = {}  # calls begun while active, not recorded yet -> async?
        self._order: dict[str, int] = {}  # those calls -> their number, in the order they began
        self._began = 0
        self._seen: set[str] = set()  # calls recorded (litellm may report one twice)

    def __repr__(self) -> str:
        state = "active" if self._active else "stopped"
        return f"<sessionkit capture of litellm into {self.session.session_id!r} ({state}, {len(self.run_ids)} runs)>"

    # -- the context manager --------------------------------------------------------------
    def __enter__(self) -> LiteLLMCapture:
        with self._cond:
            if self._registered:
                raise UsageError("this capture is active already; make a new one with sk.capture(store)")
            self._active = True
            self._registered = True
        add_callback(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop(wait=True)

    async def __aenter__(self) -> LiteLLMCapture:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        with self._cond:
            self._active = False
        await self.wait_async()
        self._stop(wait=False)

    def _stop(self, *, wait: bool) -> None:
        """No new calls are recorded; those begun are waited for (up to ``timeout``), and the
        callback leaves litellm once they are recorded."""
        with self._cond:
            self._active = False
        # On a thread running an event loop, a coroutine's call is reported by that loop once this
        # returns: it is left to come (the callback stays until it has), and the calls of other
        # threads are waited for.
        in_loop = _loop_running()
        if wait:
            self.wait(only_sync=in_loop)
        with self._cond:
            lost = [c for c, is_async in self._pending.items() if not (is_async and in_loop)]
            for call_id in lost:
                del self._pending[call_id]
                self._order.pop(call_id, None)
            self._cond.notify_all()
        if lost:
            log.warning(
                "sessionkit capture: %d litellm call(s) made while recording were not reported by litellm "
                "within %s s and are not recorded (an async call whose event loop ended before litellm "
                "reported it: await capture.wait_async() in that loop, or use `async with`)",
                len(lost),
                self.timeout,
            )
        self._leave_if_done()

    def wait(self, timeout: float | None = None, *, only_sync: bool = False) -> bool:
        """Wait until every call begun while recording is recorded (``timeout`` seconds, default the
        capture's); True when none is left. litellm reports a call just after it returns: a sync
        call from a thread of its own, an async call from a task of the call's event loop (so a
        coroutine waits with :meth:`wait_async`, which leaves the loop running)."""
        limit = self.timeout if timeout is None else timeout
        with self._cond:
            return self._cond.wait_for(
                lambda: not any(not is_async or not only_sync for is_async in self._pending.values()), limit
            )

    async def wait_async(self, timeout: float | None = None) -> bool:
        """:meth:`wait` from a coroutine: the event loop keeps running (and reporting its calls) meanwhile."""
        return await asyncio.to_thread(self.wait, timeout)

    def _leave_if_done(self) -> None:
        with self._cond:
            leave = self._registered and not self._active and not self._pending
            if leave:
                self._registered = False
        if leave:
            remove_callback(self)

    # -- litellm's callback interface -------------------------------------------------------
    def log_pre_api_call(self, model: Any, messages: Any, kwargs: dict) -> None:
        call_id = kwargs.get("litellm_call_id")
        if not isinstance(call_id, str):
            return
        with self._cond:
            if self._active and call_id not in self._seen and call_id not in self._pending:
                self._pending[call_id] = bool((kwargs.get("litellm_params") or {}).get("acompletion"))
                self._order[call_id] = self._began
                self._began += 1

    def log_success_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
        self._report(kwargs, response_obj, start_time, end_time, None)

    def log_failure_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
        self._report(kwargs, None, start_time, end_time, kwargs.get("exception") or Exception("the call failed"))

    async def async_log_success_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
        await asyncio.to_thread(self._report, kwargs, response_obj, start_time, end_time, None)

    async def async_log_failure_event(self, kwargs: dict, response_obj: Any, start_time: Any, end_time: Any) -> None:
        error = kwargs.get("exception") or Exception("the call failed")
        await asyncio.to_thread(self._report, kwargs, None, start_time, end_time, error)

    # -- recording ------------------------------------------------------------------------
    def _report(self, kwargs: dict, response: Any, start: Any, end: Any, error: BaseException | None) -> None:
        call_id = kwargs.get("litellm_call_id")
        call_id = call_id if isinstance(call_id, str) and call_id else uuid.uuid4().hex
        with self._cond:
            if call_id in self._seen or (call_id not in self._pending and not self._active):
                return
            self._seen.add(call_id)
            # litellm reports calls from a pool of threads, in any order; replies are recorded in
            # the order their calls began (so the latest leaf is the latest call's reply), a call
            # waiting at most _IN_ORDER seconds for the reports of those that began before it. A
            # failure (reported in the caller's thread, before it sees the error) does not wait.
            mine = self._order.get(call_id)
            if mine is not None and error is None:
                number = mine
                self._cond.wait_for(
                    lambda: not any(n < number for c, n in self._order.items() if c in self._pending), _IN_ORDER
                )
        try:
            self._record(call_id, kwargs, response, start, end, error)
        except Exception as exc:  # never disturb the caller's litellm call; say what was not recorded
            log.warning("sessionkit could not record litellm call %s: %s", call_id, exc)
            self.errors.append(exc)
        finally:
            with self._cond:
                self._pending.pop(call_id, None)
                self._order.pop(call_id, None)
                self._cond.notify_all()
            self._leave_if_done()

    def _record(
        self, call_id: str, kwargs: dict, response: Any, start: Any, end: Any, error: BaseException | None
    ) -> None:
        model = kwargs.get("model") if isinstance(kwargs.get("model"), str) else None
        chat = [_plain(m) for m in kwargs.get("messages") or ()]
        inputs = _chain(chat, None)
        at = inputs[-1]["id"] if inputs else None
        run_id = f"litellm-{uuid.uuid4().hex}"  # a run id is never reused in a store, whoever records the call
        usage = response_usage(response, model=model) if error is None else None
        choices = list(getattr(response, "choices", None) or ()) if error is None else []
        replies: list[tuple[dict, Any]] = []
        for choice in choices:
            record = {"role": "assistant", **_plain(getattr(choice, "message", None) or {})}
            (reply,) = _chain([record], at)
            reply["metadata"] = {**reply.get("metadata", {}), "run_id": run_id, "model": (usage or {}).get("model")}
            if not replies:
                reply["metadata"]["usage"] = usage  # the call's usage, once (its cost counted once)
            replies.append((reply, getattr(choice, "finish_reason", None)))
        prompt = next((m for m in reversed(inputs) if m["role"] == "user"), None)
        if inputs and inputs[-1]["role"] == "user":
            inputs[-1]["metadata"] = {**inputs[-1].get("metadata", {}), "run_id": run_id}
        status = "completed" if error is None else "failed"
        meta = {"at": at, "source": "litellm", "call_id": call_id, "model": model, "latency_s": _seconds(start, end)}
        events = self._events(run_id, prompt, at, replies, usage, error, start, end)
        session = self.session
        with self.store.transaction():
            stored = session.append_many(inputs, parent_id=None) if inputs else []
            for message, result in zip(inputs, stored):
                if not result.inserted and result.message.get("parts") != message["parts"]:
                    session.update({**result.message, "parts": message["parts"]})  # a tool's result, now known
            for reply, _ in replies:
                session.append_many([reply], parent_id=at)
            self._runs.record(
                session.session_id,
                run_id,
                input=None if prompt is None else _parts.text_of(prompt),
                meta=meta,
                events=events,
                status=status,
                error=None if error is None else (str(error) or type(error).__name__),
                usage=usage,
                started_at=_aware(start),
                ended_at=_aware(end),
            )
        self.run_ids.append(run_id)

    def _events(
        self,
        run_id: str,
        prompt: dict | None,
        at: str | None,
        replies: list[tuple[dict, Any]],
        usage: dict | None,
        error: BaseException | None,
        start: Any,
        end: Any,
    ) -> list[dict]:
        began, ended = _iso(start), _iso(end)

        def event(kind: str, ts: str | None, **fields: Any) -> dict:
            out = {"run_id": run_id, "kind": kind, **fields}
            if ts is not None:
                out["ts"] = ts
            return out

        events = [
            event("run.start", began, input=None if prompt is None else _parts.text_of(prompt), at=at),
            event("turn.start", began, turn=1),
        ]
        if replies:
            reply, finish = replies[0]
            reasoning = "".join(p["text"] for p in reply["parts"] if p.get("type") == "reasoning")
            if reasoning:
                events.append(event("delta.reasoning", ended, text=reasoning))
            text = _parts.text_of(reply)
            if text:
                events.append(event("delta.text", ended, text=text))
            calls = [p for p in reply["parts"] if _parts.is_tool_part(p)]
            for part in calls:
                name = _parts.tool_name(part)
                events.append(
                    event("tool.call", ended, tool_call_id=part.get("toolCallId"), name=name, input=part.get("input"))
                )
            events.append(event("usage", ended, **(usage or {})))
            events.append(event("turn.end", ended, stop_reason="tool_calls" if calls else (finish or "stop")))
        elif usage is not None:
            events.append(event("usage", ended, **usage))
        events.append(
            event(
                "run.end",
                ended,
                status="completed" if error is None else "failed",
                error=None if error is None else (str(error) or type(error).__name__),
                error_type=None if error is None else type(error).__name__,
                usage=usage,
            )
        )
        return events


def _seconds(start: Any, end: Any) -> float | None:
    if isinstance(start, datetime) and isinstance(end, datetime):
        return (end - start).total_seconds()
    return None


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def capture(store: Store, *, session: str | Session | None = None, timeout: float = 10.0) -> LiteLLMCapture:
    """Record every litellm completion made while the returned context manager is active.

    ``session`` is the session id (or a ``Session`` of ``store``) to record into; by default
    :data:`DEFAULT_SESSION` (``"litellm"``). Leaving the block stops recording new calls and waits
    up to ``timeout`` seconds for the calls already made to be recorded (litellm reports a call
    just after it returns). Usable as ``async with`` too, and as a litellm callback on its own::

        with sk.capture(store, session="notebook"):
            litellm.completion(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    """
    return LiteLLMCapture(store, session=session, timeout=timeout)
