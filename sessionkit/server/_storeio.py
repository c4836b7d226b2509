"""Store calls off the event loop: reads on worker threads, writes through one ordered writer.

The store is synchronous (SQLite and DuckDB block anyway; PostgreSQL waits on the
network), and the server is one event loop: a store call made on the loop stops
every connection for its duration. So:

* reads go to a small thread pool: ``await io.read(fn, *args)``;
* writes are *jobs*, functions of the store run by one writer thread, in the order
  they were submitted. The writer takes every job waiting and runs them in one
  :meth:`~sessionkit.Store.transaction` (one commit for many: a busy server writes
  each session's events, records and messages in batches), then delivers each
  job's result. A batch that fails is run again one job per transaction, so one
  bad job fails alone. A job's result (or error) is known only once its
  transaction committed: ``await io.write(fn)`` returns after the commit.

The order is what crash safety rests on: a job submitted before another is
committed before it or with it, never after. The server submits a message's record
before the run can take the message, and a run's events before its end.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, ParamSpec, Protocol, TypeVar

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger("sessionkit.server")

__all__ = ["StoreIO", "WriterStopped"]

#: At most this many jobs go into one transaction.
BATCH = 500


class WriterStopped(RuntimeError):
    """A write submitted while the server is not running (or is stopping)."""


_P = ParamSpec("_P")
_T = TypeVar("_T")


class _Work(Protocol):
    """A queued write job whatever its result's type (the writer's queue holds every kind)."""

    def run(self) -> None: ...

    def settle(self, error: BaseException | None) -> None: ...

    def stop(self, error: BaseException) -> None: ...


class _Job(Generic[_T]):
    """A write job: ``fn`` runs on the writer thread (:meth:`run`, inside a transaction, and
    again alone if its batch failed); once the transaction is over, :meth:`settle` gives the
    result of its last run (or the error) to its future and to ``after``, on the loop."""

    __slots__ = ("fn", "future", "after", "result")

    def __init__(self, fn: Callable[[], _T], after: Callable[[_T], object] | None) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self.after = after

    def run(self) -> None:
        self.result = self.fn()

    def stop(self, error: BaseException) -> None:
        """The job will not be settled (the writer stopped): its future fails with ``error``."""
        if not self.future.done():
            self.future.set_exception(error)

    def settle(self, error: BaseException | None) -> None:
        # a job whose awaiting task was cancelled still ran: its future is cancelled
        # (asyncio.wrap_future passes the cancellation on) and takes no result
        if error is None:
            if not self.future.done():
                self.future.set_result(self.result)
            if self.after is not None:
                try:
                    self.after(self.result)
                except Exception:
                    log.exception("sessionkit server: a write's follow-up failed")
        else:
            if not self.future.done():
                self.future.set_exception(error)
            if self.after is not None:
                log.error("sessionkit server: a write failed: %s: %s", type(error).__name__, error)


class StoreIO:
    """The reads and the ordered, batched writes of one server on one store."""

    def __init__(self, store: Store, *, readers: int = 4) -> None:
        self.store = store
        self._n_readers = readers
        self._readers: concurrent.futures.ThreadPoolExecutor | None = None
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._jobs: deque[_Work] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self.batches = 0  # transactions committed (for tests and benchmarks)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the writer on the running loop (again after :meth:`close`)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._readers = concurrent.futures.ThreadPoolExecutor(self._n_readers, thread_name_prefix="sessionkit-read")
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sessionkit-write")
        self._wake = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name="sessionkit store writer")

    async def close(self) -> None:
        """Write what was submitted, then stop the writer and the reader threads."""
        if self._task is None:
            return
        try:
            await self.flush()
        finally:
            task, self._task = self._task, None
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            readers, writer, self._readers, self._writer = self._readers, self._writer, None, None
            for pool in (readers, writer):
                if pool is not None:
                    pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ reads

    async def read(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``fn(*args, **kwargs)`` on a reader thread."""
        loop = asyncio.get_running_loop()
        if self._readers is None:  # not serving (yet, or any more): read on a default worker thread
            return await asyncio.to_thread(fn, *args, **kwargs)
        return await loop.run_in_executor(self._readers, lambda: fn(*args, **kwargs))

    # ------------------------------------------------------------------ writes

    def submit(
        self, fn: Callable[[], _T], *, after: Callable[[_T], object] | None = None
    ) -> concurrent.futures.Future[_T]:
        """Queue a write job (from the loop's thread or any other); returns its future.

        ``after(result)`` runs on the loop once the job's transaction committed.
        """
        job = _Job(fn, after)
        if self._loop is None or self._task is None:
            job.stop(WriterStopped("the server's store writer is not running"))
            return job.future
        if threading.get_ident() == self._loop_thread:
            self._enqueue(job)
        else:
            try:
                self._loop.call_soon_threadsafe(self._enqueue, job)
            except RuntimeError:  # the loop is closed
                job.stop(WriterStopped("the server stopped"))
        return job.future

    async def write(self, fn: Callable[[], _T]) -> _T:
        """Run a write job and return its result once committed."""
        return await asyncio.wrap_future(self.submit(fn))

    async def flush(self) -> None:
        """Return once every job submitted so far is committed (or failed)."""
        if self._task is None:
            return
        try:
            await asyncio.wrap_future(self.submit(lambda: None))
        except Exception:  # a closed store: nothing more can be written anyway
            pass

    def _enqueue(self, job: _Work) -> None:
        self._jobs.append(job)
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._jobs:
                batch = [self._jobs.popleft() for _ in range(min(BATCH, len(self._jobs)))]
                try:
                    outcomes = await loop.run_in_executor(self._writer, self._commit, batch)
                except asyncio.CancelledError:
                    # stopping: the batch is being written on the writer thread; let it finish
                    for job in batch:
                        job.stop(WriterStopped("the server stopped"))
                    raise
                for job, error in zip(batch, outcomes):
                    job.settle(error)

    def _commit(self, batch: list[_Work]) -> list[BaseException | None]:
        """Run a batch in one transaction; on failure, each job alone. Each job's error, or None
        for a job whose transaction committed (the job keeps its result)."""
        store = self.store
        try:
            with store.transaction():
                for job in batch:
                    job.run()
            self.batches += 1
            return [None] * len(batch)
        except BaseException as exc:
            if len(batch) == 1 or not isinstance(exc, Exception):
                return [exc] * len(batch)
        outcomes: list[BaseException | None] = []
        for job in batch:
            try:
                with store.transaction():
                    job.run()
                self.batches += 1
                outcomes.append(None)
            except Exception as exc:
                outcomes.append(exc)
        return outcomes
