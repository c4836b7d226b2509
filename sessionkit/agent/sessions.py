"""Sessions for runs: sessionkit stores, or any store of your own (docs/agents.md).

``create_session`` gives a session an agent can run on::

    s = sk.create_session()                                   # in memory
    s = sk.create_session("chat-1", store=sk.open_store("chat.db"))
    s = sk.create_session("chat-1", store=sk.FileSessionStore("sessions/"))

Anything with ``load(session_id) -> list[dict]`` and
``save(session_id, new_messages)`` is a :class:`SessionStore`: a run loads the
conversation from it and, when it succeeds, saves the messages it added (the
user's first) in one call. ``load`` and ``save`` may be coroutine functions
(``async def``), as in an asyncio application; an ``sk.aio`` store is such a
store::

    s = sk.create_session("chat-1", store=await sk.aio.open_store("chat.db"))

Such a session is a straight line of messages; its runs and events are kept in
memory on the session object (``session.runs()``, ``session.events()``), since
the store has no place for them.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import threading
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, TypeVar, overload, runtime_checkable
from urllib.parse import unquote

from ..errors import UsageError
from ..messages import dumps, now_iso, validate
from ..store import Session, Store
from ._sync import run_coroutine_sync
from .events import Conversation, MemoryRunLog, RunRecord

__all__ = ["ExternalSession", "FileSessionStore", "SessionStore", "create_session"]

T = TypeVar("T")


@runtime_checkable
class SessionStore(Protocol):
    """A store of your own that runs can load from and save to.

    ``load`` returns the session's messages (UIMessage dicts) oldest first, an
    empty list for an unknown session. ``save`` receives the messages one run
    added, in order, and must keep them in that order after the earlier ones.
    Either may be a coroutine function (``async def``): see :class:`ExternalSession`
    for where its coroutines run.
    """

    def load(self, session_id: str) -> list[dict] | Awaitable[list[dict]]: ...

    def save(self, session_id: str, new_messages: list[dict]) -> None | Awaitable[None]: ...


@dataclass(frozen=True)
class SavedMessage:
    """What ``ExternalSession.append`` returns (the shape of ``sk.AppendResult``)."""

    inserted: bool
    message: dict


class ExternalSession:
    """A session whose messages live in a :class:`SessionStore`.

    It offers the reading side of a store session (``get_history``,
    ``latest_leaf``, ``get``, ``snapshot``) over ``store.load``, and records
    runs and events in memory: ``runs()`` and ``events(after_seq=None)``.

    A store whose ``load``/``save`` are coroutine functions works too. Runs read
    and write the session from sync code (the agent's turn loop reads the
    history before its first model call, and saves from a worker thread), so
    each coroutine is run to completion there: on a fresh event loop when the
    calling thread has none, else on a fresh loop in a helper thread while the
    caller waits (an event loop cannot wait for a coroutine of its own). Such a
    store must therefore not depend on objects bound to one event loop (a pool
    of connections made on the application's loop, say); an ``sk.aio`` store
    does not.
    """

    #: A straight line: each message follows the one before.
    can_branch = False

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        #: Where this session's runs and events are recorded (in memory).
        self.run_log = MemoryRunLog()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ExternalSession({self.session_id!r}, store={self.store!r})"

    def _load(self) -> list[dict]:
        messages = _resolved(self.store.load(self.session_id))
        if not isinstance(messages, list):
            messages = list(messages)
        return copy.deepcopy(messages)

    def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict]:
        """The stored messages, oldest first (up to ``leaf_id`` when given)."""
        messages = self._load()
        if leaf_id is None:
            return messages
        for index, message in enumerate(messages):
            if message.get("id") == leaf_id:
                return messages[: index + 1]
        from ..errors import MessageNotFound

        raise MessageNotFound(f"no message {leaf_id!r} in session {self.session_id!r}")

    def snapshot(self) -> list[dict]:
        """A deep copy of the conversation."""
        return self._load()

    def latest_leaf(self) -> dict | None:
        """The newest message, or None."""
        messages = self._load()
        return messages[-1] if messages else None

    def get(self, message_id: str) -> dict | None:
        """The message with that id, or None."""
        for message in self._load():
            if message.get("id") == message_id:
                return message
        return None

    def __len__(self) -> int:
        return len(self._load())

    def append(self, message: dict) -> SavedMessage:
        """Save one message after the others (validated like a store append)."""
        return self.append_many([message])[0]

    def append_many(
        self, messages: Iterable[dict], *, parent_id: object = None, source: str = "server"
    ) -> list[SavedMessage]:
        """Save messages after the others in one ``save`` call; every one is validated first.

        The session is a straight line: ``parent_id`` (accepted for the shape of
        ``Session.append_many``) is not used, each message follows the one before.
        Messages get a ``createdAt`` when they have none.
        """
        if source not in ("server", "client"):
            raise ValueError(f"source must be 'server' or 'client', got {source!r}")
        prepared = []
        for message in messages:
            validate(message)
            msg = json.loads(dumps(message))
            msg.setdefault("createdAt", now_iso())
            prepared.append(msg)
        with self._lock:
            _resolved(self.store.save(self.session_id, copy.deepcopy(prepared)))
        return [SavedMessage(True, m) for m in prepared]

    def runs(self) -> list[RunRecord]:
        """This session's runs, oldest first."""
        return self.run_log.runs(self.session_id)

    def events(self, after_seq: int | None = None) -> list[dict]:
        """This session's run events in ``seq`` order."""
        return self.run_log.events(self.session_id, after_seq)


def _resolved(value: T | Awaitable[T]) -> T:
    """``value``, or what it resolves to when a coroutine ``load``/``save`` returned an awaitable."""
    if not inspect.isawaitable(value):
        return value
    awaitable = value

    async def wait() -> T:
        return await awaitable

    return run_coroutine_sync(wait)


_SAFE = re.compile(r"[A-Za-z0-9.-]")


def _file_name(session_id: str) -> str:
    """A file name for any session id: unreserved characters kept, the rest %-encoded.

    ``_`` is always encoded, so the empty id's name, ``_``, cannot collide with
    another id; a leading dot is encoded so no name is hidden or ``..``.
    """
    if not session_id:
        return "_.jsonl"
    out = []
    for index, char in enumerate(session_id):
        if _SAFE.match(char) and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"%{b:02X}" for b in char.encode("utf-8"))
    return "".join(out) + ".jsonl"


class FileSessionStore:
    """A :class:`SessionStore` keeping one JSONL file per session in ``directory``.

    Each line is one message; a run's messages are appended in a single write
    and flushed to disk (``fsync``), so an interrupted process leaves at most
    one incomplete last line: :meth:`load` skips it and the next :meth:`save`
    cuts it off before writing.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileSessionStore({str(self.directory)!r})"

    def path(self, session_id: str) -> Path:
        """The file that holds ``session_id``."""
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
        return self.directory / _file_name(session_id)

    def load(self, session_id: str) -> list[dict]:
        """The session's messages in file order (``[]`` when there is no file)."""
        path = self.path(session_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        lines = data.split(b"\n")
        messages = []
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                messages.append(json.loads(line))
            except ValueError:
                if index == len(lines) - 1:  # a torn last write: ignore it
                    continue
                raise ValueError(f"{path}: line {index + 1} is not valid JSON") from None
        return messages

    def save(self, session_id: str, new_messages: list[dict]) -> None:
        """Append messages to the session's file in one write."""
        if not new_messages:
            return
        payload = "".join(dumps(m) + "\n" for m in new_messages).encode("utf-8")
        path = self.path(session_id)
        with self._lock:
            with open(path, "a+b") as handle:
                size = handle.seek(0, os.SEEK_END)
                if size:
                    handle.seek(size - 1)
                    if handle.read(1) != b"\n":
                        _drop_torn_tail(handle, size)
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())

    def sessions(self) -> list[str]:
        """Ids of the sessions with a file here."""
        out = []
        for path in sorted(self.directory.glob("*.jsonl")):
            stem = path.name[: -len(".jsonl")]
            if stem == "_":
                out.append("")
                continue
            out.append(unquote(stem))
        return out


def _drop_torn_tail(handle: BinaryIO, size: int) -> None:
    """Cut an unfinished last line (a write that never returned) off the file."""
    block = 4096
    end = size
    while end > 0:
        start = max(0, end - block)
        handle.seek(start)
        chunk = handle.read(end - start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            handle.truncate(start + cut + 1)
            return
        end = start
    handle.truncate(0)


@overload
def create_session(session_id: str | None = None, *, store: Store | None = None) -> Session: ...


@overload
def create_session(session_id: str | None = None, *, store: SessionStore) -> ExternalSession: ...


def create_session(
    session_id: str | None = None, *, store: Store | SessionStore | None = None
) -> Session | ExternalSession:
    """A session for runs (docs/agents.md).

    - no ``store``: a session in a private in-memory sessionkit store (gone
      when the process ends);
    - a sessionkit ``Store``: ``store.session(session_id)``;
    - a :class:`SessionStore` (``load``/``save``, sync or ``async def``): an
      :class:`ExternalSession`; an ``sk.aio`` store is one (runs load its latest
      path and append their new turns to it as one chain).

    A missing ``session_id`` is minted (a random hex id).
    """
    if session_id is None:
        session_id = uuid.uuid4().hex
    elif not isinstance(session_id, str):
        raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
    if store is None:
        from ..store import open_store

        return open_store(":memory:").session(session_id)
    if isinstance(store, Store):
        return store.session(session_id)
    if isinstance(store, SessionStore):
        return ExternalSession(store, session_id)
    raise TypeError(
        "store must be a sessionkit Store or an object with load(session_id) and "
        f"save(session_id, new_messages); got {type(store).__name__}"
    )


def _require_tree(session: Conversation, what: str) -> None:
    if not session.can_branch:
        raise UsageError(f"{what} needs a session in a sessionkit store; {session!r} keeps a straight line")


if TYPE_CHECKING:  # mypy checks that both kinds of session are Conversations (no cost at run time)

    def _conversations(tree: Session, line: ExternalSession) -> tuple[Conversation, Conversation]:
        return tree, line
