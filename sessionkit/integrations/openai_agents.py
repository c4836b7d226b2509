"""sessionkit as the session store of the OpenAI Agents SDK (docs/integrations/openai-agents.md).

>>> import sessionkit as sk
>>> from agents import Agent, Runner
>>> from sessionkit.integrations.openai_agents import SessionkitSession
>>> session = SessionkitSession("support-42", sk.open_store("chats.db"))
>>> await Runner.run(agent, "Deploying v2 failed", session=session)

:class:`SessionkitSession` implements the SDK's ``Session`` protocol (``get_items``,
``add_items``, ``pop_item``, ``clear_session``, ``session_id``, ``session_settings``)
over a sessionkit session:

* each item the SDK adds becomes one message, a child of the session's current leaf,
  mapped as the importer of the SDK's SQLite store maps it
  (:func:`sessionkit.io.openai_agents.item_to_message`: text and file parts, a
  ``tool-<name>`` part per call and per output, a ``reasoning`` part, other items whole
  in a ``data-openai-<type>`` part), with the item itself kept in
  ``metadata["openai_agents"]["raw"]``, so ``get_items`` gives back exactly what
  ``add_items`` received;
* ``get_items`` reads the path from the root to the current leaf (compactions ignored:
  the SDK gets its items, not summaries);
* ``pop_item`` moves the current leaf to its parent and keeps the popped message in the
  tree: the next ``add_items`` writes a sibling of it, a branch ``BranchTree`` shows;
* the current leaf is kept in the store beside the session, so another process (or a
  new object) continues where this one stopped; a session without it (written by
  other means) starts from its latest leaf.

The store's blocking work runs on a thread (``asyncio.to_thread``), never on the
event loop. ``store`` is a sync :class:`sessionkit.Store` or an ``sk.aio`` store (whose
sync store is used on that thread).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..aio import AsyncStore
from ..errors import InvalidMessage, MalformedInput, MessageNotFound, MessageTooLarge, StoreClosed, missing
from ..io.openai_agents import item_to_message
from ..messages import prepare
from ..parts import text_of
from ..store import Session, Store

try:
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise missing("openai-agents", "openai-agents (the OpenAI Agents SDK)", exc) from exc

__all__ = ["SessionkitSession"]

_T = TypeVar("_T")

#: The record kind that holds the session's current leaf (``{"leaf": id or None}``).
_RECORD_KIND = "openai_agents.session"

#: The roles an SDK message item may have; a message of another role written by other
#: means reaches the SDK as an assistant message.
_ROLES = ("user", "assistant", "system", "developer")

#: How many messages up the path an output looks for its call's tool name when the call
#: is not in the same ``add_items`` (the SDK adds a call and its output together, except
#: around approvals and streaming).
_LOOKBACK = 64

_UNSET: Any = object()
_LATEST: Any = object()  # no position recorded: the session's latest leaf


def _position(store: Store, session_id: str, leaf: Any = _UNSET) -> Any:
    """The session's recorded position: read it (``leaf`` not given), or record ``leaf``.

    Read, it is the recorded leaf id, ``None`` (the session is empty for the SDK) or
    ``_LATEST`` (nothing recorded). The one place that uses the store's per-session records.
    """
    if leaf is _UNSET:
        for n, value in store.session_records.get(session_id, _RECORD_KIND):
            if n == 0 and isinstance(value, dict) and "leaf" in value:
                return value["leaf"]
        return _LATEST
    store.session_records.put(session_id, _RECORD_KIND, [(0, {"leaf": leaf})])
    return leaf


def _new_id() -> str:
    # The time in milliseconds then 48 random bits: a session's ids grow with time, so the
    # store's index of ids takes each new one at its end; the random part keeps processes apart.
    return "oa_" + format(time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF, "012x") + os.urandom(6).hex()


def _message_of(item: dict, names: dict[str, str] | None = None) -> dict:
    """One SDK item as the sessionkit message :class:`SessionkitSession` stores (without ``id``).

    The parts are those of :func:`sessionkit.io.openai_agents.item_to_message`; an item it
    cannot map (a call without a call id, arguments that are not JSON...) is kept whole in
    a ``data-openai-<type>`` part. ``metadata["openai_agents"]["raw"]`` is the item itself.
    ``names`` maps call ids to tool names, so an output's part is named after its call.
    """
    try:
        message, call_id = item_to_message(item)
    except MalformedInput:
        kind = item.get("type")
        label = kind if isinstance(kind, str) and kind else "item"
        role = item.get("role")
        message, call_id = (
            {
                "role": role if isinstance(role, str) and role else "assistant",
                "parts": [{"type": f"data-openai-{label}", "data": item}],
            },
            None,
        )
    for part in message["parts"]:
        call = part.get("toolCallId")
        if not isinstance(call, str) or names is None:
            continue
        if call_id is None and part.get("type", "").startswith("tool-"):
            names[call] = part["type"][len("tool-") :]
        elif call_id is not None and call in names:
            part["type"] = f"tool-{names[call]}"
    message["metadata"] = {"openai_agents": {"raw": item}}
    return message


def _item_of(message: dict) -> dict:
    """The SDK item a stored message stands for.

    A message :class:`SessionkitSession` wrote gives back its item as it was added; a
    message written by other means (an ``sk.Agent`` run, an import, the HTTP server) gives
    an easy input message of its text, ``{"role": ..., "content": text}``, whose role is
    the message's when the SDK knows it (user, assistant, system, developer) and
    ``assistant`` otherwise.
    """
    meta = message.get("metadata")
    if isinstance(meta, dict):
        ours = meta.get("openai_agents")
        if isinstance(ours, dict) and isinstance(ours.get("raw"), dict):
            return ours["raw"]
    role = message.get("role")
    return {"role": role if role in _ROLES else "assistant", "content": text_of(message)}


async def _outcome(task: asyncio.Future[_T]) -> _T:
    """The result of a write running on its thread, even when the awaiting task is cancelled.

    A thread cannot be stopped: the write goes on whatever happens to the caller. Waiting
    for its end before passing the cancellation on means a caller that cancels never
    races its own write (what the SDK's SQLiteSession does for its writes too).
    """
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        task.exception()  # retrieved: its error, if any, is not logged as lost
        raise cancelled
    return task.result()


class SessionkitSession:
    """A session of the OpenAI Agents SDK kept in a sessionkit store, as a tree of messages.

    ``Runner.run(agent, input, session=SessionkitSession("s1", store))`` reads the
    conversation from ``store.session("s1")`` and appends each new item to it. See
    :mod:`sessionkit.integrations.openai_agents` for what is stored and
    docs/integrations/openai-agents.md for a walk-through.

    ``session_settings`` (an ``agents.SessionSettings``, or a dict of its fields) sets the
    default ``limit`` of :meth:`get_items`, as it does for the SDK's own sessions.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ):
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a string, got {type(session_id).__name__}")
        if not isinstance(store, (Store, AsyncStore)):
            raise TypeError(f"store must be a sessionkit store (sk.open_store or sk.aio.open_store), got {store!r}")
        self.session_id = session_id
        self._store = store
        if isinstance(session_settings, dict):
            session_settings = SessionSettings(**session_settings)
        elif session_settings is not None and not isinstance(session_settings, SessionSettings):
            raise TypeError(f"session_settings must be a SessionSettings or a dict, got {session_settings!r}")
        self.session_settings = session_settings if session_settings is not None else SessionSettings()

    def __repr__(self) -> str:
        return f"<sessionkit SessionkitSession {self.session_id!r} in {self._store!r}>"

    @property
    def store(self) -> Store | AsyncStore:
        """The store given at creation."""
        return self._store

    @property
    def session(self) -> Session:
        """The sessionkit session behind (sync): its tree, branches and views
        (``sk.widgets.BranchTree(s.session)``). Its calls block: use them off the event loop."""
        return self._sync().session(self.session_id)

    # -- the store, on a thread -------------------------------------------------------
    def _sync(self) -> Store:
        store = self._store
        return store.sync if isinstance(store, AsyncStore) else store

    def _check_open(self) -> None:
        if self._store.closed:
            raise StoreClosed("the store is closed")

    async def _read(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._check_open()
        return await asyncio.to_thread(fn, *args)

    async def _write(self, fn: Callable[..., _T], *args: Any) -> _T:
        self._check_open()
        return await _outcome(asyncio.ensure_future(asyncio.to_thread(fn, *args)))

    def _leaf(self, store: Store, chat: Session, *, writing: bool = False) -> Any:
        """The current leaf: the recorded one, or the latest leaf when none is recorded (or
        the recorded message was deleted by other means). ``None``: empty for the SDK.

        ``writing``: called in a write transaction, which first reads the session so that
        the session's other writers wait for it (PostgreSQL locks a session's writers at a
        transaction's first read of it; SQLite's and DuckDB's write transactions are
        exclusive already): the position read next is the one this transaction replaces.
        """
        if writing:
            chat.path_length()
        leaf = _position(store, self.session_id)
        if isinstance(leaf, str):
            try:
                chat.path_length(leaf)
            except MessageNotFound:
                leaf = _LATEST
        if leaf is _LATEST:
            latest = chat.latest_leaf()
            return None if latest is None else latest["id"]
        return leaf if isinstance(leaf, str) else None

    # -- the Session protocol ------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[dict]:
        """The conversation up to the current leaf, oldest first; with ``limit``, its latest
        ``limit`` items (still oldest first). ``limit=None`` takes the session settings'
        limit; ``0`` gives ``[]`` and a negative limit everything, as the SDK's SQLiteSession."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
        return await self._read(self._get_items, limit)

    def _get_items(self, limit: int | None) -> list[dict]:
        store = self._sync()
        chat = store.session(self.session_id)
        if limit == 0:
            return []
        for _ in range(3):  # a leaf deleted between the two reads (a clear) is read again
            leaf = self._leaf(store, chat)
            if leaf is None:
                return []
            try:
                if limit is None or limit < 0:
                    return [_item_of(m) for m in chat.get_history(leaf_id=leaf, compacted=False)]
                newest = itertools.islice(chat.history(leaf_id=leaf, newest_first=True, compacted=False), limit)
                items = [_item_of(m) for m in newest]
            except MessageNotFound:
                continue
            items.reverse()
            return items
        return []

    async def add_items(self, items: list[dict]) -> None:
        """Append ``items`` as a chain of messages under the current leaf, in one transaction,
        and make the last one the current leaf. Every item is checked first: a list that is
        not of dicts is a ``TypeError``, an item JSON cannot hold a ``TypeError`` or
        ``sk.InvalidMessage`` naming it, and nothing is stored."""
        self._check_open()
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"add_items takes a list of items (dicts), got {type(items).__name__}")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise TypeError(f"add_items takes a list of items (dicts); item {i} is a {type(item).__name__}")
        if not items:
            return
        await self._write(self._add_items, list(items))

    def _add_items(self, items: list[dict]) -> None:
        store = self._sync()
        chat = store.session(self.session_id)
        names: dict[str, str] = {}
        messages = [{"id": _new_id(), **_message_of(item, names)} for item in items]
        with store.transaction():
            leaf = self._leaf(store, chat, writing=True)
            self._name_outputs(chat, leaf, messages, names)
            try:
                chat.append_many(messages, parent_id=leaf)
            except (TypeError, InvalidMessage, MessageTooLarge) as exc:
                raise self._culprit(store, messages, exc) from exc
            _position(store, self.session_id, messages[-1]["id"])

    def _name_outputs(self, chat: Session, leaf: str | None, messages: list[dict], names: dict[str, str]) -> None:
        """Name the part of an output whose call came in an earlier ``add_items`` after that
        call's tool (looked for among the newest messages of the path)."""
        unnamed = [
            part
            for m in messages
            if m["role"] == "tool"
            for part in m["parts"]
            if isinstance(part.get("toolCallId"), str) and part["toolCallId"] not in names
        ]
        if not unnamed or leaf is None:
            return
        for m in itertools.islice(chat.history(leaf_id=leaf, newest_first=True, compacted=False), _LOOKBACK):
            if m.get("role") != "tool":
                for part in m.get("parts", ()):
                    call = part.get("toolCallId")
                    if isinstance(call, str) and str(part.get("type", "")).startswith("tool-"):
                        names.setdefault(call, part["type"][len("tool-") :])
        for part in unnamed:
            if part["toolCallId"] in names:
                part["type"] = f"tool-{names[part['toolCallId']]}"

    def _culprit(self, store: Store, messages: list[dict], exc: Exception) -> Exception:
        """The error of the first item the store refuses, naming it (the chain's error does not)."""
        for i, message in enumerate(messages):
            try:
                prepare(message, max_bytes=store.max_message_bytes)
            except (TypeError, InvalidMessage, MessageTooLarge) as one:
                kind = message["metadata"]["openai_agents"]["raw"].get("type", "message")
                return type(one)(f"add_items: item {i} ({kind}) cannot be stored: {one}")
        return exc

    async def pop_item(self) -> dict | None:
        """Remove the newest item from the conversation and return it (``None`` when it is empty).

        Its message stays in the store: the current leaf moves to its parent, so the next
        ``add_items`` starts a branch beside it."""
        return await self._write(self._pop_item)

    def _pop_item(self) -> dict | None:
        store = self._sync()
        chat = store.session(self.session_id)
        with store.transaction():
            leaf = self._leaf(store, chat, writing=True)
            if leaf is None:
                return None
            top = list(itertools.islice(chat.history(leaf_id=leaf, newest_first=True, compacted=False), 2))
            _position(store, self.session_id, top[1]["id"] if len(top) > 1 else None)
            return _item_of(top[0])

    async def clear_session(self) -> None:
        """Remove every item: the session's messages (every branch), compactions and labels go,
        and ``get_items()`` gives ``[]``."""
        await self._write(self._clear_session)

    def _clear_session(self) -> None:
        store = self._sync()
        with store.transaction():
            store.session(self.session_id).clear()
            _position(store, self.session_id, None)
