"""A running ``store.sql`` can be stopped, on every engine (SQLite file and memory, DuckDB
file and memory, PostgreSQL): closing the store stops it with ``StoreClosed`` and returns;
Ctrl-C in the main thread, ``store.interrupt_sql()`` and cancelling the ``sk.aio`` task that
awaits it stop it with ``KeyboardInterrupt`` / ``CancelledError``, and the store answers the
next query right.

A runaway query counts a trillion rows; each test waits until DuckDB executes it (the
store's count of executing queries), never on a clock."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest
from helpers import msg, wait_until

import sessionkit as sk

VARIANTS = ["sqlite-file", "sqlite-memory", "duckdb-file", "duckdb-memory", "postgresql"]

RUNAWAY = "SELECT count(*) AS n FROM range(1000000000000) WHERE range % 7 = 3"


@pytest.fixture(params=VARIANTS)
def store(request, new_store):
    """A store of each variant holding one session of three messages."""
    st = new_store(request.param)
    st.session("s").append_many([msg("m1"), msg("m2"), msg("m3", role="assistant")])
    return st


def _executing(store) -> int:
    """How many analysis queries DuckDB is executing on ``store`` now."""
    return store._engine._analysis_runs.executing()


def _in_thread(call):
    """``call()`` on a thread of its own; the thread and what it returned or raised."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _answers(store) -> None:
    assert store.sql("SELECT count(*) AS n FROM messages")["n"][0] == 3
    assert store.sql("SELECT role, count(*) AS n FROM messages GROUP BY role ORDER BY role").to_dict("records") == [
        {"role": "assistant", "n": 1},
        {"role": "user", "n": 2},
    ]


def test_close_stops_a_running_query(store):
    _answers(store)
    query, result = _in_thread(lambda: store.sql(RUNAWAY))
    wait_until(lambda: _executing(store), what="the runaway query to run")
    closer, closed = _in_thread(store.close)
    wait_until(lambda: not closer.is_alive(), what="close() to return")
    assert "error" not in closed and store.closed
    wait_until(lambda: not query.is_alive(), what="the query to stop")
    assert isinstance(result.get("error"), sk.StoreClosed), result
    with pytest.raises(sk.StoreClosed):
        store.sql("SELECT 1")


def test_close_stops_a_query_in_sql_arrow_with_files(store, tmp_path):
    (tmp_path / "x.csv").write_text("a\n1\n", encoding="utf-8")
    query, result = _in_thread(
        lambda: store.sql_arrow(
            f"SELECT count(*) AS n FROM range(1000000000000), read_csv('{tmp_path / 'x.csv'}')", files=True
        )
    )
    wait_until(lambda: _executing(store), what="the runaway query to run")
    store.close()
    wait_until(lambda: not query.is_alive(), what="the query to stop")
    assert isinstance(result.get("error"), sk.StoreClosed), result


def test_interrupt_sql_stops_a_running_query_and_the_store_answers(store):
    for _ in range(2):  # stopped twice: the store stays usable each time
        query, result = _in_thread(lambda: store.sql(RUNAWAY))
        wait_until(lambda: _executing(store), what="the runaway query to run")
        store.interrupt_sql()
        wait_until(lambda query=query: not query.is_alive(), what="the query to stop")
        assert isinstance(result.get("error"), KeyboardInterrupt), result
        _answers(store)
    store.interrupt_sql()  # nothing running: nothing happens
    _answers(store)
    store.session("s").append(msg("m4"))  # the cache (or the views) follow the store's next writes
    assert store.messages_df()["id"].tolist() == ["m1", "m2", "m3", "m4"]
    assert store.sql("SELECT count(*) AS n FROM messages WHERE on_latest_path")["n"][0] == 4


@pytest.fixture
def ctrl_c_raises():
    """SIGINT handled as in a Python started in a terminal's foreground (KeyboardInterrupt);
    a process started in a shell's background has it ignored."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_a_query_in_the_main_thread(store, ctrl_c_raises):
    assert threading.current_thread() is threading.main_thread()
    main = threading.main_thread().ident

    def press_ctrl_c():
        wait_until(lambda: _executing(store), what="the runaway query to run")
        signal.pthread_kill(main, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, daemon=True)
    presser.start()
    with pytest.raises(KeyboardInterrupt):
        store.sql(RUNAWAY)
    presser.join()
    assert _executing(store) == 0
    _answers(store)


@pytest.fixture(params=VARIANTS)
def aio_target(request, tmp_path):
    """A store target of each variant for ``sk.aio.open_store``."""
    variant = request.param
    if variant == "postgresql":
        request.getfixturevalue("pg_url")  # fails under CI=true without a server
        from store.pg_cluster import new_store_url

        return new_store_url()
    return {
        "sqlite-file": tmp_path / "a.db",
        "sqlite-memory": ":memory:",
        "duckdb-file": tmp_path / "a.duckdb",
        "duckdb-memory": "duckdb:///:memory:",
    }[variant]


def test_cancelling_an_aio_query_stops_it_and_the_store_answers(aio_target):
    async def main():
        async with sk.aio.open_store(aio_target) as store:
            await store.session("s").append_many([msg("m1"), msg("m2")])
            for call in (lambda: store.sql(RUNAWAY), lambda: store.sql_arrow(RUNAWAY)):
                task = asyncio.ensure_future(call())
                await asyncio.to_thread(wait_until, lambda: _executing(store.sync), what="the runaway query to run")
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                # the worker is free at once: the next query answers, right
                assert (await store.sql("SELECT count(*) AS n FROM messages"))["n"][0] == 2
                assert _executing(store.sync) == 0
            # a query still queued behind another is never run
            first = asyncio.ensure_future(store.sql(RUNAWAY))
            await asyncio.to_thread(wait_until, lambda: _executing(store.sync), what="the runaway query to run")
            second = asyncio.ensure_future(store.sql(RUNAWAY))
            await asyncio.sleep(0)
            second.cancel()
            await store.interrupt_sql()
            with pytest.raises(asyncio.CancelledError):  # (KeyboardInterrupt would stop the loop)
                await first
            with pytest.raises(asyncio.CancelledError):
                await second
            assert (await store.messages_df())["id"].tolist() == ["m1", "m2"]
            # closing stops a running query, which raises StoreClosed
            running = asyncio.ensure_future(store.sql(RUNAWAY))
            await asyncio.to_thread(wait_until, lambda: _executing(store.sync), what="the runaway query to run")
            await store.close()
            with pytest.raises(sk.StoreClosed):
                await running
            assert store.closed and store.sync.closed

    asyncio.run(main())


def test_a_query_past_its_timeout_stops_with_query_timeout_and_the_store_answers(store):
    for call in (lambda: store.sql(RUNAWAY, timeout=0.2), lambda: store.sql_arrow(RUNAWAY, timeout=0.2)):
        with pytest.raises(sk.QueryTimeout, match=r"timeout of 0\.2 s") as info:
            call()
        assert isinstance(info.value, sk.UsageError) and isinstance(info.value, TimeoutError)
        _answers(store)
    assert store.sql("SELECT count(*) AS n FROM messages", timeout=60)["n"][0] == 3  # a query within it: its answer
    refused = ((0, ValueError), (-1.0, ValueError), (float("nan"), ValueError), ("1", TypeError), (True, TypeError))
    for bad, error in refused:
        with pytest.raises(error, match="timeout"):
            store.sql_arrow("SELECT 1", timeout=bad)
