"""Session handles (docs/stores.md): the same object for an id while it is in use, settings kept,
and no memory held for the handles of sessions nobody uses any more.

An import of a million one-session lines asks for a million handles; a store that kept
each of them (about 150 bytes with its cache entry) would grow by 150 MB doing so.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
import weakref

import pytest
from helpers import msg

import sessionkit as sk


def test_a_handle_in_use_is_the_same_object(store):
    a = store.session("a")
    assert store.session("a") is a
    a.append(msg("m1"))
    assert store.session("a") is a and len(store.session("a")) == 1


@pytest.mark.slow
def test_a_dropped_handle_is_freed(store):
    ref = weakref.ref(store.session("gone"))
    gc.collect()
    assert ref() is None
    again = store.session("gone")  # a new handle of the same session, which works as before
    again.append(msg("m1"))
    assert store.session("gone") is again and again.get("m1") is not None


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_asking_for_many_sessions_holds_no_memory(store):
    store.session("warm-up")  # the cache's first allocation is not what is measured
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(10_000):
            store.session(f"session-{i:08d}")
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Dropped handles leave well under 1 KiB traced; handles kept alive would hold about
    # 2.8 MB here (some 280 bytes each), ten times the limit.
    assert grown < 256 * 1024, f"{grown:,} bytes held after 10,000 handles were dropped"


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_a_configured_handle_is_kept_with_its_settings(store):
    calls = []
    ref = weakref.ref(store.session("c").on_compaction(lambda m, ctx: calls.append(ctx.leaf_id)))
    store.session("t").compact_after(0)
    gc.collect()
    assert ref() is not None
    store.session("c").compact_after(0)
    gc.collect()
    store.session("c").append(msg("c1", "word " * 20))
    assert calls == ["c1"]
    store.session("t").append(msg("t1", "word " * 20))  # a threshold but no function: nothing runs
    assert calls == ["c1"]


def test_threads_asking_for_one_id_get_one_handle(store):
    got: list = []
    barrier = threading.Barrier(8)

    def ask():
        barrier.wait()
        got.append(store.session("shared"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(h is got[0] for h in got)


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_async_handles_are_freed_and_their_settings_kept(tmp_path):
    async def main():
        async with sk.aio.open_store(tmp_path / "aio.db") as store:
            a = store.session("a")
            assert store.session("a") is a
            ref = weakref.ref(store.session("gone"))
            gc.collect()
            assert ref() is None
            calls = []
            store.session("c").on_compaction(lambda m, ctx: calls.append(ctx.leaf_id)).compact_after(0)
            gc.collect()
            await store.session("c").append(msg("c1", "word " * 20))
            assert calls == ["c1"]

    asyncio.run(main())
