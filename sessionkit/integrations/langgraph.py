"""A LangGraph checkpointer kept in a sessionkit store (docs/integrations/langgraph.md).

``SessionkitSaver(store)`` is a ``BaseCheckpointSaver``: a compiled graph keeps its
checkpoints and pending writes in the store (SQLite, DuckDB or PostgreSQL), where any
process opening the store finds them again. While the graph runs, the ``messages``
channel of each thread's root namespace is mirrored as the conversation tree of the
session named by the thread id: every LangChain message becomes a sessionkit message
(the importer's mapping, :func:`sessionkit.io.langgraph.langchain_to_message`) under
the message before it, so resuming from an older checkpoint grows a branch.

Where things are kept (the records beside a session, ``store.session_records``):

- session ``<thread id>``, kind ``langgraph.checkpoints``: one small entry per
  checkpoint of the thread, every namespace (id, namespace, parent, metadata);
- session ``<thread id>``, kind ``langgraph.checkpoint ["<ns>", "<id>"]``: the
  serialised checkpoint;
- session ``<thread id>``, kind ``langgraph.writes ["<ns>", "<id>"]``: its pending writes;
- session ``sessionkit.langgraph``, kind ``langgraph.threads``: the thread ids, for a
  listing over every thread (``list(None)``).

Records of a kind are read whole and numbered by an int, not ordered by checkpoint id
nor filtered by metadata: so the entries carry what ``list`` filters and sorts on
(checkpoint id, namespace, metadata) and that is done here, over one thread's entries
(``list(None)`` reads each thread's); ``get_tuple`` reads one thread's entries, one
checkpoint and its writes, never another thread's. A record's number is a 63-bit hash
of its key (namespace and checkpoint id; task id and index for a write), so writing
one needs no read and writing it again replaces it, as the key does in LangGraph's
own savers.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import threading
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from ..errors import MissingDependency, StoreClosed, UsageError

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        PendingWrite,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - exercised in a fresh interpreter by the tests
    raise MissingDependency(
        "sessionkit.integrations.langgraph needs LangGraph: pip install 'sessionkit[langgraph]'"
    ) from exc

from ..io.langgraph import fingerprint, langchain_to_message

__all__ = ["SessionkitSaver", "REGISTRY_SESSION"]

#: The session whose records list the threads (a thread may not take this id).
REGISTRY_SESSION = "sessionkit.langgraph"
_THREADS = "langgraph.threads"
_INDEX = "langgraph.checkpoints"


class _Records:
    """The one place that names the store's per-session records (``store.session_records``)."""

    def __init__(self, store: Any):
        self.store = store

    def read(self, session_id: str, kind: str) -> list[tuple[int, Any]]:
        return self.store.session_records.get(session_id, kind)

    def write(self, session_id: str, kind: str, items: list[tuple[int, Any]]) -> None:
        self.store.session_records.put(session_id, kind, items)


def _number(*key: Any) -> int:
    """A record's number: 63 bits of the SHA-256 of its key (a collision is a 2**-63 chance per pair)."""
    digest = hashlib.sha256(json.dumps(key, ensure_ascii=False).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def _kind(what: str, ns: str, checkpoint_id: str) -> str:
    return f"langgraph.{what} {json.dumps([ns, checkpoint_id], ensure_ascii=False)}"


def _pack(typed: tuple[str, bytes]) -> dict:
    """A serialiser's ``(type, bytes)`` as JSON, the bytes in base64 (lossless)."""
    return {"type": typed[0], "data": base64.b64encode(typed[1]).decode("ascii")}


def _unpack(value: dict) -> tuple[str, bytes]:
    return value["type"], base64.b64decode(value["data"])


def _config_of(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class _Mirror:
    """One thread's conversation tree as this process knows it: where each message sits.

    ``places`` maps ``(parent node, LangChain id)`` to the nodes stored there with their
    content fingerprint; ``ids`` is every node id of the session. Built from the session
    on first use (the fingerprint and LangChain id are in each message's
    ``metadata["langgraph"]``) and kept up to date by the appends.
    """

    def __init__(self, session: Any, nodes: Sequence[Any]):
        self.places: dict[tuple[str | None, str], list[tuple[str, str | None]]] = {}
        self.ids: set[str] = set()
        contents = session.get_many([n.id for n in nodes]) if nodes else {}
        for node in nodes:
            meta = (contents.get(node.id, {}).get("metadata") or {}).get("langgraph") or {}
            self.add(node.parent_id, meta.get("id", node.id), node.id, meta.get("fingerprint"))

    def add(self, parent: str | None, lc_id: str, node: str, print_: str | None) -> None:
        self.places.setdefault((parent, lc_id), []).append((node, print_))
        self.ids.add(node)

    def find(self, parent: str | None, lc_id: str, print_: str) -> str | None:
        for node, known in self.places.get((parent, lc_id), ()):
            if known == print_:
                return node
        return None

    def new_id(self, lc_id: str) -> str:
        """The LangChain id, or ``<id>~k`` when that id is already placed elsewhere (an edit, a removal before it)."""
        if lc_id not in self.ids:
            return lc_id
        k = 1
        while f"{lc_id}~{k}" in self.ids:
            k += 1
        return f"{lc_id}~{k}"


class SessionkitSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer backed by a sessionkit store.

    ``store`` is an open :class:`sessionkit.Store` (any engine); it is not closed by the
    saver. ``serde`` is the serialiser of checkpoints and writes (LangGraph's default
    when None). ``messages_channel`` names the state key whose LangChain messages are
    mirrored as the thread's conversation (``None`` mirrors nothing).

    >>> graph = builder.compile(checkpointer=SessionkitSaver(store))
    >>> graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t1"}})
    >>> store.session("t1").get_history()   # the conversation, as sessionkit messages
    """

    def __init__(
        self,
        store: Any,
        *,
        serde: SerializerProtocol | None = None,
        messages_channel: str | None = "messages",
    ) -> None:
        super().__init__(serde=serde)
        if getattr(store, "session_records", None) is None or not callable(getattr(store, "session", None)):
            raise TypeError(f"SessionkitSaver takes a sessionkit Store (sk.open_store), got {type(store).__name__}")
        if messages_channel is not None and (not isinstance(messages_channel, str) or not messages_channel):
            raise TypeError("messages_channel must be a non-empty string or None")
        self.store = store
        self.messages_channel = messages_channel
        self._records = _Records(store)
        self._mirrors: dict[str, _Mirror] = {}
        self._lock = threading.RLock()

    # -- arguments --------------------------------------------------------------------
    def _open(self) -> None:
        if getattr(self.store, "closed", False):
            raise StoreClosed("the store of this SessionkitSaver is closed; open it again and make a new saver")

    @staticmethod
    def _thread(thread_id: Any, where: str = "thread_id") -> str:
        if thread_id is None:
            raise UsageError(
                f"a LangGraph checkpoint needs {where}: pass config={{'configurable': {{'thread_id': ...}}}}"
            )
        if isinstance(thread_id, bool) or not isinstance(thread_id, (str, int, uuid.UUID)):
            raise UsageError(f"{where} must be a string, got {type(thread_id).__name__}")
        thread = str(thread_id)
        if not thread:
            raise UsageError(f"{where} must not be empty")
        if thread == REGISTRY_SESSION:
            raise UsageError(f"thread id {REGISTRY_SESSION!r} is where SessionkitSaver lists the threads; use another")
        return thread

    def _configurable(self, config: Any) -> dict:
        if not isinstance(config, dict) or not isinstance(config.get("configurable"), dict):
            raise UsageError("a LangGraph config must be a dict with a 'configurable' dict holding 'thread_id'")
        return config["configurable"]

    def _address(self, config: Any) -> tuple[str, str, str | None]:
        conf = self._configurable(config)
        thread = self._thread(conf.get("thread_id"), "config['configurable']['thread_id']")
        ns = conf.get("checkpoint_ns") or ""
        if not isinstance(ns, str):
            raise UsageError(f"checkpoint_ns must be a string, got {type(ns).__name__}")
        checkpoint_id = get_checkpoint_id(config)
        return thread, ns, checkpoint_id or None

    # -- reading ----------------------------------------------------------------------
    def _entries(self, thread: str) -> list[dict]:
        """The thread's checkpoint entries, newest checkpoint id first."""
        rows = [value for _, value in self._records.read(thread, _INDEX) if value is not None]
        rows.sort(key=lambda e: e["id"], reverse=True)
        return rows

    def _threads(self) -> list[str]:
        return [value for _, value in self._records.read(REGISTRY_SESSION, _THREADS) if value is not None]

    def _tuple(self, thread: str, entry: dict) -> CheckpointTuple | None:
        ns, checkpoint_id = entry["ns"], entry["id"]
        stored = self._records.read(thread, _kind("checkpoint", ns, checkpoint_id))
        if not stored:
            return None
        value = stored[0][1]
        writes = [w for _, w in self._records.read(thread, _kind("writes", ns, checkpoint_id))]
        writes.sort(key=lambda w: writes_sort_key(w["path"], w["task"], w["idx"]))
        pending: list[PendingWrite] = [
            (w["task"], w["channel"], self.serde.loads_typed(_unpack(w["value"]))) for w in writes
        ]
        parent = value.get("parent")
        return CheckpointTuple(
            config=_config_of(thread, ns, checkpoint_id),
            checkpoint=self.serde.loads_typed(_unpack(value["checkpoint"])),
            metadata=self.serde.loads_typed(_unpack(value["metadata"])),
            parent_config=_config_of(thread, ns, parent) if parent else None,
            pending_writes=pending,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), else its thread's newest in its namespace; or None."""
        thread, ns, checkpoint_id = self._address(config)
        self._open()
        if checkpoint_id is None:
            newest = next((e for e in self._entries(thread) if e["ns"] == ns), None)
            if newest is None:
                return None
            checkpoint_id = newest["id"]
        return self._tuple(thread, {"ns": ns, "id": checkpoint_id})

    def _select(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> list[tuple[str, dict]]:
        """What ``list`` yields, as ``(thread, entry)``, newest checkpoint id first."""
        if filter is not None and not isinstance(filter, dict):
            raise UsageError(f"filter must be a dict of metadata values, got {type(filter).__name__}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise UsageError(f"limit must be an int, got {type(limit).__name__}")
        ns: str | None = None
        checkpoint_id = None
        if config is None:
            threads = None
        else:
            conf = self._configurable(config)
            threads = [self._thread(conf.get("thread_id"), "config['configurable']['thread_id']")]
            ns = conf.get("checkpoint_ns")
            checkpoint_id = get_checkpoint_id(config)
        bound = None if before is None else get_checkpoint_id(before)
        self._open()
        found: list[tuple[str, dict]] = []
        for thread in self._threads() if threads is None else threads:
            for entry in self._entries(thread):
                if ns is not None and entry["ns"] != ns:
                    continue
                if checkpoint_id and entry["id"] != checkpoint_id:
                    continue
                if bound and not entry["id"] < bound:
                    continue
                if filter:
                    metadata = self.serde.loads_typed(_unpack(entry["metadata"]))
                    # a key the metadata lacks matches None, as a JSON path that finds nothing does in SQL
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                found.append((thread, entry))
        found.sort(key=lambda item: item[1]["id"], reverse=True)
        return found if limit is None else found[: max(limit, 0)]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, when it names one), or of
        every thread when ``config`` is None; ``filter`` keeps those whose metadata holds each
        key with that value, ``before`` those older than its checkpoint id, ``limit`` the first n."""
        for thread, entry in self._select(config, filter, before, limit):
            found = self._tuple(thread, entry)
            if found is not None:
                yield found

    # -- writing ----------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint under ``config``'s thread and namespace (its parent: ``config``'s checkpoint_id),
        and mirror its messages into the thread's conversation (root namespace)."""
        thread, ns, parent = self._address(config)
        checkpoint_id = checkpoint["id"]
        meta = _pack(self.serde.dumps_typed(get_checkpoint_metadata(config, metadata)))
        entry = {"ns": ns, "id": checkpoint_id, "parent": parent, "metadata": meta}
        body = {**entry, "checkpoint": _pack(self.serde.dumps_typed(checkpoint))}
        self._open()
        with self._lock, self.store.transaction():
            self._records.write(REGISTRY_SESSION, _THREADS, [(_number(thread), thread)])
            self._records.write(thread, _INDEX, [(_number(ns, checkpoint_id), entry)])
            self._records.write(thread, _kind("checkpoint", ns, checkpoint_id), [(0, body)])
            if ns == "" and self.messages_channel is not None:
                values = checkpoint.get("channel_values") or {}
                if self.messages_channel in values:
                    self._mirror(thread, checkpoint_id, values[self.messages_channel])
        return _config_of(thread, ns, checkpoint_id)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for ``config``'s checkpoint: special channels (errors, interrupts...)
        replace what the task wrote there before, other writes already stored are kept."""
        thread, ns, checkpoint_id = self._address(config)
        if checkpoint_id is None:
            raise UsageError("put_writes needs the checkpoint's id in config['configurable']['checkpoint_id']")
        kind = _kind("writes", ns, checkpoint_id)
        rows = []
        for idx, (channel, value) in enumerate(writes):
            at = WRITES_IDX_MAP.get(channel, idx)
            rows.append(
                (
                    _number(task_id, at),
                    {
                        "task": task_id,
                        "path": task_path,
                        "idx": at,
                        "channel": channel,
                        "value": _pack(self.serde.dumps_typed(value)),
                    },
                )
            )
        self._open()
        with self._lock, self.store.transaction():
            if not all(channel in WRITES_IDX_MAP for channel, _ in writes):
                stored = {n for n, _ in self._records.read(thread, kind)}
                rows = [(n, value) for n, value in rows if n not in stored]
            if rows:
                self._records.write(thread, kind, rows)

    def delete_thread(self, thread_id: str) -> None:
        """Remove the thread's checkpoints and writes, every namespace, and its mirrored conversation
        (the whole session named by the thread id). A thread that is not there: nothing happens."""
        thread = self._thread(thread_id)
        self._open()
        with self._lock, self.store.transaction():
            self._mirrors.pop(thread, None)
            if self._records.read(thread, _INDEX):
                self._records.write(REGISTRY_SESSION, _THREADS, [(_number(thread), None)])
            try:
                self.store.delete_session(thread)
            except LookupError:  # SessionNotFound: nothing of it is stored
                pass

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread, all namespaces, to another thread id, and mirror
        the copied checkpoints' messages into the target's conversation (the same tree as the source's).
        What the target already holds is kept (a checkpoint of the same id is replaced). A source that
        is not there copies nothing."""
        source = self._thread(source_thread_id, "source_thread_id")
        target = self._thread(target_thread_id, "target_thread_id")
        if source == target:
            raise UsageError(f"copy_thread copies a thread to another id; both are {source!r}")
        self._open()
        with self._lock, self.store.transaction():
            entries = self._entries(source)[::-1]  # oldest first: the mirror grows as the source did
            if not entries:
                return
            self._records.write(REGISTRY_SESSION, _THREADS, [(_number(target), target)])
            self._records.write(target, _INDEX, [(_number(e["ns"], e["id"]), e) for e in entries])
            for entry in entries:
                for what in ("checkpoint", "writes"):
                    kind = _kind(what, entry["ns"], entry["id"])
                    rows = self._records.read(source, kind)
                    if rows:
                        self._records.write(target, kind, rows)
                        if what == "checkpoint" and entry["ns"] == "" and self.messages_channel is not None:
                            checkpoint = self.serde.loads_typed(_unpack(rows[0][1]["checkpoint"]))
                            values = checkpoint.get("channel_values") or {}
                            if self.messages_channel in values:
                                self._mirror(target, entry["id"], values[self.messages_channel])

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """The next channel version: the counter, zero-padded so that versions sort as strings, and a
        random fraction so that two forks of one checkpoint do not give the same version (the
        format of LangGraph's own savers)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(str(current).split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the conversation mirror ------------------------------------------------------
    def _mirror(self, thread: str, checkpoint_id: str, messages: Any, *, again: bool = True) -> None:
        """Place the checkpoint's messages as a path of the thread's tree (called in put's transaction)."""
        if not isinstance(messages, (list, tuple)):
            return  # not a message list (a channel of another shape, or a delta): nothing to mirror
        session = self.store.session(thread)
        # the tree's ids (one query, no content) tell whether the session is as this process left
        # it; when not (messages deleted or added elsewhere), the mirror is read again
        nodes = session.tree().nodes
        mirror = self._mirrors.get(thread)
        if mirror is None or mirror.ids != {n.id for n in nodes}:
            mirror = self._mirrors[thread] = _Mirror(session, nodes)
        parent: str | None = None
        for position, message in enumerate(messages):
            if not isinstance(message, BaseMessage):
                raise UsageError(
                    f"channel {self.messages_channel!r} of thread {thread!r} holds a {type(message).__name__} at "
                    f"position {position}, not a LangChain message; pass messages_channel=None (or the name of "
                    "the messages channel) to SessionkitSaver"
                )
            fields = json.loads(json.dumps(message.model_dump(), default=repr))
            converted, _ = langchain_to_message(fields, f"thread {thread!r}", f"checkpoint {checkpoint_id}")
            print_ = fingerprint({"role": converted["role"], "parts": converted["parts"]})
            lc_id = message.id or "lg-" + fingerprint({"after": parent, "message": print_})
            node = mirror.find(parent, lc_id, print_)
            if node is None:
                node = mirror.new_id(lc_id)
                meta = converted.setdefault("metadata", {}).setdefault("langgraph", {})
                meta.update(checkpoint=checkpoint_id, fingerprint=print_)
                if node != lc_id:
                    meta["id"] = lc_id
                (result,) = session.append_many([{"id": node, **converted}], parent_id=parent)
                if not result.inserted and again:  # another process placed it: read the tree again
                    self._mirrors.pop(thread, None)
                    return self._mirror(thread, checkpoint_id, messages, again=False)
                mirror.add(parent, lc_id, node, print_)
            parent = node
        return None

    # -- async twins: the sync methods on a worker thread (the store's calls block) -----
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        selected = await asyncio.to_thread(self._select, config, filter, before, limit)
        for thread, entry in selected:
            found = await asyncio.to_thread(self._tuple, thread, entry)
            if found is not None:
                yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)
