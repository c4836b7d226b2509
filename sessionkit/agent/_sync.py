"""Run a coroutine to completion from sync code, even inside a running event loop.

A notebook cell runs inside Jupyter's event loop, where ``asyncio.run`` refuses
to start. There the coroutine runs on a worker thread with its own loop and the
caller's thread waits for it; elsewhere it runs on a fresh loop in the calling
thread. Ctrl-C (KeyboardInterrupt) while waiting cancels the coroutine and
then re-raises.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["run_coroutine_sync"]


def run_coroutine_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run ``factory()`` (a coroutine) to completion and return its result or raise its error."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(factory))

    started: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = []
    results: list[T] = []
    errors: list[BaseException] = []
    ready = threading.Event()

    def worker() -> None:
        with asyncio.Runner() as runner:
            loop = runner.get_loop()
            task = loop.create_task(_as_coroutine(factory))
            started.append((loop, task))
            ready.set()
            try:
                results.append(runner.run(_wait(task)))
            except BaseException as exc:  # handed to the caller's thread
                errors.append(exc)

    thread = threading.Thread(target=worker, name="sessionkit-run-sync", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.05)
    except KeyboardInterrupt:
        ready.wait()
        loop, task = started[0]
        loop.call_soon_threadsafe(task.cancel)
        thread.join()
        raise
    if errors:
        raise errors[0]
    return results[0]


async def _as_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


async def _wait(task: asyncio.Task[T]) -> T:
    return await task
