"""The async API (docs/async.md): a store and its sessions behind coroutines, for asyncio applications.

>>> import sessionkit as sk
>>> async def main():
...     async with sk.aio.open_store("chats.db") as store:
...         s = store.session("demo")
...         await s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
...         async for m in s.history():
...             print(m["id"])

An :class:`AsyncStore` wraps one sync :class:`~sessionkit.Store` and owns one worker
thread; every call to the store runs on that thread and the event loop only awaits
its result, so reads and writes -- a 100,000-message history, an fsync, a
PostgreSQL round trip -- never block the loop. Calls are queued in the order they
are made, first in first out.

Every method of :class:`~sessionkit.Store` and :class:`~sessionkit.Session` has a
coroutine twin here with the same name and arguments (``await s.append(m)``,
``await store.list_sessions()``, ``await store.sql(q)`` ...), returning the same
results and raising the same errors (an error raised on the worker thread reaches
the caller unchanged). The exceptions, all plain and non-blocking:

- :meth:`AsyncStore.session` returns the cached :class:`AsyncSession` handle;
- ``session.history()`` and ``store.scan()`` are async iterators
  (``async for m in s.history()``), reading one batch at a time on the worker;
- ``len(session)`` is ``await session.count()``;
- ``store.transaction()`` is an async context manager;
- ``session.on_compaction(fn)`` and ``session.compact_after(tokens)`` stay sync
  setters and chain;
- ``session_id``, ``path``, ``closed`` and ``capabilities`` are plain attributes, and
  so are ``store.settings.engine`` and ``store.settings.search_candidates`` (settable).
- ``store.run_log``, ``store.session_records`` and ``store.coordination`` are plain
  attributes whose calls are awaited (``coordination`` is ``None`` where the engine has none).

Cancelling the task that awaits an analysis call (``sql``, ``sql_arrow``, ``to_arrow``,
``messages_df``, ``runs_df``, ``events_df``) stops its DuckDB query, and ``close()``
stops one running (it raises ``StoreClosed``): the worker is free for the next call.

``store.sync`` and ``session.sync`` give the sync objects behind, for code that
needs them (a sync library, a notebook display); their calls block, so use them
off the loop or for cheap attributes.

(This module is longer than the others on purpose: it is the whole public API of the
store and the session once more, one short coroutine twin per method, each documented
where a user reads it; the machinery behind them, the worker thread and its queue, is
the first two hundred lines.)

An :class:`AsyncSession` can be given to ``agent.run(..., session=s)`` directly: the
run reads and writes the store behind it (its runs and events recorded there), its
store reads on a thread. An :class:`AsyncStore` is also a
:class:`sessionkit.SessionStore` (``async load`` and ``async save``), so
``sk.create_session(id, store=async_store)`` gives a session agents run on too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import itertools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any

from .errors import StoreClosed, UsageError
from .messages import check_text
from .store import (
    LATEST,
    AppendResult,
    Capabilities,
    ChangeEvent,
    Compaction,
    DatasetInfo,
    DatasetItem,
    Label,
    PathView,
    QueueInfo,
    QueueProgress,
    QueueUnit,
    RecentHistory,
    Rubric,
    RunRecord,
    SearchHit,
    Session,
    SessionInfo,
    Store,
    Tree,
    TreeNode,
)
from .store import open_store as _open_sync_store
from .store.compaction import run_maybe_async

__all__ = ["AsyncSession", "AsyncStore", "open_store"]

log = logging.getLogger("sessionkit")

#: The transactions the current task (or thread, for sync code) is inside: a
#: tuple of tokens, one per store. Tasks started inside a transaction inherit it.
_IN_TX: contextvars.ContextVar[tuple[Any, ...]] = contextvars.ContextVar("sessionkit_aio_transactions", default=())

#: Messages read per hop of ``history()``: small first (a caller taking the newest
#: few reads little), growing to this many.
_FIRST_BATCH = 16
_MOST_BATCH = 512


def open_store(target: Any = ":memory:", **options: Any) -> AsyncStore:
    """Open (or create) a store for asyncio code; the arguments are those of :func:`sessionkit.open_store`.

    The store opens on its worker thread, started right away; use it in any of
    these ways::

        async with sk.aio.open_store("chats.db") as store:   # closed at the end
            ...
        store = await sk.aio.open_store("chats.db")           # opened, or its error raised
        store = sk.aio.open_store("chats.db")                 # calls queue behind the opening

    An error of the opening (an unknown target, a locked file) is raised where the
    store is first awaited or used. Close it with ``await store.close()``.
    """
    return AsyncStore(functools.partial(_open_sync_store, target, **options))


class _WorkerThread:
    """Which thread runs a store's calls (set as that thread starts).

    Kept apart from the store so the thread holds no reference to it: a store
    dropped without ``close()`` can still be collected, and its thread ends.
    """

    __slots__ = ("ident",)

    def __init__(self) -> None:
        self.ident: int | None = None

    def mark(self) -> None:
        self.ident = threading.get_ident()


class _Query:
    """One analysis call of :meth:`AsyncStore._query`: whether it runs, whether its task was cancelled."""

    __slots__ = ("lock", "running", "cancelled", "ended")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = False
        self.cancelled = False
        self.ended = threading.Event()

    def stop_soon(self, store: AsyncStore) -> None:
        """Stop the call's query, if it runs, from a thread of its own (returns at once)."""
        with self.lock:
            if not self.running:
                return
        threading.Thread(target=self._stop, args=(store,), name="sessionkit-aio-stop", daemon=True).start()

    def _stop(self, store: AsyncStore) -> None:
        # The sync store's interrupt_sql(), again until the call has ended (one made before
        # the query has begun finds nothing to stop), and only while it runs (never a
        # later call's query).
        while True:
            with self.lock:
                if not self.running:
                    return
                with contextlib.suppress(StoreClosed):
                    store.sync.interrupt_sql()
            self.ended.wait(0.02)


class _Token:
    """One open transaction of a store: who is in it, and when it ends."""

    __slots__ = ("ended", "sync_cm")

    def __init__(self) -> None:
        self.ended: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.sync_cm: Any = None


async def _until_done(future: concurrent.futures.Future[Any]) -> None:
    """Wait for a future of the worker thread without ever cancelling it.

    (``asyncio.wrap_future`` would cancel the worker's future when the waiting
    task is cancelled; a future other tasks also wait for must not be.)
    """
    if future.done():
        return
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def settle() -> None:
        if not waiter.done():
            waiter.set_result(None)

    def wake(_: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass

    future.add_done_callback(wake)
    await waiter


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _listed(value: Any) -> Any:
    """A str or None as it is, any other iterable as a list (read here, not on the worker thread)."""
    if value is None or isinstance(value, str):
        return value
    try:
        return list(value)
    except TypeError:  # not iterable: the sync API names the problem
        return value


def _take(iterator: Iterator[Any], n: int) -> list[Any]:
    return list(itertools.islice(iterator, n))


class _LoopCallback:
    """A callback the store calls on its writer (or listener) thread.

    A sync callback runs right there, as with the sync store. An async one (any
    callable returning an awaitable) runs as a task on the event loop it was
    subscribed from, scheduled with ``call_soon_threadsafe``; an error it raises
    is logged, like a sync callback's, and never reaches the write.
    """

    def __init__(self, callback: Callable[..., Any], loop: asyncio.AbstractEventLoop, what: str) -> None:
        self.callback = callback
        self.loop = loop
        self.what = what
        self._tasks: set[asyncio.Future[Any]] = set()  # strong references until they finish

    def __repr__(self) -> str:
        return repr(self.callback)

    def __call__(self, *args: Any) -> None:
        result = self.callback(*args)
        if not inspect.isawaitable(result):
            return
        try:
            self.loop.call_soon_threadsafe(self._start, result)
        except RuntimeError:  # the loop is closed
            if inspect.iscoroutine(result):
                result.close()
            log.warning("sessionkit: %s %r not called: its event loop is closed", self.what, self.callback)

    def _start(self, awaitable: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("sessionkit: %s %r raised", self.what, self.callback, exc_info=exc)


class _CompactionFunction:
    """A compaction function registered on an :class:`AsyncSession`, as the sync session calls it.

    It runs on the worker thread, as part of the append that crossed the threshold
    (or of ``compact()``); ``ctx.session`` is the :class:`AsyncSession`. An async
    function runs to completion on an event loop of its own on that thread, where
    its ``await`` on the store runs the call directly.
    """

    def __init__(self, session: AsyncSession, fn: Callable[..., Any]) -> None:
        self.session = session
        self.fn = fn

    def __repr__(self) -> str:
        return repr(self.fn)

    def __call__(self, messages: list[dict[str, Any]], ctx: Any) -> Any:
        return run_maybe_async(self.fn(messages, dataclasses.replace(ctx, session=self.session)))


class AsyncStore:
    """A conversation store for asyncio code. Open one with :func:`sessionkit.aio.open_store`.

    Every call runs on the store's one worker thread; see :mod:`sessionkit.aio`.
    An async context manager (``async with``), awaitable (``await store`` waits
    until it is open) and closed with ``await store.close()`` (idempotent; calls
    after it raise :class:`~sessionkit.StoreClosed`).
    """

    def __init__(self, opener: Callable[[], Store]) -> None:
        self._lock = threading.Lock()
        self._closed = False
        self._closing: concurrent.futures.Future[Any] | None = None
        self._tx: _Token | None = None
        self._queries: set[_Query] = set()  # analysis calls running on the worker (see _query)
        self._run_log = AsyncRunLog(self)
        self._session_records = AsyncSessionRecords(self)
        self._coordination: AsyncCoordination | None = None
        self._settings = AsyncStoreSettings(self)
        # Handles while in use (an AsyncSession holds no settings: on_compaction and
        # compact_after set them on the sync session, which keeps them).
        self._sessions: weakref.WeakValueDictionary[str, AsyncSession] = weakref.WeakValueDictionary()
        self._worker = _WorkerThread()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sessionkit-aio", initializer=self._worker.mark
        )
        self._opening: concurrent.futures.Future[Any] = self._executor.submit(opener)
        self._opening.add_done_callback(self._after_opening)

    def _after_opening(self, opening: concurrent.futures.Future[Any]) -> None:
        if opening.exception() is not None:  # a store that never opened keeps no thread
            self._executor.shutdown(wait=False)

    def _submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        """``fn(*args, **kwargs)`` queued on the worker; the opening's error or ``StoreClosed`` once it is gone."""
        try:
            return self._executor.submit(fn, *args, **kwargs)
        except RuntimeError:  # the executor was shut down
            if self._opening.done() and self._opening.exception() is not None:
                self._opening.result()
            raise StoreClosed("the store is closed") from None

    # -- lifecycle ----------------------------------------------------------------------
    def __await__(self):
        return self._opened_async().__await__()

    async def _opened_async(self) -> AsyncStore:
        await _until_done(self._opening)
        self._opening.result()  # the opening's error, if any
        return self

    async def __aenter__(self) -> AsyncStore:
        if self._closed:
            raise StoreClosed("the store is closed")
        return await self._opened_async()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the store (idempotent): calls made after it raise ``StoreClosed``.

        Calls made before it finish first; an open transaction of another task
        ends before the store closes. An analysis query (``sql``, ``sql_arrow``,
        ``messages_df``...) running then, or starting after, is stopped: it raises
        ``StoreClosed``.
        """
        self._closed = True
        with self._lock:
            running = list(self._queries)
        for call in running:
            call.stop_soon(self)
        if self._on_worker():  # from a callback on the worker: close right here
            with self._lock:
                if self._closing is None:
                    self._closing = concurrent.futures.Future()
                    self._executor.shutdown(wait=False)
                    try:
                        self._close_sync()
                    finally:
                        self._closing.set_result(None)
            return
        while True:
            with self._lock:
                tx = self._tx
                if self._closing is None and (tx is None or tx in _IN_TX.get()):
                    try:
                        self._closing = self._executor.submit(self._close_sync)
                    except RuntimeError:  # never opened: nothing to close
                        self._closing = concurrent.futures.Future()
                        self._closing.set_result(None)
                    self._executor.shutdown(wait=False)
                closing = self._closing
            if closing is not None:
                break
            await _until_done(tx.ended)  # type: ignore[union-attr]
        await _until_done(closing)
        closing.result()

    def _close_sync(self) -> None:
        if self._opening.exception() is None:
            self._opening.result().close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sync(self) -> Store:
        """The sync :class:`~sessionkit.Store` behind this one, for code that needs it.

        Its calls block: use it off the event loop, or for cheap attributes. Before
        the store has opened, an event loop's thread gets ``UsageError`` (await the
        store first) and any other thread waits for the opening.
        """
        if not self._opening.done() and _on_event_loop():
            raise UsageError("the store is still opening: await it first (store = await sk.aio.open_store(...))")
        return self._opening.result()

    @property
    def path(self) -> str | None:
        return self.sync.path

    @property
    def capabilities(self) -> Capabilities:
        """What the engine can do beyond the common API (see :class:`sessionkit.store.Capabilities`)."""
        return self.sync.capabilities

    @property
    def settings(self) -> AsyncStoreSettings:
        """The engine's name and how a search ranks, plain attributes (see :class:`sessionkit.store.StoreSettings`)."""
        return self._settings

    def __repr__(self) -> str:
        if not self._opening.done():
            return "<sessionkit.aio.AsyncStore (opening)>"
        if self._opening.exception() is not None:
            return "<sessionkit.aio.AsyncStore (failed to open)>"
        st = self._opening.result()
        state = "closed" if self._closed else "open"
        return f"<sessionkit.aio.AsyncStore {st.settings.engine} {st.path or ':memory:'} ({state})>"

    # -- running calls on the worker -------------------------------------------------------
    def _on_worker(self) -> bool:
        return threading.get_ident() == self._worker.ident

    def _opened(self) -> Store:
        """The sync store (on the worker the opening has always finished)."""
        return self._opening.result()

    async def _run(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the worker thread and return its result or raise its error.

        Called from the worker itself (a store callback using the async API), it
        runs right away. While another task holds a transaction, the call waits
        for it to end, so it never joins someone else's transaction.
        """
        if self._on_worker():
            return fn(*args, **kwargs)
        while True:
            with self._lock:
                if self._closed:
                    raise StoreClosed("the store is closed")
                tx = self._tx
                if tx is None or tx in _IN_TX.get():
                    future = self._submit(fn, *args, **kwargs)
                    break
            await _until_done(tx.ended)
        return await asyncio.wrap_future(future)

    async def _call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        return await self._run(self._invoke, name, args, kwargs)

    def _invoke(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self._opened(), name)(*args, **kwargs)

    async def _stream(self, start: Callable[[], Iterator[Any]], first: int, most: int) -> AsyncIterator[Any]:
        """Items of the sync iterator ``start()`` makes, read on the worker ``first`` then up to ``most`` at a time.

        Nothing stays open on the worker between batches but the iterator itself
        (the store's iterators hold no transaction between items); stopping early
        reads no further batch.
        """
        iterator = await self._run(start)
        finished = False
        try:
            n = first
            while True:
                batch = await self._run(_take, iterator, n)
                for item in batch:
                    yield item
                if len(batch) < n:
                    finished = True
                    return
                n = min(n * 2, most)
        finally:
            if not finished:
                close = getattr(iterator, "close", None)
                if close is not None:
                    try:
                        await self._run(close)
                    except Exception:  # the store closed meanwhile: nothing left to release
                        pass

    # -- sessions --------------------------------------------------------------------------
    def session(self, session_id: str = "") -> AsyncSession:
        """The handle of a session (the same object for the same id), as :meth:`sessionkit.Store.session`."""
        if self._closed:
            raise StoreClosed("the store is closed")
        if type(session_id) is not str:
            if not isinstance(session_id, str):
                raise TypeError(f"session_id must be a str, got {type(session_id).__name__}")
            session_id = str(session_id)
        check_text(session_id, "session_id")
        with self._lock:
            handle = self._sessions.get(session_id)
            if handle is None:
                handle = self._sessions[session_id] = AsyncSession(self, session_id)
            return handle

    async def list_sessions(self) -> list[SessionInfo]:
        """Every session holding at least one message, newest activity first."""
        return await self._call("list_sessions")

    async def import_many(
        self, records: Iterable[tuple[str, Iterable[tuple[dict[str, Any], Any, Any]]]]
    ) -> list[list[AppendResult]]:
        """Import many sessions' messages in one transaction (see :meth:`sessionkit.Store.import_many`)."""
        return await self._call("import_many", list(records))

    async def sessions_holding(self, session_ids: Iterable[str]) -> set[str]:
        """Which of ``session_ids`` hold messages (see :meth:`sessionkit.Store.sessions_holding`)."""
        return await self._call("sessions_holding", list(session_ids))

    async def delete_session(self, session_id: str) -> None:
        """Remove everything of a session; an unknown id -> ``SessionNotFound``."""
        return await self._call("delete_session", session_id)

    async def stats(self) -> dict[str, Any]:
        """Counts and sizes, as :meth:`sessionkit.Store.stats`."""
        return await self._call("stats")

    async def change_marker(self) -> str:
        """A text that changes whenever something is written, as :meth:`sessionkit.Store.change_marker`."""
        return await self._call("change_marker")

    def transaction(self) -> _Transaction:
        """Group writes into one transaction (``async with store.transaction():``), as the sync store's.

        The calls of this task inside the block, and of tasks it starts there, join
        the transaction; other tasks' calls on this store wait until it ends (they
        would otherwise join it, since every call runs on the one worker thread).
        Change events are delivered after the commit, none after a rollback.
        Keep it short: the store's write lock is held until the block ends.
        """
        return _Transaction(self)

    # -- change feed ------------------------------------------------------------------------
    async def subscribe(self, callback: Callable[[ChangeEvent], Any]) -> Callable[[], None]:
        """Call ``callback(event)`` after every write (docs/message-tree.md); returns ``unsubscribe``
        (a plain function).

        ``callback`` may be sync or async. A sync callback runs on the thread that
        wrote (the worker thread; on PostgreSQL, other processes' writes come from
        a listener thread), before the write's ``await`` returns, as in the sync
        API. An async callback runs as a task on the event loop ``subscribe`` was
        awaited on, scheduled with ``call_soon_threadsafe``. A callback that raises
        is logged and never stops the write.
        """
        if not callable(callback):
            raise TypeError("callback must be callable")
        loop = asyncio.get_running_loop()
        return await self._call("subscribe", _LoopCallback(callback, loop, "change subscriber"))

    # -- search -----------------------------------------------------------------------------
    async def search(
        self, query: str, *, session_id: str | None = None, limit: int = 10, labels: str | Iterable[str] | None = None
    ) -> list[SearchHit]:
        """Full-text search over text parts (docs/search.md), as :meth:`sessionkit.Store.search`."""
        return await self._call("search", query, session_id=session_id, limit=limit, labels=_listed(labels))

    # -- labels (docs/labels.md) -------------------------------------------------------------------
    async def add_label(self, session_id: str, message_id: str, tag: str, **fields: Any) -> Label:
        """Put a label on a message or a branch (see :meth:`sessionkit.Session.add_label`)."""
        return await self._call("add_label", session_id, message_id, tag, **fields)

    async def remove_label(self, label_id: str) -> bool:
        """Remove a label by id; whether there was one."""
        return await self._call("remove_label", label_id)

    async def labels(
        self,
        *,
        session_id: str | None = None,
        message_id: str | Iterable[str] | None = None,
        tag: str | Iterable[str] | None = None,
        author: str | None = None,
        min_rating: float | None = None,
        max_rating: float | None = None,
        target: str | None = None,
        source: str | None = None,
        scorer: str | None = None,
    ) -> list[Label]:
        """The labels matching every filter given, as :meth:`sessionkit.Store.labels`."""
        return await self._call(
            "labels",
            session_id=session_id,
            message_id=_listed(message_id),
            tag=_listed(tag),
            author=author,
            min_rating=min_rating,
            max_rating=max_rating,
            target=target,
            source=source,
            scorer=scorer,
        )

    async def import_labels(self, labels: Iterable[Label | dict[str, Any]]) -> int:
        """Store labels with their ids and times kept (see :meth:`sessionkit.Store.import_labels`)."""
        return await self._call("import_labels", list(labels))

    async def score(
        self,
        scorer: Any,
        *,
        sessions: str | Iterable[str] | None = None,
        where: str | None = None,
        level: str = "turn",
        concurrency: int = 4,
        progress: Any = True,
    ) -> dict[str, int]:
        """Run a scorer over the store's units and keep its labels, as :meth:`sessionkit.Store.score`
        (on the store's worker thread; the scorer's own threads ask it)."""
        return await self._call(
            "score",
            scorer,
            sessions=_listed(sessions),
            where=where,
            level=level,
            concurrency=concurrency,
            progress=progress,
        )

    # -- datasets (docs/judging.md) -----------------------------------------------------------
    async def dataset(
        self,
        name: str,
        *,
        query: str | None = None,
        units: Iterable[Any] | None = None,
        level: str = "turn",
        version: int | None = None,
    ) -> DatasetInfo:
        """Freeze turns or paths of the store as a dataset, as :meth:`sessionkit.Store.dataset`."""
        return await self._call(
            "dataset", name, query=query, units=None if units is None else list(units), level=level, version=version
        )

    async def datasets(self) -> list[DatasetInfo]:
        """Every version of every dataset, as :meth:`sessionkit.Store.datasets`."""
        return await self._call("datasets")

    async def dataset_items(self, name: str, version: int | None = None) -> list[DatasetItem]:
        """The items of a dataset's version (the latest when None), as :meth:`sessionkit.Store.dataset_items`."""
        return await self._call("dataset_items", name, version)

    async def delete_dataset(self, name: str, version: int | None = None) -> int:
        """Delete one version of a dataset or all of them, as :meth:`sessionkit.Store.delete_dataset`."""
        return await self._call("delete_dataset", name, version)

    async def import_datasets(self, datasets: Iterable[Any]) -> int:
        """Store datasets as they are, as :meth:`sessionkit.Store.import_datasets`."""
        return await self._call("import_datasets", list(datasets))

    # -- annotation queues (docs/annotation.md) -----------------------------------------------
    async def queue(
        self,
        name: str,
        *,
        units: Iterable[Any] | None = None,
        query: str | None = None,
        dataset: str | tuple[str, int] | None = None,
        level: str = "turn",
        rubric: Rubric | dict[str, Any] | list[str] | None = None,
        annotators: Iterable[str] | None = None,
        per_unit: int = 1,
        lease_seconds: float = 900.0,
    ) -> QueueInfo:
        """Define an annotation queue, as :meth:`sessionkit.Store.queue`."""
        return await self._call(
            "queue",
            name,
            units=None if units is None else list(units),
            query=query,
            dataset=dataset,
            level=level,
            rubric=rubric,
            annotators=None if annotators is None else list(annotators),
            per_unit=per_unit,
            lease_seconds=lease_seconds,
        )

    async def queues(self) -> list[QueueInfo]:
        """Every annotation queue, as :meth:`sessionkit.Store.queues`."""
        return await self._call("queues")

    async def queue_info(self, name: str) -> QueueInfo:
        """One annotation queue, as :meth:`sessionkit.Store.queue_info`."""
        return await self._call("queue_info", name)

    async def queue_units(self, name: str) -> list[tuple[int, str, str]]:
        """The units of a queue, as :meth:`sessionkit.Store.queue_units`."""
        return await self._call("queue_units", name)

    async def next_unit(self, name: str, annotator: str, *, lease_seconds: float | None = None) -> QueueUnit | None:
        """Claim the unit an annotator labels next, as :meth:`sessionkit.Store.next_unit`."""
        return await self._call("next_unit", name, annotator, lease_seconds=lease_seconds)

    async def submit_label(
        self, name: str, annotator: str, n: int, tag: str, *, rating: float | None = None, note: str | None = None
    ) -> Label:
        """Label a unit of a queue, as :meth:`sessionkit.Store.submit_label`."""
        return await self._call("submit_label", name, annotator, n, tag, rating=rating, note=note)

    async def release_unit(self, name: str, annotator: str, n: int) -> bool:
        """Give back a claim, as :meth:`sessionkit.Store.release_unit`."""
        return await self._call("release_unit", name, annotator, n)

    async def queue_progress(self, name: str) -> QueueProgress:
        """How far a queue is, as :meth:`sessionkit.Store.queue_progress`."""
        return await self._call("queue_progress", name)

    async def queue_labels(self, name: str) -> list[Label]:
        """The labels submitted through a queue, as :meth:`sessionkit.Store.queue_labels`."""
        return await self._call("queue_labels", name)

    async def export_queue(self, name: str) -> dict[str, Any]:
        """A queue as one JSON object, as :meth:`sessionkit.Store.export_queue`."""
        return await self._call("export_queue", name)

    async def import_queues(self, queues: Iterable[dict[str, Any]]) -> int:
        """Store exported queues, as :meth:`sessionkit.Store.import_queues`."""
        return await self._call("import_queues", list(queues))

    async def delete_queue(self, name: str) -> bool:
        """Delete a queue (its labels stay), as :meth:`sessionkit.Store.delete_queue`."""
        return await self._call("delete_queue", name)

    # -- facts as they are: imports, exports and copies -------------------------------------
    async def import_runs(self, runs: Iterable[RunRecord | dict[str, Any]]) -> int:
        """Store run records with their ids, times and meta kept (see :meth:`sessionkit.Store.import_runs`)."""
        return await self._call("import_runs", list(runs))

    async def import_events(self, events: Iterable[dict[str, Any]]) -> int:
        """Store run events with their seqs kept (see :meth:`sessionkit.Store.import_events`)."""
        return await self._call("import_events", list(events))

    async def import_embeddings(self, vectors: Iterable[dict[str, Any]]) -> int:
        """Store message vectors as they are (see :meth:`sessionkit.Store.import_embeddings`)."""
        return await self._call("import_embeddings", list(vectors))

    # -- embeddings -------------------------------------------------------------------------
    async def embed(
        self, embedder, *, batch_size: int = 256, progress=None, options: dict[str, Any] | None = None
    ) -> int:
        """Store vectors for the messages new since the last call, as :meth:`sessionkit.Store.embed`
        (the embedder runs on the store's worker thread)."""
        return await self._call("embed", embedder, batch_size=batch_size, progress=progress, options=options)

    async def similar(
        self,
        query,
        *,
        k: int = 10,
        session_ids=None,
        embedder=None,
        model: str | None = None,
        level: str = "message",
    ) -> list[Any]:
        """The messages (or sessions) most similar to ``query``, as :meth:`sessionkit.Store.similar`."""
        ids = session_ids if session_ids is None or isinstance(session_ids, str) else list(session_ids)
        return await self._query("similar", query, k=k, session_ids=ids, embedder=embedder, model=model, level=level)

    # -- runs, events, records ------------------------------------------------------------------
    async def runs(self, session_id: str) -> list[RunRecord]:
        """Recorded agent runs of a session, oldest first."""
        return await self._call("runs", session_id)

    async def events(self, session_id: str, after_seq: int | None = None) -> list[dict[str, Any]]:
        """Stored run events of a session in ``seq`` order, after ``after_seq`` when given."""
        return await self._call("events", session_id, after_seq)

    @property
    def run_log(self) -> AsyncRunLog:
        """Where the store records agent runs, awaited (see :class:`sessionkit.store.StoreRunLog`)."""
        return self._run_log

    @property
    def session_records(self) -> AsyncSessionRecords:
        """The records beside a session, awaited (see :class:`sessionkit.store.SessionRecords`)."""
        return self._session_records

    @property
    def coordination(self) -> AsyncCoordination | None:
        """Holds and signals between processes, awaited; ``None`` where the engine has none
        (see :class:`sessionkit.store.Coordination`)."""
        if self.sync.coordination is None:
            return None
        if self._coordination is None:
            self._coordination = AsyncCoordination(self)
        return self._coordination

    async def _call_on(self, part: str, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """``store.<part>.<name>(*args, **kwargs)`` of the sync store, on the worker."""
        return await self._run(lambda: getattr(getattr(self._opened(), part), name)(*args, **kwargs))

    # -- reading everything ----------------------------------------------------------------------
    def scan(
        self, kind: str, *, session_ids: Iterable[str] | None = None, batch_size: int = 20_000
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """Every row of ``kind`` in batches, as :meth:`sessionkit.Store.scan`: ``async for batch in store.scan(kind)``.

        Each batch is read on the worker thread when the loop asks for it. The
        arguments are checked at the call once the store is open, else at the
        first batch.
        """
        if self._opening.done() and not self._closed:
            # Checks only: the sync scan reads nothing before its first batch.
            scanned = self.sync.scan(kind, session_ids=session_ids, batch_size=batch_size)
            return self._stream(lambda: scanned, 1, 1)
        if self._closed:
            raise StoreClosed("the store is closed")
        ids = session_ids if session_ids is None or isinstance(session_ids, str) else list(session_ids)
        return self._stream(lambda: self._opened().scan(kind, session_ids=ids, batch_size=batch_size), 1, 1)

    # -- analysis ---------------------------------------------------------------------------------
    async def _query(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """An analysis call on the worker; cancelling the awaiting task stops its query.

        A call still queued never runs; one running is stopped with the sync store's
        ``interrupt_sql()``, called again until the call has ended (one call before the
        query has begun would find nothing to stop) and only while it runs (never a later
        call's query), so the worker is free for the next call at once and the store
        answers it as before."""
        call = _Query()

        def run() -> Any:
            with call.lock:
                if call.cancelled:
                    raise asyncio.CancelledError()
                call.running = True
            with self._lock:
                self._queries.add(call)
            try:
                if self._closed:  # (closed while this was queued: stopped as it starts)
                    call.stop_soon(self)
                return getattr(self._opened(), name)(*args, **kwargs)
            finally:
                with self._lock:
                    self._queries.discard(call)
                with call.lock:
                    call.running = False
                call.ended.set()

        try:
            return await self._run(run)
        except KeyboardInterrupt:  # stopped by close() or interrupt_sql() (it would stop the event loop)
            if self._closed:
                raise StoreClosed("the store was closed while the query ran") from None
            raise asyncio.CancelledError("the query was interrupted") from None
        except asyncio.CancelledError:
            with call.lock:
                call.cancelled = True
            call.stop_soon(self)
            raise

    async def messages_df(self, session_ids=None):
        """One row per message with the columns of the ``messages`` view (docs/analysis.md) (a pandas DataFrame)."""
        return await self._query("messages_df", session_ids)

    async def sql(self, query: str, params=None, *, files: bool = False, timeout: float | None = None):
        """Run DuckDB SQL over the analysis views (docs/analysis.md) (a DataFrame).

        Cancelling the task that awaits it stops the query (see :meth:`sessionkit.Store.sql_arrow`);
        so does ``timeout`` (seconds), with ``QueryTimeout``."""
        return await self._query("sql", query, params, files=files, timeout=timeout)

    async def sql_arrow(
        self, query: str, params=None, *, session_ids=None, files: bool = False, timeout: float | None = None
    ):
        """``store.sql`` as a ``pyarrow.Table``."""
        ids = session_ids if session_ids is None or isinstance(session_ids, str) else list(session_ids)
        return await self._query("sql_arrow", query, params, session_ids=ids, files=files, timeout=timeout)

    async def interrupt_sql(self) -> None:
        """Stop the analysis queries running now on this store; runs at once, not behind the
        calls queued on the worker. A task awaiting a stopped query raises ``CancelledError``
        (the sync API's ``KeyboardInterrupt`` would stop the event loop)."""
        if self._closed:
            raise StoreClosed("the store is closed")
        await self._opened_async()
        self._opened().interrupt_sql()

    async def to_arrow(self, view: str):
        """One analysis view as a ``pyarrow.Table``."""
        return await self._query("to_arrow", view)

    async def runs_df(self):
        """The ``runs`` view as a pandas DataFrame."""
        return await self._query("runs_df")

    async def events_df(self, session_ids=None):
        """The ``events`` view (of ``session_ids``) as a pandas DataFrame."""
        return await self._query("events_df", session_ids)

    # -- transactions (the worker holds the sync store's transaction between calls) -----------------
    async def _tx_enter(self) -> _Token | None:
        """Open a transaction on the worker for this task; None when it is in one already."""
        if self._on_worker():
            raise UsageError("a transaction cannot begin inside a store callback; use store.sync.transaction()")
        while True:
            with self._lock:
                if self._closed:
                    raise StoreClosed("the store is closed")
                held = self._tx
                if held is not None and held in _IN_TX.get():
                    return None
                if held is None:
                    token = self._tx = _Token()
                    try:
                        entering = self._submit(self._tx_open_sync, token)
                    except BaseException:
                        self._tx = None
                        raise
                    break
            await _until_done(held.ended)
        try:
            await _until_done(entering)
        except BaseException:  # cancelled while the worker enters: roll back once it has
            entering.add_done_callback(lambda f: self._tx_abandon(f, token))
            raise
        try:
            entering.result()
        except BaseException:
            self._tx_release(token)
            raise
        return token

    async def _tx_exit(self, token: _Token, exc_type: Any, exc: Any, tb: Any) -> bool:
        """Commit (or roll back, given an exception) on the worker, then let other tasks in."""
        try:
            leaving = self._executor.submit(self._tx_close_sync, token, exc_type, exc, tb)
        except RuntimeError:  # the store was closed inside the block
            self._tx_release(token)
            raise StoreClosed("the store was closed inside the transaction") from None
        leaving.add_done_callback(lambda _: self._tx_release(token))
        await _until_done(leaving)  # the worker ends it even if this task is cancelled
        return bool(leaving.result())

    def _tx_open_sync(self, token: _Token) -> None:
        cm = self._opened().transaction()
        cm.__enter__()
        token.sync_cm = cm

    @staticmethod
    def _tx_close_sync(token: _Token, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        return token.sync_cm.__exit__(exc_type, exc, tb)

    def _tx_abandon(self, entering: concurrent.futures.Future[Any], token: _Token) -> None:
        """The entering task was cancelled: once the worker has entered, roll back there and end it."""
        if entering.cancelled() or entering.exception() is not None:
            self._tx_release(token)
            return
        cancelled = asyncio.CancelledError()

        def rollback() -> None:
            try:
                self._tx_close_sync(token, type(cancelled), cancelled, None)
            except BaseException:
                log.exception("sessionkit: rolling back an abandoned transaction failed")
            finally:
                self._tx_release(token)

        self._executor.submit(rollback)

    def _tx_release(self, token: _Token) -> None:
        with self._lock:
            if self._tx is token:
                self._tx = None
        if not token.ended.done():
            token.ended.set_result(None)

    # -- the SessionStore protocol (docs/agents.md) ------------------------------------------------------------
    async def load(self, session_id: str) -> list[dict[str, Any]]:
        """``SessionStore.load``: the session's latest path, compaction applied (``get_history()``)."""
        return await self.session(session_id).get_history()

    async def save(self, session_id: str, new_messages: list[dict[str, Any]]) -> None:
        """``SessionStore.save``: append the messages as a chain under the latest leaf (``append_many``)."""
        await self.session(session_id).append_many(new_messages)


class _Transaction:
    """``async with store.transaction():`` (see :meth:`AsyncStore.transaction`)."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store
        self._token: _Token | None = None
        self._reset: contextvars.Token[Any] | None = None

    async def __aenter__(self) -> AsyncStore:
        token = await self._store._tx_enter()
        if token is not None:  # (None: nested, joining the transaction already open)
            self._token = token
            self._reset = _IN_TX.set((*_IN_TX.get(), token))
        return self._store

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        token = self._token
        if token is None:
            return False  # nested: the outer block commits
        self._token = None
        try:
            _IN_TX.reset(self._reset)  # type: ignore[arg-type]
        except ValueError:  # left in another context than entered: drop the token there
            _IN_TX.set(tuple(t for t in _IN_TX.get() if t is not token))
        return await self._store._tx_exit(token, exc_type, exc, tb)


class AsyncRunLog:
    """``store.run_log`` of an :class:`AsyncStore`: :class:`sessionkit.store.StoreRunLog`'s calls, awaited."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store

    async def begin(
        self,
        session_id: str,
        run_id: str,
        input: str | None,
        *,
        meta: dict[str, Any] | None = None,
        started_at: Any = None,
    ) -> None:
        """Record that a run started (see :meth:`sessionkit.store.StoreRunLog.begin`)."""
        return await self._store._call_on(
            "run_log", "begin", session_id, run_id, input, meta=meta, started_at=started_at
        )

    async def end(
        self,
        run_id: str,
        *,
        status: str,
        error: str | None = None,
        usage: dict[str, Any] | None = None,
        ended_at: Any = None,
    ) -> None:
        """Record how a run ended (see :meth:`sessionkit.store.StoreRunLog.end`)."""
        return await self._store._call_on(
            "run_log", "end", run_id, status=status, error=error, usage=usage, ended_at=ended_at
        )

    async def reopen(self, run_id: str) -> None:
        """Record that a run runs again under its id (see :meth:`sessionkit.store.StoreRunLog.reopen`)."""
        return await self._store._call_on("run_log", "reopen", run_id)

    async def append_events(self, session_id: str, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Store run events of a session in one transaction; returns them as stored."""
        return await self._store._call_on("run_log", "append_events", session_id, list(events))

    async def runs(self, session_id: str) -> list[RunRecord]:
        """Recorded agent runs of a session, oldest first (``await store.runs()``)."""
        return await self._store.runs(session_id)

    async def events(self, session_id: str, after_seq: int | None = None) -> list[dict[str, Any]]:
        """Stored run events of a session in ``seq`` order (``await store.events()``)."""
        return await self._store.events(session_id, after_seq)


class AsyncSessionRecords:
    """``store.session_records`` of an :class:`AsyncStore`: :class:`~sessionkit.store.SessionRecords`, awaited."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store

    async def get(self, session_id: str, kind: str) -> list[tuple[int, Any]]:
        """``(n, value)`` of a session's records of ``kind`` (see :meth:`sessionkit.store.SessionRecords.get`)."""
        return await self._store._call_on("session_records", "get", session_id, kind)

    async def put(self, session_id: str, kind: str, items: Iterable[tuple[int, Any]]) -> None:
        """Insert or replace records ``(n, value)`` of ``kind`` in one transaction."""
        return await self._store._call_on("session_records", "put", session_id, kind, list(items))


class AsyncCoordination:
    """``store.coordination`` of an :class:`AsyncStore`: :class:`sessionkit.store.Coordination`'s calls, awaited."""

    def __init__(self, store: AsyncStore) -> None:
        self._store = store

    async def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` (see :meth:`sessionkit.store.Coordination.try_hold`)."""
        return await self._store._call_on("coordination", "try_hold", name)

    async def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now."""
        return await self._store._call_on("coordination", "hold_taken", name)

    async def release_hold(self, name: str) -> None:
        """Give back the hold ``name``."""
        return await self._store._call_on("coordination", "release_hold", name)

    async def signal(self, session_id: str, kind: str, data: Any = None) -> None:
        """Tell the other processes on this store ``(session_id, kind, data)``."""
        return await self._store._call_on("coordination", "signal", session_id, kind, data)

    async def on_signal(self, handler: Callable[[str, str, Any], Any]) -> None:
        """Call ``handler(session_id, kind, data)`` for other processes' signals.

        ``handler`` may be sync or async, as the callback of :meth:`AsyncStore.subscribe`.
        """
        if not callable(handler):
            raise TypeError("handler must be callable")
        loop = asyncio.get_running_loop()
        return await self._store._call_on("coordination", "on_signal", _LoopCallback(handler, loop, "signal handler"))


class AsyncStoreSettings:
    """``store.settings`` of an :class:`AsyncStore`: :class:`sessionkit.store.StoreSettings`, plain attributes.

    Reading or setting them does not block (they are the sync store's settings);
    before the store has opened, an event loop's thread gets ``UsageError``, as
    ``store.sync`` does.
    """

    def __init__(self, store: AsyncStore) -> None:
        self._store = store

    def __repr__(self) -> str:
        opening = self._store._opening
        if not opening.done() or opening.exception() is not None:
            return f"<sessionkit.aio.AsyncStoreSettings of {self._store!r}>"
        st = opening.result().settings
        return f"<sessionkit.aio.AsyncStoreSettings engine={st.engine!r} search_candidates={st.search_candidates}>"

    @property
    def engine(self) -> str:
        """The engine's name: ``"sqlite"``, ``"duckdb"`` or ``"postgresql"``."""
        return self._store.sync.settings.engine

    @property
    def search_candidates(self) -> int:
        """How many of the newest matches a search ranks at most (see :meth:`sessionkit.Store.search`)."""
        return self._store.sync.settings.search_candidates

    @search_candidates.setter
    def search_candidates(self, value: int) -> None:
        self._store.sync.settings.search_candidates = value


class AsyncSession:
    """One conversation tree of an :class:`AsyncStore`. Get it with ``store.session(id)``.

    Coroutine twins of every :class:`sessionkit.Session` method, run on the
    store's worker thread; ``history()`` is an async iterator, ``len()`` is
    ``await session.count()``, ``on_compaction``/``compact_after`` are sync setters.
    """

    def __init__(self, store: AsyncStore, session_id: str) -> None:
        self._store = store
        self.session_id = session_id

    def __repr__(self) -> str:
        return f"<sessionkit.aio.AsyncSession {self.session_id!r} in {self._store!r}>"

    @property
    def can_branch(self) -> bool:
        """True, like its sync twin: a store session is a tree (a turn may hang under any message)."""
        return True

    @property
    def store(self) -> AsyncStore:
        return self._store

    @property
    def run_log(self) -> AsyncRunLog:
        """Where this session's runs and events are recorded: its store's ``store.run_log``."""
        return self._store.run_log

    @property
    def sync(self) -> Session:
        """The sync :class:`~sessionkit.Session` behind this one (its calls block; see ``AsyncStore.sync``)."""
        return self._store.sync.session(self.session_id)

    def _session(self) -> Session:
        return self._store._opened().session(self.session_id)

    async def _call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        return await self._store._run(self._invoke, name, args, kwargs)

    def _invoke(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return getattr(self._session(), name)(*args, **kwargs)

    # -- writing --------------------------------------------------------------------------
    async def append(self, message: dict[str, Any], *, parent_id: Any = LATEST, source: str = "server") -> AppendResult:
        """Add a message (docs/message-tree.md); idempotent on ``message["id"]``."""
        return await self._call("append", message, parent_id=parent_id, source=source)

    async def append_many(
        self, messages: Iterable[dict[str, Any]], *, parent_id: Any = LATEST, source: str = "server"
    ) -> list[AppendResult]:
        """Append a chain of messages in one transaction (docs/message-tree.md)."""
        if not isinstance(messages, dict):
            messages = list(messages)
        return await self._call("append_many", messages, parent_id=parent_id, source=source)

    async def import_message(
        self, message: dict[str, Any], *, parent_id: str | None = None, created_at: Any = None
    ) -> AppendResult:
        """Store a message as is (docs/message-tree.md): no change event, never triggers compaction."""
        return await self._call("import_message", message, parent_id=parent_id, created_at=created_at)

    async def import_many(self, items: Iterable[tuple[dict[str, Any], Any, Any]]) -> list[AppendResult]:
        """Import many ``(message, parent_id, created_at)`` items in one transaction."""
        if not isinstance(items, dict):
            items = list(items)
        return await self._call("import_many", items)

    async def update(self, message: dict[str, Any]) -> dict[str, Any]:
        """Replace the stored content of ``message["id"]`` (docs/message-tree.md)."""
        return await self._call("update", message)

    async def delete(self, ids: str | Iterable[str], *, subtree: bool = False) -> list[str]:
        """Delete messages (docs/message-tree.md); returns the ids removed."""
        if not isinstance(ids, str):
            ids = list(ids)
        return await self._call("delete", ids, subtree=subtree)

    async def clear(self) -> None:
        """Remove this session's messages, compactions and index entries (runs stay)."""
        return await self._call("clear")

    # -- reading --------------------------------------------------------------------------
    async def get(self, id: str) -> dict[str, Any] | None:
        """The message with this id, or None."""
        return await self._call("get", id)

    async def latest_leaf(self) -> dict[str, Any] | None:
        """The latest leaf (docs/message-tree.md), or None in an empty session."""
        return await self._call("latest_leaf")

    async def branches(self, id: str) -> list[dict[str, Any]]:
        """Direct children of a message, oldest first."""
        return await self._call("branches", id)

    async def roots(self) -> list[dict[str, Any]]:
        """Messages without a parent, oldest first."""
        return await self._call("roots")

    async def nodes(self) -> list[TreeNode]:
        """The whole tree without message content, in write order."""
        return await self._call("nodes")

    async def get_many(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored messages of ``ids`` as ``{id: message}``; unknown ids are left out."""
        if not isinstance(ids, str):
            ids = list(ids)
        return await self._call("get_many", ids)

    async def tree(self) -> Tree:
        """The whole tree without content: nodes, latest leaf and compactions placed in it."""
        return await self._call("tree")

    async def path(self, leaf_id: str | None = None) -> PathView:
        """The path to ``leaf_id`` (default: the latest leaf) without content."""
        return await self._call("path", leaf_id)

    async def path_length(self, leaf_id: str | None = None) -> int:
        """Raw messages on the path to ``leaf_id`` (compaction ignored)."""
        return await self._call("path_length", leaf_id)

    async def path_slice(self, start: int, count: int, *, leaf_id: str | None = None) -> list[dict[str, Any]]:
        """The raw messages at depths ``start`` .. ``start + count - 1`` of the path to ``leaf_id``."""
        return await self._call("path_slice", start, count, leaf_id=leaf_id)

    async def count(self) -> int:
        """All messages in the session: ``len(session)`` of the sync API."""
        return await self._store._run(lambda: len(self._session()))

    def history(
        self, *, leaf_id: str | None = None, newest_first: bool = False, compacted: bool = True
    ) -> AsyncIterator[dict[str, Any]]:
        """Stream the path from the root to the leaf (docs/message-tree.md): ``async for m in session.history()``.

        Messages are read on the worker thread a batch at a time (16 first, then
        more, up to 512), no transaction open between batches; with
        ``newest_first=True``, stopping early reads no older batch. An unknown
        ``leaf_id`` raises ``MessageNotFound`` at the first iteration.
        """
        return self._store._stream(
            lambda: self._session().history(leaf_id=leaf_id, newest_first=newest_first, compacted=compacted),
            _FIRST_BATCH,
            _MOST_BATCH,
        )

    async def get_history(self, *, leaf_id: str | None = None, compacted: bool = True) -> list[dict[str, Any]]:
        """The path from the root to the leaf as a list (docs/message-tree.md), read as one state of the store."""
        return await self._call("get_history", leaf_id=leaf_id, compacted=compacted)

    async def snapshot(self) -> list[dict[str, Any]]:
        """A deep copy of the latest path, compaction applied."""
        return await self._call("snapshot")

    async def recent_history(
        self, max_bytes: int, *, min_messages: int = 1, leaf_id: str | None = None, compacted: bool = True
    ) -> RecentHistory:
        """The longest suffix of the path within ``max_bytes`` (docs/message-tree.md), compaction applied by default."""
        return await self._call(
            "recent_history", max_bytes, min_messages=min_messages, leaf_id=leaf_id, compacted=compacted
        )

    # -- compaction --------------------------------------------------------------------------
    def on_compaction(self, fn: Callable[..., Any]) -> AsyncSession:
        """Register ``fn(messages, ctx) -> CompactionResult | None`` (docs/compaction.md); chainable, not a coroutine.

        ``fn`` may be sync or async. It runs on the store's worker thread, as part
        of the append that crossed the threshold (or of :meth:`compact`); an async
        ``fn`` runs on an event loop of its own there, so it must not use objects
        bound to the application's loop. ``ctx.session`` is this ``AsyncSession``.
        """
        if not callable(fn):
            raise TypeError("on_compaction needs a callable")
        self.sync.on_compaction(_CompactionFunction(self, fn))
        return self

    def compact_after(self, tokens: int | None) -> AsyncSession:
        """Run the compaction function after appends once the path is above ``tokens``; chainable."""
        self.sync.compact_after(tokens)
        return self

    async def compactions(self) -> list[Compaction]:
        """Every compaction of this session, oldest first."""
        return await self._call("compactions")

    async def context_tokens(self, leaf_id: str | None = None) -> int:
        """Token estimate of the path as the model sees it (compaction applied)."""
        return await self._call("context_tokens", leaf_id)

    async def compact(self, *, leaf_id: str | None = None) -> Compaction | None:
        """Run the registered compaction function now (docs/compaction.md)."""
        return await self._call("compact", leaf_id=leaf_id)

    async def import_compaction(self, compaction: Compaction) -> bool:
        """Store a compaction exactly as given, as an import does."""
        return await self._call("import_compaction", compaction)

    # -- analysis, search, feed ---------------------------------------------------------------
    async def to_pandas(self):
        """This session's messages as a DataFrame with the columns of the ``messages`` view (docs/analysis.md)."""
        return await self._call("to_pandas")

    async def search(
        self, query: str, *, limit: int = 10, labels: str | Iterable[str] | None = None
    ) -> list[SearchHit]:
        """Full-text search in this session only (docs/search.md)."""
        return await self._call("search", query, limit=limit, labels=_listed(labels))

    # -- labels (docs/labels.md) -------------------------------------------------------------------
    async def add_label(
        self,
        message_id: str,
        tag: str,
        *,
        rating: float | None = None,
        note: str | None = None,
        author: str | None = None,
        target: str = "message",
        source: str = "human",
        scorer: str | None = None,
        rationale: str | None = None,
    ) -> Label:
        """Put a label on a message or on the branch ending at it (see :meth:`sessionkit.Session.add_label`)."""
        return await self._call(
            "add_label",
            message_id,
            tag,
            rating=rating,
            note=note,
            author=author,
            target=target,
            source=source,
            scorer=scorer,
            rationale=rationale,
        )

    async def remove_label(self, label_id: str) -> bool:
        """Remove a label of this session by id; whether there was one."""
        return await self._call("remove_label", label_id)

    async def labels(
        self,
        message_id: str | Iterable[str] | None = None,
        *,
        tag: str | Iterable[str] | None = None,
        author: str | None = None,
        min_rating: float | None = None,
        max_rating: float | None = None,
        target: str | None = None,
        source: str | None = None,
        scorer: str | None = None,
    ) -> list[Label]:
        """This session's labels matching every filter given, as :meth:`sessionkit.Session.labels`."""
        return await self._call(
            "labels",
            _listed(message_id),
            tag=_listed(tag),
            author=author,
            min_rating=min_rating,
            max_rating=max_rating,
            target=target,
            source=source,
            scorer=scorer,
        )

    async def mirror(
        self, target, *, transform: Callable[..., Any] | None = None, intercept: Callable[..., Any] | None = None
    ) -> Callable[[], None]:
        """Keep ``target`` equal to ``[transform(m) for m in get_history()]`` (docs/message-tree.md); returns ``stop``.

        ``target`` is updated on the worker thread, before the write's ``await``
        returns; ``transform`` and ``intercept`` are sync and run there too.
        """
        return await self._call("mirror", target, transform=transform, intercept=intercept)
