"""Google ADK sessions kept in a sessionkit store: :class:`SessionkitSessionService`.

``pip install 'sessionkit[adk]'``. The service is a ``google.adk.sessions.BaseSessionService``,
so a ``Runner`` keeps its sessions, events and state in any sessionkit store (SQLite, DuckDB,
PostgreSQL) and another process opening the same store resumes them::

    import sessionkit as sk
    from google.adk.runners import Runner
    from sessionkit.integrations.adk import SessionkitSessionService

    store = sk.open_store("agents.db")
    runner = Runner(agent=agent, app_name="weather", session_service=SessionkitSessionService(store))

Where things live (docs/integrations/adk.md):

* an ADK session ``(app_name, user_id, session_id)`` is the sessionkit session
  :func:`store_session_id` names, ``adk:<app>:<user>:<id>`` with each part percent-encoded
  (``urllib.parse.quote(part, safe="")``: ``:`` and ``%`` are encoded, so two different
  triples never give one id);
* each event is one message of that session, under the event's id, mapped as the ADK
  importer maps it (:func:`sessionkit.io.adk.adk_event_as_message`), the event itself kept
  whole in ``metadata["adk"]["event"]`` so ``get_session`` gives back events equal to those
  appended; each message hangs under the one before, and a rewind (an event whose
  ``actions.rewind_before_invocation_id`` names an earlier invocation) starts a branch where
  that invocation started, as the importer does;
* state is kept in the store's records beside sessions (JSON values numbered by int): the
  session's keys beside its session, ``user:`` keys beside ``adk:<app>:<user>``, ``app:`` keys
  beside ``adk:<app>``, one record per key; ``temp:`` keys are never stored. The session's
  times and the app's list of sessions are records too.

ADK's conditions raise ADK's error types, subclassed so that ``except sk.SessionKitError``
catches them as well: :class:`SessionExists` (an ``AlreadyExistsError``), :class:`AdkSessionNotFound`
(a ``SessionNotFoundError``, and ``sk.SessionNotFound``) and :class:`StaleSession` (a
``StaleSessionError``). Bad arguments raise ``TypeError``/``ValueError`` naming them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..errors import SessionKitError, SessionNotFound, UsageError, missing
from ..io.adk import adk_event_as_message
from ..store import LATEST, Store

try:  # google-adk is imported here only (and pydantic-core, which it depends on, for its state values)
    from google.adk.errors import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events import Event
    from google.adk.sessions import BaseSessionService
    from google.adk.sessions import Session as AdkSession
    from google.adk.sessions.base_session_service import GetSessionConfig, ListSessionsResponse
    from google.adk.sessions.state import State
    from pydantic_core import to_jsonable_python
except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
    raise missing("adk", "google-adk", exc) from exc

__all__ = ["SessionkitSessionService", "store_session_id", "SessionExists", "AdkSessionNotFound", "StaleSession"]


class SessionExists(SessionKitError, AlreadyExistsError):
    """``create_session`` with the id of a session that exists (ADK's ``AlreadyExistsError``)."""


class AdkSessionNotFound(SessionNotFound, SessionNotFoundError):
    """``append_event`` to a session that is not stored (ADK's ``SessionNotFoundError``)."""


class StaleSession(SessionKitError, StaleSessionError):
    """``append_event`` with a session object older than the stored session (ADK's ``StaleSessionError``):
    another writer appended since it was read; read it again with ``get_session``."""


_PREFIX = "adk"
_META = "adk.session"  # record 0 beside an ADK session: its app, user, id and times
_STATE = "adk.state"  # one record per state key, beside the session, the user or the app
_INDEX = "adk.sessions"  # beside the app: one record per session it had ({"user_id", "id"}, None once deleted)
_PAGE = 128  # events read at a time, newest first, by get_session


def store_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The sessionkit session id of an ADK session: ``adk:<app>:<user>:<id>``, each part percent-encoded.

    >>> store_session_id("weather", "ana", "s1")
    'adk:weather:ana:s1'
    >>> store_session_id("a:b", "c", "d")
    'adk:a%3Ab:c:d'
    """
    return _scope(_name(app_name, "app_name"), _name(user_id, "user_id"), _name(session_id, "session_id"))


def _scope(*parts: str) -> str:
    return ":".join([_PREFIX, *(quote(p, safe="") for p in parts)])


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    return value


def _number(key: Any) -> int:
    """A record number for a key: the first 8 bytes of its SHA-256 as a signed 64-bit int.

    Keys get numbers of their own, so a write of one key is one record put: no read of the
    others, and two processes writing different keys at once lose neither. (Two of a scope's
    keys sharing a number would take 2^32 keys to be likely.)
    """
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=False).encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _json_state(state: Any, what: str) -> dict[str, Any]:
    """``state`` as JSON values (as ADK's database services store it: datetimes and models converted)."""
    if not isinstance(state, dict):
        raise TypeError(f"{what} must be a dict, got {type(state).__name__}")
    out = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise TypeError(f"{what} keys must be strings, got {key!r}")
        try:
            out[key] = to_jsonable_python(value)
        except Exception as exc:  # pydantic-core's error for a value it cannot convert
            raise TypeError(f"{what}[{key!r}] is not a JSON value: {exc}") from None
    return out


def _split(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """State keys by scope (``app``, ``user``, ``session``), their prefixes removed; ``temp:`` keys dropped."""
    out: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in state.items():
        if key.startswith(State.APP_PREFIX):
            out["app"][key.removeprefix(State.APP_PREFIX)] = value
        elif key.startswith(State.USER_PREFIX):
            out["user"][key.removeprefix(State.USER_PREFIX)] = value
        elif not key.startswith(State.TEMP_PREFIX):
            out["session"][key] = value
    return out


def _raw_event(message: dict | None) -> dict | None:
    meta = (message or {}).get("metadata") or {}
    adk = meta.get("adk") if isinstance(meta, dict) else None
    raw = adk.get("event") if isinstance(adk, dict) else None
    return raw if isinstance(raw, dict) else None


class _Records:
    """The store's records beside sessions, as this module uses them: the one place that names them."""

    def __init__(self, store: Store):
        self._store = store

    def read(self, session_id: str, kind: str) -> list[tuple[int, Any]]:
        return self._store.session_records.get(session_id, kind)

    def write(self, session_id: str, kind: str, items: Iterable[tuple[int, Any]]) -> None:
        self._store.session_records.put(session_id, kind, items)


class SessionkitSessionService(BaseSessionService):
    """An ADK session service backed by a sessionkit store (see the module docstring for the layout).

    ``store`` is a sync store (``sk.open_store(...)``); its calls run on worker threads, never
    on the event loop. Everything is stored when a call returns, so a service on the same store
    in another process (or after a restart) sees it. ``close()`` does not close the store.
    """

    def __init__(self, store: Store):
        if not isinstance(store, Store):
            raise TypeError(
                f"store must be a sessionkit Store (sk.open_store(...)), got {type(store).__name__}; "
                "an sk.aio store: pass the sync store it wraps"
            )
        self._store = store
        self._records = _Records(store)

    @property
    def store(self) -> Store:
        return self._store

    # -- ADK's interface -----------------------------------------------------------------
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        """Create a session; ``state``'s ``app:`` and ``user:`` keys go to their scopes (``temp:`` ones
        are dropped). An id already used by this app and user -> :class:`SessionExists`; no id -> a uuid4."""
        return await asyncio.to_thread(self._create, app_name, user_id, state, session_id)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        """The session with its events (``config``: the ``num_recent_events`` newest, those from
        ``after_timestamp`` on) and its state merged with the app's and the user's; None if none."""
        return await asyncio.to_thread(self._get, app_name, user_id, session_id, config)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The sessions of an app (of one user, or all), without events, least recently updated first."""
        return await asyncio.to_thread(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Delete a session, its events and its state (an unknown session: nothing happens, as in ADK)."""
        await asyncio.to_thread(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state of an app, keys without their ``user:`` prefix."""
        _name(app_name, "app_name")
        _name(user_id, "user_id")
        return await asyncio.to_thread(self._state, _scope(app_name, user_id))

    async def append_event(self, session: AdkSession, event: Event) -> Event:
        """Store ``event`` (a partial one is not stored) and apply its ``state_delta`` to the scopes.

        The same event again (same id, equal fields) is stored once and applied once; another
        event under a stored id -> ``UsageError``. An unknown session -> :class:`AdkSessionNotFound`;
        a ``session`` read before the last stored append -> :class:`StaleSession`.
        """
        if not isinstance(session, AdkSession):
            raise TypeError(f"session must be a google.adk Session, got {type(session).__name__}")
        if not isinstance(event, Event):
            raise TypeError(f"event must be a google.adk Event, got {type(event).__name__}")
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        stored = await asyncio.to_thread(self._append, session, event)
        if not stored:
            return event
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def close(self) -> None:
        """Nothing to release: the store stays open (its owner closes it)."""

    # -- the work, on a worker thread ----------------------------------------------------
    def _meta(self, sid: str) -> dict | None:
        for n, value in self._records.read(sid, _META):
            if n == 0 and isinstance(value, dict):
                return value
        return None

    def _state(self, scope: str) -> dict[str, Any]:
        return {item[0]: item[1] for _, item in self._records.read(scope, _STATE)}

    def _put_state(self, scope: str, values: dict[str, Any]) -> None:
        if values:
            self._records.write(scope, _STATE, [(_number(k), [k, v]) for k, v in values.items()])

    def _merged(self, app_name: str, user_id: str, sid: str) -> dict[str, Any]:
        state = self._state(sid)
        state.update({State.APP_PREFIX + k: v for k, v in self._state(_scope(app_name)).items()})
        state.update({State.USER_PREFIX + k: v for k, v in self._state(_scope(app_name, user_id)).items()})
        return state

    def _create(self, app_name: Any, user_id: Any, state: Any, session_id: Any) -> AdkSession:
        _name(app_name, "app_name")
        _name(user_id, "user_id")
        if session_id is not None:
            if not isinstance(session_id, str):
                raise TypeError(f"session_id must be a str or None, got {type(session_id).__name__}")
            session_id = session_id.strip()  # as ADK's services do
        session_id = session_id or str(uuid.uuid4())
        scopes = _split(_json_state({} if state is None else state, "state"))
        sid = store_session_id(app_name, user_id, session_id)
        now = time.time()
        with self._store.transaction():
            if self._meta(sid) is not None:
                raise SessionExists(
                    f"Session with id {session_id} already exists (app {app_name!r}, user {user_id!r})."
                )
            self._put_state(_scope(app_name), scopes["app"])
            self._put_state(_scope(app_name, user_id), scopes["user"])
            self._put_state(sid, scopes["session"])
            meta = {"app_name": app_name, "user_id": user_id, "id": session_id, "create_time": now, "update_time": now}
            self._records.write(sid, _META, [(0, meta)])
            entry = {"user_id": user_id, "id": session_id}
            self._records.write(_scope(app_name), _INDEX, [(_number([user_id, session_id]), entry)])
            merged = self._merged(app_name, user_id, sid)
        return AdkSession(app_name=app_name, user_id=user_id, id=session_id, state=merged, last_update_time=now)

    def _get(self, app_name: Any, user_id: Any, session_id: Any, config: Any) -> AdkSession | None:
        if config is not None and not isinstance(config, GetSessionConfig):
            raise TypeError(f"config must be a GetSessionConfig or None, got {type(config).__name__}")
        sid = store_session_id(app_name, user_id, _name(session_id, "session_id").strip() or session_id)
        meta = self._meta(sid)
        if meta is None:
            return None
        events = self._events(sid, config)
        return AdkSession(
            app_name=meta["app_name"],
            user_id=meta["user_id"],
            id=meta["id"],
            state=self._merged(app_name, user_id, sid),
            events=events,
            last_update_time=meta["update_time"],
        )

    def _events(self, sid: str, config: GetSessionConfig | None) -> list[Event]:
        """The session's events in append order, filtered as ADK's in-memory service filters them:
        the ``num_recent_events`` newest, then those from ``after_timestamp`` on (read newest first,
        a page at a time, up to the first older one)."""
        conversation = self._store.session(sid)
        ids = [n.id for n in conversation.nodes()]  # write order: the order the events were appended
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent is not None:
            ids = ids[len(ids) - recent :] if recent else []
        newest_first: list[Event] = []
        for end in range(len(ids), 0, -_PAGE):
            page = ids[max(0, end - _PAGE) : end]
            found = conversation.get_many(page)
            for mid in reversed(page):
                raw = _raw_event(found.get(mid))
                if raw is None:
                    continue  # a message some other writer added: not an event
                event = Event.model_validate_json(json.dumps(raw))
                if after is not None and event.timestamp < after:
                    return newest_first[::-1]
                newest_first.append(event)
        return newest_first[::-1]

    def _list(self, app_name: Any, user_id: Any) -> ListSessionsResponse:
        _name(app_name, "app_name")
        if user_id is not None:
            _name(user_id, "user_id")
        app_state = {State.APP_PREFIX + k: v for k, v in self._state(_scope(app_name)).items()}
        user_states: dict[str, dict[str, Any]] = {}
        sessions = []
        for _, entry in self._records.read(_scope(app_name), _INDEX):
            if not isinstance(entry, dict) or (user_id is not None and entry["user_id"] != user_id):
                continue
            uid = entry["user_id"]
            sid = _scope(app_name, uid, entry["id"])
            meta = self._meta(sid)
            if meta is None:
                continue
            if uid not in user_states:
                user_states[uid] = {State.USER_PREFIX + k: v for k, v in self._state(_scope(app_name, uid)).items()}
            state = {**self._state(sid), **app_state, **user_states[uid]}
            sessions.append(
                AdkSession(
                    app_name=app_name, user_id=uid, id=entry["id"], state=state, last_update_time=meta["update_time"]
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: Any, user_id: Any, session_id: Any) -> None:
        session_id = _name(session_id, "session_id").strip() or session_id
        sid = store_session_id(app_name, user_id, session_id)
        with self._store.transaction():
            if self._meta(sid) is None:
                return
            self._store.delete_session(sid)  # its events, state and times
            self._records.write(_scope(app_name), _INDEX, [(_number([user_id, session_id]), None)])

    def _append(self, session: AdkSession, event: Event) -> bool:
        """Store the event and its state; False when this very event is stored already."""
        sid = store_session_id(session.app_name, session.user_id, session.id)
        raw = json.loads(event.model_dump_json(exclude_none=True))
        delta = event.actions.state_delta if event.actions is not None else None
        scopes = _split(_json_state(delta or {}, f"state_delta of event {event.id!r}"))
        message = adk_event_as_message(raw, "append_event", f"event {event.id!r}")
        message["id"] = event.id
        message["metadata"]["adk"]["event"] = raw
        conversation = self._store.session(sid)
        with self._store.transaction():
            meta = self._meta(sid)
            if meta is None:
                raise AdkSessionNotFound(
                    f"Session {session.id} not found (app {session.app_name!r}, user {session.user_id!r})."
                )
            stored = conversation.get(event.id)
            if stored is not None:
                if _raw_event(stored) == raw:
                    return False  # a retried append: stored and applied once
                raise UsageError(
                    f"event id {event.id!r} is already used by another event of ADK session {session.id!r}; "
                    "each event needs an id of its own"
                )
            if meta["update_time"] > session.last_update_time:
                raise StaleSession(
                    f"session {session.id!r} was read before the last event stored in it "
                    f"(its last_update_time {session.last_update_time} < {meta['update_time']}); "
                    "read it again with get_session"
                )
            conversation.append(message, parent_id=self._parent(conversation, raw))
            self._put_state(_scope(session.app_name), scopes["app"])
            self._put_state(_scope(session.app_name, session.user_id), scopes["user"])
            self._put_state(sid, scopes["session"])
            self._records.write(sid, _META, [(0, {**meta, "update_time": event.timestamp})])
        return True

    def _parent(self, conversation: Any, raw: dict) -> Any:
        """Where an event's message goes: under the newest one, or, for a rewind, where the rewound
        invocation's first event went (so the rewound events stay in the tree as the other branch)."""
        target = (raw.get("actions") or {}).get("rewind_before_invocation_id")
        if not isinstance(target, str):
            return LATEST
        nodes = conversation.nodes()
        found = conversation.get_many([n.id for n in nodes])  # a rewind is rare: the whole session once
        for node in nodes:
            event = _raw_event(found.get(node.id))
            if event is not None and event.get("invocation_id") == target:
                return node.parent_id  # None: the invocation began the session, the rewind is a new root
        return LATEST
