"""``sk.aio``: how the async API wraps the sync store.

Here: the event loop is never blocked, one worker thread per store, opening and
closing, errors of the sync API's types, streaming, async subscribers and compaction
functions, many tasks at once, transactions shared by tasks (all or nothing, other
tasks wait and never join), cancellation, and the API kept in step with the sync one.
``test_aio_wrapping.py`` calls every member of the async classes on each store variant
and compares its result with the sync API's.

The store contract itself is proved once per engine by the conformance suite
(``test_conformance.py``); the async API adds only the wrapping, which these two files
prove. The conformance suite no longer runs a second time through a sync facade over
``sk.aio`` (formerly ``test_conformance_aio.py`` and ``_aio_facade.py``: the whole suite
on a SQLite file, SQLite in memory, a DuckDB file and PostgreSQL, 993 tests running the
same store code again). Those four variants are the ones the engine-parametrised tests
here and in ``test_aio_wrapping.py`` run on (``new_target``).

Waiting is done on states, events, counts and the order of calls, never on elapsed time
(``await asyncio.sleep(0)`` below only lets the other tasks take their turn).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading

import pytest
from helpers import msg, wait_until

import sessionkit as sk
from sessionkit.aio import AsyncSession, AsyncStore

from .pg_cluster import new_store_url


def run(coro):
    return asyncio.run(coro)


def ids(messages) -> list[str]:
    return [m["id"] for m in messages]


#: The store variants of the engine-parametrised tests (the slow mark as in tests/conftest.py).
AIO_VARIANTS = [
    "sqlite-file",
    "sqlite-memory",
    pytest.param("duckdb-file", marks=pytest.mark.slow),
    pytest.param("postgresql", marks=pytest.mark.slow),
]


@pytest.fixture(params=AIO_VARIANTS)
def new_target(request, tmp_path):
    """``new_target()``: a fresh store target of one variant per call (a file, ``:memory:``, a new
    PostgreSQL schema when a server can be had)."""
    variant = request.param
    if variant == "duckdb-file":
        pytest.importorskip("duckdb")
    if variant == "postgresql":
        request.getfixturevalue("pg_url")  # skips without a server (fails under CI=true)
    names = itertools.count()

    def new():
        if variant == "sqlite-memory":
            return ":memory:"
        if variant == "postgresql":
            return new_store_url()
        return tmp_path / f"store{next(names)}{'.db' if variant == 'sqlite-file' else '.duckdb'}"

    return new


@pytest.fixture
def target(new_target):
    """A store target on each variant."""
    return new_target()


class Boom(Exception):
    pass


async def turns_until(predicate, what: str, most: int = 10_000) -> None:
    """Let the other tasks take turns (``asyncio.sleep(0)``) until ``predicate()`` holds."""
    for _ in range(most):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{what}: not after {most} turns of the event loop")


# ---------------------------------------------------------------------------
# the API: a coroutine twin of every Store and Session method


#: Sync members whose async twin is deliberately not a coroutine function.
NOT_COROUTINES = {
    "session",  # a cached handle, no I/O (S2)
    "transaction",  # an async context manager
    "scan",
    "history",  # async iterators
    "on_compaction",
    "compact_after",  # chainable setters
}
PROPERTIES = {
    "path",
    "closed",
    "capabilities",
    "settings",
    "store",
    "run_log",
    "can_branch",
    "session_records",
    "coordination",
}


def _public(cls) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


@pytest.mark.parametrize("sync_cls, async_cls", [(sk.Store, AsyncStore), (sk.Session, AsyncSession)])
def test_every_sync_method_has_a_twin_of_the_same_name_and_arguments(sync_cls, async_cls):
    for name in _public(sync_cls):
        assert hasattr(async_cls, name), f"{async_cls.__name__} has no twin of {sync_cls.__name__}.{name}"
        sync_member = inspect.getattr_static(sync_cls, name)
        if isinstance(sync_member, property):
            assert name in PROPERTIES and isinstance(inspect.getattr_static(async_cls, name), property), name
            continue
        twin = getattr(async_cls, name)
        if name in NOT_COROUTINES:
            assert not inspect.iscoroutinefunction(twin), name
        else:
            assert inspect.iscoroutinefunction(twin), f"{async_cls.__name__}.{name} is not a coroutine function"
        expected = list(inspect.signature(getattr(sync_cls, name)).parameters.values())
        got = list(inspect.signature(twin).parameters.values())
        assert [(p.name, p.kind, p.default) for p in got] == [(p.name, p.kind, p.default) for p in expected], name
    assert inspect.iscoroutinefunction(AsyncSession.count)  # len(session)
    assert inspect.iscoroutinefunction(AsyncStore.close)


def test_sk_aio_is_lazy_and_pinned():
    import subprocess
    import sys

    code = (
        "import sys, sessionkit; print('sessionkit.aio' in sys.modules); "
        "sessionkit.aio; print('sessionkit.aio' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    assert sk.aio.open_store is sk.aio.open_store and "aio" in sk.__all__


# ---------------------------------------------------------------------------
# the event loop is never blocked


N_BIG = 20_000


@pytest.fixture(scope="module")
def big_store(tmp_path_factory):
    """A SQLite file holding one session of 20,000 messages on one path (built with import_many)."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    with sk.open_store(path) as store:
        s = store.session("big")
        parent = None
        for start in range(0, N_BIG, 10_000):
            items = []
            for i in range(start, start + 10_000):
                mid = f"m{i}"
                role = "user" if i % 2 == 0 else "assistant"
                items.append((msg(mid, f"message number {i} with a few words of text", role), parent, None))
                parent = mid
            s.import_many(items)
    return path


class Ticker:
    """A task counting the event loop's turns: one tick per ``await asyncio.sleep(0)``."""

    def __init__(self) -> None:
        self.ticks = 0
        self._stop = False
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> Ticker:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop = True
        await self._task

    async def _run(self) -> None:
        while not self._stop:
            await asyncio.sleep(0)
            self.ticks += 1

    def wait_for_ticks(self, n: int, timeout: float = 60) -> int:
        """Block this thread until the loop has ticked ``n`` more times; the count then."""
        goal = self.ticks + n
        wait_until(
            lambda: self.ticks >= goal, timeout=timeout, interval=0.001, what=f"the event loop to tick {n} times"
        )
        return self.ticks


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_the_loop_keeps_ticking_during_a_large_read(big_store):
    """A 20,000-message ``get_history()`` and an ``async for`` over ``history()`` run on the
    worker thread while a task on the loop keeps ticking -- shown by order, not by time:
    the engine's reads are made to wait, on the worker, before and after reading, until
    the loop has ticked 50 more times. A read on the loop's thread could never pass such a
    wait (shown at the end: the same wait on the loop gets no tick at all), and the sync
    API called on the loop leaves the ticker at the same count for its whole read.
    """
    per_gate, max_gates = 50, 6

    async def main():
        async with sk.aio.open_store(big_store) as store, Ticker() as ticker:
            s = store.session("big")
            eng = store.sync._engine
            gates: list[int] = []  # the tick count at each gate passed on the worker

            def gated(read):
                def call(*args, **kwargs):
                    if len(gates) < max_gates:
                        gates.append(ticker.wait_for_ticks(per_gate))
                    result = read(*args, **kwargs)
                    if len(gates) < max_gates:
                        gates.append(ticker.wait_for_ticks(per_gate))
                    return result

                return call

            async def whole():
                history = await s.get_history()
                assert history[-1]["id"] == f"m{N_BIG - 1}"
                return len(history)

            async def stream():
                n = 0
                async for m in s.history():
                    assert m["id"] == f"m{n}"
                    n += 1
                return n

            results = {}
            # the reads of get_history() and of history(): a path's runs where the engine tells
            # them (rows_between), else the walk and the batches of contents
            reads = ("rows_between", "walk_contents", "contents")
            for name in reads:
                setattr(eng, name, gated(getattr(eng, name)))
            try:
                for label, read in (("await s.get_history()", whole), ("async for m in s.history()", stream)):
                    gates.clear()
                    before = ticker.ticks
                    count = await read()
                    results[label] = (count, list(gates), ticker.ticks - before)
            finally:
                for name in reads:
                    delattr(eng, name)

            before = ticker.ticks
            count = len(s.sync.get_history())  # the sync API on the loop: no tick until it returns
            results["sync get_history() on the loop"] = (count, [], ticker.ticks - before)

            before = ticker.ticks
            with pytest.raises(AssertionError, match="tick"):  # a gate on the loop's thread never opens
                ticker.wait_for_ticks(1, timeout=0.2)
            assert ticker.ticks == before
            return results

    results = run(main())
    for label, (count, gates, ticks) in results.items():
        print(
            f"\n{label}: {count} messages; {len(gates)} gates passed; the loop ticked {ticks} times meanwhile", end=""
        )
    print()
    for label in ("await s.get_history()", "async for m in s.history()"):
        count, gates, ticks = results[label]
        assert count == N_BIG
        assert len(gates) >= 2 and ticks >= per_gate * len(gates)
    count, _, ticks = results["sync get_history() on the loop"]
    assert count == N_BIG and ticks == 0


def test_calls_run_on_one_worker_thread_per_store(tmp_path):
    async def main():
        loop_thread = threading.get_ident()
        seen = []
        async with sk.aio.open_store(tmp_path / "a.db") as a, sk.aio.open_store(tmp_path / "b.db") as b:
            for store in (a, b):
                s = store.session("s")

                def where(m, store=store):
                    seen.append((store, threading.current_thread()))
                    return m

                await s.mirror([], transform=where)
                await s.append(msg("x"))
                await s.append_many([msg("y"), msg("z")])
        threads = {store: {t for st, t in seen if st is store} for store in (a, b)}
        assert all(len(ts) == 1 for ts in threads.values())  # one thread per store
        (ta,), (tb,) = threads.values()
        assert ta is not tb and loop_thread not in (ta.ident, tb.ident)
        assert ta.name.startswith("sessionkit-aio")

    run(main())


# ---------------------------------------------------------------------------
# opening and closing


def test_open_store_is_awaitable_an_async_context_manager_or_used_at_once(tmp_path):
    async def main():
        store = await sk.aio.open_store(tmp_path / "x.db")
        assert isinstance(store, AsyncStore) and store.settings.engine == "sqlite" and not store.closed
        await store.session("s").append(msg("a"))
        await store.close()
        await store.close()  # idempotent
        assert store.closed

        queued = sk.aio.open_store(tmp_path / "x.db")  # calls queue behind the opening
        assert [m["id"] for m in await queued.session("s").get_history()] == ["a"]
        assert isinstance(queued.sync, sk.Store) and isinstance(queued.session("s").sync, sk.Session)
        await queued.close()

        async with sk.aio.open_store(tmp_path / "x.db") as again:
            assert await again.session("s").count() == 1
        with pytest.raises(sk.StoreClosed):
            async with again:
                pass

    run(main())


def test_an_opening_error_is_raised_where_the_store_is_awaited(tmp_path):
    async def main():
        with pytest.raises(ValueError, match="cannot tell the engine"):
            await sk.aio.open_store("notes.txt")
        with pytest.raises(ValueError, match="does not exist"):
            async with sk.aio.open_store(tmp_path / "missing.db", create=False):
                pass

        def workers():
            return {t for t in threading.enumerate() if t.name.startswith("sessionkit-aio")}

        before = workers()
        bad = sk.aio.open_store("notes.txt")
        with pytest.raises(ValueError):
            await bad.list_sessions()
        with pytest.raises(ValueError):
            async for _ in bad.session("s").history():
                pass
        # a store that never opened keeps no worker thread
        wait_until(lambda: not workers() - before, what="the worker of a store that never opened to end")
        await bad.close()  # nothing to close, no error
        with pytest.raises(sk.StoreClosed):
            await bad.stats()

    run(main())


def test_sync_attributes_before_the_opening_ends(tmp_path):
    started, release = threading.Event(), threading.Event()

    def slow_open():
        started.set()
        assert release.wait(60)
        return sk.open_store(tmp_path / "slow.db")

    async def main():
        store = AsyncStore(slow_open)
        assert await asyncio.to_thread(started.wait, 60)
        with pytest.raises(sk.UsageError, match="await it first"):
            store.sync  # noqa: B018 - on the loop it would block
        assert "opening" in repr(store)
        engine = asyncio.create_task(asyncio.to_thread(lambda: store.settings.engine))  # off the loop it waits
        for _ in range(10):
            await asyncio.sleep(0)
        assert not engine.done()  # (it cannot end before the opening does)
        release.set()
        assert await engine == "sqlite"
        await store.close()

    run(main())


def test_after_close_every_call_raises_StoreClosed(target):
    async def main():
        store = await sk.aio.open_store(target)
        s = store.session("s")
        await s.append(msg("a"))
        await store.close()
        for call in (
            lambda: s.append(msg("b")),
            s.get_history,
            store.stats,
            store.list_sessions,
            lambda: store.subscribe(print),
            lambda: store.run_log.begin("s", "r", None),
        ):
            with pytest.raises(sk.StoreClosed):
                await call()
        with pytest.raises(sk.StoreClosed):
            store.session("s")
        with pytest.raises(sk.StoreClosed):
            async for _ in s.history():
                pass
        with pytest.raises(sk.StoreClosed):
            async for _ in store.scan("nodes"):
                pass
        with pytest.raises(sk.StoreClosed):
            async with store.transaction():
                pass

    run(main())


def test_a_store_works_from_several_event_loops(tmp_path):
    store = sk.aio.open_store(tmp_path / "loops.db")
    run(store.session("s").append(msg("a")))
    run(store.session("s").append(msg("b")))  # another loop: futures are not bound to one

    def in_a_thread():
        return asyncio.run(store.session("s").get_history())

    result: list = []
    t = threading.Thread(target=lambda: result.append(in_a_thread()))
    t.start()
    t.join()
    assert [m["id"] for m in result[0]] == ["a", "b"]
    run(store.close())


# ---------------------------------------------------------------------------
# errors: the same types as the sync API


def test_errors_are_the_sync_apis_types(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            s = store.session("s")
            await s.append(msg("a"))
            with pytest.raises(sk.MessageNotFound):
                await s.append(msg("b"), parent_id="ghost")
            with pytest.raises(sk.MessageNotFound):
                await s.get_history(leaf_id="ghost")
            with pytest.raises(sk.MessageNotFound):
                async for _ in s.history(leaf_id="ghost"):
                    pass
            with pytest.raises(sk.InvalidMessage, match="role"):
                await s.append({"id": "x", "parts": []})
            with pytest.raises(sk.InvalidMessage):
                await s.append_many([msg("ok"), {"id": "", "role": "user", "parts": []}])
            with pytest.raises(TypeError):
                await s.append("not a message")
            with pytest.raises(TypeError):
                store.session(42)
            with pytest.raises(sk.SessionNotFound):
                await store.delete_session("nobody")
            with pytest.raises(sk.UsageError):
                await s.compact()
            with pytest.raises(ValueError):
                async for _ in store.scan("tables"):
                    pass
            await store.run_log.begin("s", "r1", None)
            with pytest.raises(sk.SessionKitError):  # a run id is unique
                await store.run_log.begin("s", "r1", None)
            assert not (await s.append(msg("a", "again"))).inserted  # a duplicate id: the first write wins
            assert [m["id"] for m in await s.get_history()] == ["a"]  # nothing stored by the failures

    run(main())


def test_an_error_raised_on_the_worker_reaches_the_caller_unchanged(tmp_path):
    sync_error = None
    with sk.open_store(tmp_path / "sync.db") as st:
        try:
            st.session("s").append(msg("a"), parent_id="ghost")
        except sk.MessageNotFound as exc:
            sync_error = exc

    async def main():
        async with sk.aio.open_store(tmp_path / "async.db") as store:
            boom = RuntimeError("mirror target broke")

            class Target:
                def get(self):
                    return []

                def set(self, value):
                    raise boom

            with pytest.raises(RuntimeError) as info:
                await store.session("s").mirror(Target())
            assert info.value is boom  # the very exception object
            with pytest.raises(sk.MessageNotFound) as info:
                await store.session("s").append(msg("a"), parent_id="ghost")
            assert type(info.value) is type(sync_error) and str(info.value) == str(sync_error)

    run(main())


# ---------------------------------------------------------------------------
# streaming


def test_history_streams_in_batches_and_stopping_early_reads_no_more(tmp_path):
    async def main():
        async with sk.aio.open_store(tmp_path / "h.db") as store:
            s = store.session("s")
            await s.append_many([msg(f"m{i}") for i in range(2_000)], parent_id=None)
            eng = store.sync._engine  # count the content the engine reads
            read = []
            original = eng.walk_pages

            def counting(*args, **kwargs):
                for page in original(*args, **kwargs):
                    read.append(len(page))
                    yield page

            eng.walk_pages = counting
            try:
                got = []
                async for m in s.history(newest_first=True):
                    got.append(m["id"])
                    if len(got) == 3:
                        break
                assert got == ["m1999", "m1998", "m1997"]
                assert sum(read) <= 32, read  # the first page or two, not the path
            finally:
                del eng.walk_pages
            ids = [m["id"] async for m in s.history()]
            assert ids == [f"m{i}" for i in range(2_000)]
            # a write between two batches neither blocks nor fails
            stream = s.history()
            first = await anext(stream)
            await s.append(msg("during"))
            rest = [m["id"] async for m in stream]
            assert first["id"] == "m0" and len(rest) == 1_999
            assert (await s.latest_leaf())["id"] == "during"

    run(main())


def test_scan_batches(tmp_path):
    async def main():
        async with sk.aio.open_store(tmp_path / "scan.db") as store:
            for sid in ("a", "b"):
                await store.session(sid).append_many([msg(f"{sid}{i}") for i in range(5)])
            batches = [b async for b in store.scan("messages", batch_size=3)]
            assert [len(b) for b in batches] == [3, 3, 3, 1]
            assert [m["id"] for b in batches for _, _, m in b] == [f"{s}{i}" for s in "ab" for i in range(5)]
            with pytest.raises(ValueError):
                store.scan("nodes", batch_size=0)  # arguments are checked at the call

    run(main())


# ---------------------------------------------------------------------------
# change feed


def test_async_and_sync_subscribers_receive_events(target, caplog):
    async def main():
        async with sk.aio.open_store(target) as store:
            loop_thread = threading.get_ident()
            got_async, got_sync = [], []
            arrived = asyncio.Event()

            async def on_change(event):
                await asyncio.sleep(0)
                got_async.append((event.type, event.message_ids, threading.get_ident()))
                if len(got_async) == 4:
                    arrived.set()

            async def broken(event):
                raise RuntimeError("async subscriber bug")

            await store.subscribe(broken)
            unsubscribe = await store.subscribe(on_change)
            await store.subscribe(lambda e: got_sync.append((e.type, threading.get_ident())))
            s = store.session("s")
            result = await s.append(msg("a"))
            assert result.inserted  # the raising subscriber did not stop the write
            assert got_sync == [("append", got_sync[0][1])] and got_sync[0][1] != loop_thread  # ran on the worker
            await s.append_many([msg("b"), msg("c")])
            await s.update(msg("a", "edited"))
            await asyncio.wait_for(arrived.wait(), 60)
            assert [(t, ids) for t, ids, _ in got_async] == [
                ("append", ("a",)),
                ("append", ("b",)),
                ("append", ("c",)),
                ("update", ("a",)),
            ]
            assert {thread for _, _, thread in got_async} == {loop_thread}  # async ones run on the loop
            unsubscribe()
            # A subscriber added now runs after every older one still subscribed (tasks start in
            # the order the worker scheduled them): once it has run twice, on_change would have
            # run for "d" too.
            later = asyncio.Event()

            async def sentinel(event):
                await asyncio.sleep(0)
                await asyncio.sleep(0)
                later.set()

            await store.subscribe(sentinel)
            await s.append(msg("d"))
            await asyncio.wait_for(later.wait(), 60)
            assert len(got_async) == 4 and [t for t, _ in got_sync] == ["append"] * 3 + ["update", "append"]
            assert [m["id"] for m in await s.get_history()] == ["a", "b", "c", "d"]

    with caplog.at_level(logging.ERROR, logger="sessionkit"):
        run(main())
    assert "async subscriber bug" in caplog.text and "broken" in caplog.text


def test_a_sync_subscriber_may_use_the_async_api_from_the_worker(tmp_path):
    """Callbacks run on the worker thread; a call back into the store from there runs directly."""

    async def main():
        async with sk.aio.open_store(tmp_path / "re.db") as store:
            s = store.session("s")
            counts = []
            await store.subscribe(lambda e: counts.append(asyncio.run(s.count())))
            await s.append_many([msg("a"), msg("b")])
            assert counts == [2, 2]

    run(main())


# ---------------------------------------------------------------------------
# compaction


def test_async_compaction_function_sees_the_async_session(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            s = store.session("s")
            seen = []

            async def fn(messages, ctx):
                seen.append(
                    (ctx.session, len(await ctx.session.get_history()), ctx.leaf_id, threading.current_thread().name)
                )
                await asyncio.sleep(0)
                return sk.CompactionResult(messages[0]["id"], messages[-2]["id"], "summary")

            assert s.on_compaction(fn).compact_after(40) is s
            for i in range(6):
                await s.append(msg(f"m{i}", "word " * 20))
            assert seen and seen[0][0] is s and seen[0][3].startswith("sessionkit-aio")  # on the worker
            history = await s.get_history()
            assert history[0]["id"].startswith("compaction:")
            comps = await s.compactions()
            assert comps and comps[0].summary == "summary"

            async def summarize(prompt):
                await asyncio.sleep(0)
                return "by create_compact_function"

            t = store.session("t").on_compaction(
                sk.create_compact_function(summarize, keep_recent_tokens=0, protect_head=1)
            )
            await t.append_many([msg(f"t{i}", "some words " * 10) for i in range(6)])
            comp = await t.compact()
            assert comp.summary == "by create_compact_function" and comp.from_id == "t1"

    run(main())


# ---------------------------------------------------------------------------
# many tasks at once


def test_many_tasks_at_once_on_one_store(target):
    """24 tasks write chains into 4 sessions while 4 more read them: every result is right."""

    async def main():
        async with sk.aio.open_store(target) as store:

            async def writer(i):
                s = store.session(f"c{i % 4}")
                parent, results = None, []
                for j in range(5):
                    m = msg(f"c{i}-{j}", f"task {i} message {j}")
                    results.append(await s.append(m, parent_id=parent))  # a chain of its own, from a root
                    parent = m["id"]
                more = await s.append_many([msg(f"c{i}-{j}") for j in range(5, 8)], parent_id=parent)
                return (
                    results + more,
                    await s.get_history(leaf_id=f"c{i}-7"),
                    [m["id"] async for m in s.history(leaf_id=f"c{i}-7", newest_first=True)],
                )

            async def reader(k):  # reads racing the writes: each path read is one task's chain
                s = store.session(f"c{k}")
                paths = []
                for _ in range(10):
                    history = await s.get_history()
                    if history:
                        task = history[0]["id"].split("-")[0]
                        assert ids(history) == [f"{task}-{j}" for j in range(len(history))]
                    paths.append(len(history))
                    await asyncio.sleep(0)
                return paths

            outcomes = await asyncio.gather(*(writer(i) for i in range(24)), *(reader(k) for k in range(4)))
            for i, (results, history, newest_first) in enumerate(outcomes[:24]):
                expected = [f"c{i}-{j}" for j in range(8)]
                assert [r.message["id"] for r in results] == expected and all(r.inserted for r in results)
                assert ids(history) == expected and newest_first == expected[::-1]
            for k in range(4):
                assert await store.session(f"c{k}").count() == 6 * 8
            assert (await store.stats())["messages"] == 24 * 8
            assert sorted(info.id for info in await store.list_sessions()) == ["c0", "c1", "c2", "c3"]

    run(main())


# ---------------------------------------------------------------------------
# transactions shared by tasks


def test_other_tasks_wait_for_a_transaction_and_never_join_it(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            a, b = store.session("a"), store.session("b")
            order = []
            inside = asyncio.Event()

            async def other():
                await inside.wait()
                order.append("other calls")
                await b.append(msg("b1"))  # must neither join nor see the open transaction
                order.append("other wrote")

            async def spawned():  # a task started inside the block is part of it
                await a.append(msg("a2"))

            task = asyncio.create_task(other())
            with pytest.raises(RuntimeError, match="roll back"):
                async with store.transaction() as tx:
                    assert tx is store
                    await a.append(msg("a1"))
                    await asyncio.create_task(spawned())
                    inside.set()
                    await turns_until(lambda: order, "the other task's call")
                    # The worker runs calls in the order they come: had the other task's call gone
                    # to it, it would have ended (and the task gone on) before these.
                    assert ids(await a.get_history()) == ["a1", "a2"]
                    assert await b.get_history() == []
                    assert order == ["other calls"] and not task.done()
                    raise RuntimeError("roll back")
            await asyncio.wait_for(task, 60)
            assert order == ["other calls", "other wrote"]
            # rolled back, but not the other task's write: it never joined
            assert await a.get_history() == [] and ids(await b.get_history()) == ["b1"]

            async with store.transaction():
                await a.append(msg("x"))
                async with store.transaction():  # nested: joins
                    await a.append(msg("y"))
            assert ids(await a.get_history()) == ["x", "y"]

    run(main())


def test_transactions_of_many_tasks_are_all_or_nothing_and_one_at_a_time(target):
    """12 tasks each write 3 messages in a transaction (every third rolls back) while 6 tasks
    write outside any: the transactions never overlap, each is all or nothing, and no write
    from outside joins one (none is lost with a rollback)."""

    async def main():
        async with sk.aio.open_store(target) as store:
            log = []

            async def in_a_transaction(i):
                s = store.session(f"tx{i}")
                try:
                    async with store.transaction():
                        log.append(("begin", i))
                        for j in range(3):
                            await s.append(msg(f"tx{i}-{j}"))
                            await asyncio.sleep(0)  # let the other tasks try meanwhile
                        log.append(("end", i))
                        if i % 3 == 0:
                            raise Boom
                except Boom:
                    pass

            async def outside(i):
                for j in range(4):
                    await store.session("outside").append(msg(f"o{i}-{j}"), parent_id=None)
                    await asyncio.sleep(0)

            await asyncio.gather(*(in_a_transaction(i) for i in range(12)), *(outside(i) for i in range(6)))
            assert len(log) == 24
            for k in range(0, 24, 2):  # one at a time: each begin followed by its own end
                assert log[k][0] == "begin" and log[k + 1] == ("end", log[k][1]), log
            for i in range(12):
                expected = [] if i % 3 == 0 else [f"tx{i}-{j}" for j in range(3)]
                assert ids(await store.session(f"tx{i}").get_history()) == expected
            assert await store.session("outside").count() == 24

    run(main())


# ---------------------------------------------------------------------------
# cancellation


async def _hold_the_worker(store) -> tuple[threading.Event, threading.Event]:
    """Subscribe a sync callback that keeps the worker busy on the append of message "slow" until
    ``release`` is set; ``busy`` is set once it does."""
    busy, release = threading.Event(), threading.Event()

    def hold(event):  # a sync subscriber runs on the worker
        if event.message_ids == ("slow",):
            busy.set()
            assert release.wait(60)

    await store.subscribe(hold)
    return busy, release


def test_a_cancelled_call_never_runs_and_the_next_ones_do(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            s = store.session("s")
            busy, release = await _hold_the_worker(store)
            slow = asyncio.create_task(s.append(msg("slow")))
            try:
                assert await asyncio.to_thread(busy.wait, 60)
                queued = asyncio.create_task(s.append(msg("cancelled")))
                await asyncio.sleep(0)  # its first step: the call is queued behind the busy worker
                queued.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await queued
            finally:
                release.set()
            assert (await slow).inserted
            assert (await s.append(msg("after"))).inserted
            assert ids(await s.get_history()) == ["slow", "after"]

    run(main())


def test_a_call_cancelled_while_waiting_for_a_transaction_never_runs(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            s, t = store.session("s"), store.session("t")
            entered, probe, probed, release = (asyncio.Event() for _ in range(4))

            async def holder():
                async with store.transaction():
                    await t.append(msg("t1"))
                    entered.set()
                    await probe.wait()
                    await t.count()  # a call inside the transaction
                    probed.set()
                    await release.wait()

            holding = asyncio.create_task(holder())
            try:
                await entered.wait()
                waiting = asyncio.create_task(s.append(msg("cancelled")))
                await asyncio.sleep(0)  # its first step: the call is made
                probe.set()
                await probed.wait()
                # The worker runs calls in the order they come: had the waiting call gone to it,
                # it would have ended (and its task with it) before the probe's.
                assert not waiting.done()
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            finally:
                release.set()
                await holding
            assert (await s.append(msg("after"))).inserted
            assert ids(await s.get_history()) == ["after"] and ids(await t.get_history()) == ["t1"]

    run(main())


def test_a_cancelled_transaction_rolls_back_and_lets_others_in(target):
    async def main():
        async with sk.aio.open_store(target) as store:
            s = store.session("s")
            entered, probe, probed = asyncio.Event(), asyncio.Event(), asyncio.Event()
            calling = []

            async def body():
                async with store.transaction():
                    await s.append(msg("never"))
                    entered.set()
                    await probe.wait()
                    await s.count()  # a call inside the transaction
                    probed.set()
                    await asyncio.Event().wait()  # until cancelled

            async def other():
                await entered.wait()
                calling.append(True)
                return await s.append(msg("other"))  # waits for the transaction

            task = asyncio.create_task(body())
            waiting = asyncio.create_task(other())
            try:
                await entered.wait()  # the transaction's append went through the worker (real time)
                await turns_until(lambda: calling, "the other task's call")  # then a few turns
                probe.set()
                await probed.wait()
                assert not waiting.done()  # (the worker runs calls in the order they come)
            finally:
                task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert (await asyncio.wait_for(waiting, 60)).inserted
            assert (await asyncio.wait_for(s.append(msg("after")), 60)).inserted
            assert ids(await s.get_history()) == ["other", "after"]

    run(main())


def test_a_transaction_cancelled_while_it_opens_rolls_back_and_lets_others_in(target):
    """Cancelled while its opening waits behind a busy worker: once the worker has opened it,
    it is rolled back there, and the calls waiting for it go on (and are committed: the store
    opened again holds them, where the variant can be opened again)."""

    async def main():
        async with sk.aio.open_store(target) as store:
            s = store.session("s")
            busy, release = await _hold_the_worker(store)
            slow = asyncio.create_task(s.append(msg("slow")))

            async def body():
                async with store.transaction():
                    await s.append(msg("never"))

            try:
                assert await asyncio.to_thread(busy.wait, 60)
                opening = asyncio.create_task(body())
                await asyncio.sleep(0)  # its first step: the opening is queued behind the busy worker
                opening.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await opening
                after = asyncio.create_task(s.append(msg("after")))
            finally:
                release.set()
            assert (await slow).inserted
            assert (await asyncio.wait_for(after, 60)).inserted
            async with store.transaction():
                await s.append(msg("again"))
            assert ids(await s.get_history()) == ["slow", "after", "again"]

    run(main())
    if target != ":memory:":
        with sk.open_store(target) as store:
            assert ids(store.session("s").get_history()) == ["slow", "after", "again"]


# ---------------------------------------------------------------------------
# the SessionStore protocol (docs/agents.md)


def test_an_async_store_is_a_session_store(tmp_path):
    async def main():
        async with sk.aio.open_store(tmp_path / "proto.db") as store:
            assert isinstance(store, sk.SessionStore)
            assert await store.load("s") == []
            await store.save("s", [msg("u1"), msg("a1", role="assistant")])
            await store.save("s", [msg("u2")])
            s = store.session("s")
            assert [m["id"] for m in await store.load("s")] == ["u1", "a1", "u2"]
            assert (await s.path(None)).leaf_id == "u2"  # one chain
            s.on_compaction(lambda messages, ctx: sk.CompactionResult("u1", "a1", "S"))
            await s.compact()
            assert [m["id"] for m in await store.load("s")][1:] == ["u2"]  # compaction applied

    run(main())


# ---------------------------------------------------------------------------
# The async guide (docs/async.md)


def test_the_guide_s_async_example_prints_what_the_guide_shows(tmp_path):
    """The Starlette app of docs/async.md ("Agents on an async store") runs and prints the output shown there."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    root = Path(__file__).resolve().parents[2]
    guide = (root / "docs" / "async.md").read_text(encoding="utf-8")
    section = guide.split("\n## Agents on an async store\n", 1)[1].split("\n## ", 1)[0]
    code, output = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[:2]
    (tmp_path / "app.py").write_text(code, encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_OFFLINE_MODE="true",
    )
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == output
