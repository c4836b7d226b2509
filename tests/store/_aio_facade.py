"""A sync facade over ``sk.aio``: the store conformance suite, run through the async API.

Each call of the facade runs the matching coroutine of the :class:`~sessionkit.aio.AsyncStore`
or :class:`~sessionkit.aio.AsyncSession` on a background event loop and returns its
result or raises its error; the facade adds no behaviour of its own. What it maps:

- a coroutine method -> the same method, awaited;
- ``history()`` and ``scan()`` (async iterators) -> sync iterators pulling one item per
  ``next``; the first item is pulled at the call, so an unknown ``leaf_id`` raises there
  as in the sync API (an async iterator can only raise at its first ``__anext__``);
- ``len(session)`` -> ``await session.count()``;
- ``with store.transaction()`` -> ``async with store.transaction()``: all the calls of one
  thread run in one ``contextvars.Context``, as the statements of one task do, so a
  transaction entered by a thread is the one its later calls join;
- ``on_compaction(fn)`` -> ``fn`` sees ``ctx.session`` as the facade session (the async
  API hands it the ``AsyncSession``);
- a call made on the store's worker thread (a subscriber or compaction function the
  suite registered calls the store again) runs on a private loop of that thread, where
  the async API runs it directly: the worker cannot wait for itself.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import dataclasses
import functools
import inspect
import threading
from typing import Any

import sessionkit as sk


class Runner:
    """A background event loop thread that runs coroutines for sync callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="aio-facade-loop", daemon=True)
        self.thread.start()
        self._contexts = threading.local()

    def run(self, coro) -> Any:
        if threading.current_thread().name.startswith("sessionkit-aio"):  # the store's worker thread
            return asyncio.run(coro)
        context = getattr(self._contexts, "context", None)
        if context is None:
            context = self._contexts.context = contextvars.Context()
        done: concurrent.futures.Future = concurrent.futures.Future()

        def settle(task: asyncio.Task) -> None:
            if task.cancelled():
                done.cancel()
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())

        def start() -> None:
            self.loop.create_task(coro, context=context).add_done_callback(settle)

        self.loop.call_soon_threadsafe(start)
        return done.result()

    def stop(self) -> None:
        async def finish() -> None:
            await self.loop.shutdown_asyncgens()

        asyncio.run_coroutine_threadsafe(finish(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


class SyncIterator:
    """A sync iterator over an async one, one item per ``next``."""

    def __init__(self, runner: Runner, agen) -> None:
        self._runner = runner
        self._agen = agen
        self._ahead: collections.deque = collections.deque()
        self._done = False
        self._pull()

    def _pull(self) -> None:
        async def pull():  # __anext__ called on the loop, so the loop's finalizer hook applies
            return await self._agen.__anext__()

        try:
            self._ahead.append(self._runner.run(pull()))
        except StopAsyncIteration:
            self._done = True

    def __iter__(self) -> SyncIterator:
        return self

    def __next__(self) -> Any:
        if not self._ahead and not self._done:
            self._pull()
        if self._ahead:
            return self._ahead.popleft()
        raise StopIteration

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._runner.run(self._aclose())

    async def _aclose(self) -> None:
        await self._agen.aclose()


def _sync_method(runner: Runner, method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        return runner.run(method(*args, **kwargs))

    return call


class SyncSession:
    """A :class:`sessionkit.Session` look-alike over an :class:`~sessionkit.aio.AsyncSession`."""

    def __init__(self, store: SyncStore, aio_session) -> None:
        self._facade_store = store
        self._runner = store._runner
        self.aio = aio_session

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.aio, name)
        if inspect.iscoroutinefunction(value):
            return _sync_method(self._runner, value)
        return value

    def __repr__(self) -> str:
        return f"<facade of {self.aio!r}>"

    @property
    def store(self) -> SyncStore:
        return self._facade_store

    def __len__(self) -> int:
        return self._runner.run(self.aio.count())

    def history(self, **kwargs) -> SyncIterator:
        return SyncIterator(self._runner, self.aio.history(**kwargs))

    def on_compaction(self, fn) -> SyncSession:
        facade = self

        def with_facade_session(messages, ctx):
            return fn(messages, dataclasses.replace(ctx, session=facade))

        self.aio.on_compaction(with_facade_session if callable(fn) else fn)
        return self

    def compact_after(self, tokens) -> SyncSession:
        self.aio.compact_after(tokens)
        return self


class SyncStore:
    """A :class:`sessionkit.Store` look-alike over an :class:`~sessionkit.aio.AsyncStore`."""

    def __init__(self, runner: Runner, aio_store) -> None:
        self._runner = runner
        self.aio = aio_store
        self._handles: dict[int, SyncSession] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.aio, name)
        if inspect.iscoroutinefunction(value):
            return _sync_method(self._runner, value)
        return value

    def __repr__(self) -> str:
        return f"<facade of {self.aio!r}>"

    @property
    def _engine(self):
        """The engine behind, for the suite's raw schema checks (``raw_sql``)."""
        return self.aio.sync._engine

    @property
    def search_candidates(self) -> int:
        return self.aio.search_candidates

    @search_candidates.setter
    def search_candidates(self, value: int) -> None:
        self.aio.search_candidates = value

    def __enter__(self) -> SyncStore:
        self._runner.run(self.aio.__aenter__())
        return self

    def __exit__(self, *exc) -> None:
        self._runner.run(self.aio.__aexit__(*exc))

    def close(self) -> None:
        self._runner.run(self.aio.close())

    def session(self, session_id: str = "") -> SyncSession:
        handle = self.aio.session(session_id)
        facade = self._handles.get(id(handle))
        if facade is None:
            facade = self._handles[id(handle)] = SyncSession(self, handle)
        return facade

    def scan(self, kind, **kwargs) -> SyncIterator:
        return SyncIterator(self._runner, self.aio.scan(kind, **kwargs))

    def transaction(self):
        return _SyncTransaction(self)


class _SyncTransaction:
    def __init__(self, store: SyncStore) -> None:
        self._store = store
        self._cm = store.aio.transaction()

    def __enter__(self) -> SyncStore:
        self._store._runner.run(self._cm.__aenter__())
        return self._store

    def __exit__(self, exc_type, exc, tb) -> bool:
        return self._store._runner.run(self._cm.__aexit__(exc_type, exc, tb))


def open_facade(runner: Runner, target: Any, **options: Any) -> SyncStore:
    """Open ``target`` with ``sk.aio.open_store`` and wrap it; the opening's error is raised here."""
    store = sk.aio.open_store(target, **options)

    async def opened():
        return await store

    return SyncStore(runner, runner.run(opened()))
