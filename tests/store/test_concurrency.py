"""Several writers on one SQLite file at once (docs/stores.md): two processes and four threads
sharing one Store append at the same time, and nothing is lost, duplicated or misplaced;
readers streaming a path while another thread appends see whole, consistent paths."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_until

import sessionkit as sk

_spec = importlib.util.spec_from_file_location("sessionkit_test_writers", Path(__file__).with_name("_writers.py"))
writers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writers)

COUNT = int(os.environ.get("SESSIONKIT_CONCURRENCY_COUNT", 500))  # messages per writer and session


def _chain(session, leaf_id):
    """Ids on the raw path root -> leaf (the default leaf when ``leaf_id`` is None)."""
    return [m["id"] for m in session.get_history(leaf_id=leaf_id, compacted=False)]


@pytest.mark.slow
def test_two_processes_and_four_threads_append_to_one_file_without_loss_or_duplicates(tmp_path):
    path = tmp_path / "shared.db"
    sk.open_store(path).close()  # the schema exists before anyone races to write
    names = [f"p{k}" for k in range(2)] + [f"t{k}" for k in range(4)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(Path(writers.__file__)),
                "concurrent",
                str(path),
                f"p{k}",
                str(COUNT),
                str(COUNT // 2 if k else -1),
                ",".join(names),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(2)
    ]
    store = sk.open_store(path)
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go = threading.Barrier(5, timeout=120)
        errors: list[BaseException] = []

        def thread_writer(name, search_at):
            go.wait()
            try:
                writers.concurrent_writer(store, name, COUNT, search_at, tuple(names))
            except BaseException as exc:  # reported below
                errors.append(exc)

        # one thread and one process search midway: the index gets built while others write
        threads = [
            threading.Thread(target=thread_writer, args=(f"t{k}", COUNT // 3 if k == 1 else -1), daemon=True)
            for k in range(4)
        ]
        for t in threads:
            t.start()
        for p in procs:  # release everyone at once
            p.stdin.write("go\n")
            p.stdin.flush()
        go.wait()
        for t in threads:
            t.join(timeout=300)
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0 and out.startswith("done"), err
        assert not errors, errors
    finally:
        store.close()
        for p in procs:
            if p.poll() is None:
                p.kill()

    with contextlib.closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    with sk.open_store(path) as store:
        # each writer's own session: one chain, in the writer's order
        for name in names:
            own = store.session(f"own-{name}")
            assert len(own) == COUNT
            assert _chain(own, None) == [f"{name}-{i}" for i in range(COUNT)]
            assert [m["parts"][0]["text"] for m in own.get_history()] == [
                f"own {name} number {i}" for i in range(COUNT)
            ]

        # the shared session, default parent: appends are serialised, so every message went
        # under the one written just before it: a single chain holding every message once
        shared = store.session(writers.SHARED)
        assert len(shared) == COUNT * len(names)
        chain = _chain(shared, None)
        assert len(chain) == len(set(chain)) == COUNT * len(names), "lost, duplicated or branched appends"
        assert set(chain) == {f"{n}-{i}" for n in names for i in range(COUNT)}
        for name in names:  # each writer's appends appear in the order it made them
            mine = [int(mid.split("-")[1]) for mid in chain if mid.split("-")[0] == name]
            assert mine == list(range(COUNT)), name
        for mid in chain:  # the first write of each id won; retries wrote nothing
            assert shared.get(mid)["parts"][0]["text"].startswith("shared ")
        # all six were writing at one moment (each waited halfway for the others' first
        # message), or this showed nothing about concurrency: their runs in the chain overlap
        position = {mid: n for n, mid in enumerate(chain)}
        firsts = [position[f"{name}-0"] for name in names]
        lasts = [position[f"{name}-{COUNT - 1}"] for name in names]
        assert max(firsts) < min(lasts), (firsts, lasts)

        # the shared session with explicit parents: one branch per writer, each whole
        branches = store.session(writers.BRANCHES)
        assert len(branches) == COUNT * len(names)
        roots = set()
        for name in names:
            ids = _chain(branches, f"{name}-{COUNT - 1}")
            assert ids == [f"{name}-{i}" for i in range(COUNT)]
            roots.add(ids[0])
            assert branches.branches(f"{name}-{COUNT - 1}") == []
        assert len(roots) == len(names)

        stats = store.stats()
        assert stats["messages"] == 3 * COUNT * len(names)
        assert stats["sessions"] == len(names) + 2
        assert stats["indexed_messages"] == stats["messages"]

        # the index holds every message, whether written before it existed or after
        for name in names:
            for i in range(COUNT):
                hits = shared.search(f'"{name} number {i}"', limit=5)
                assert [h.id for h in hits] == [f"{name}-{i}"], (name, i)
        store.settings.search_candidates = 10 * COUNT  # rank every match, not only the newest 2,000
        hits = store.search("own number", limit=10 * COUNT)
        assert len(hits) == COUNT * len(names)
        assert {h.session_id for h in hits} == {f"own-{n}" for n in names}


def _reader_check(session, leaf_id, newest_first):
    """Stream a path and check it is whole: parents chain up, depths count down to the root."""
    got = []
    for m in session.history(leaf_id=leaf_id, newest_first=newest_first, compacted=False):
        got.append(m)
        if len(got) % 64 == 0:
            time.sleep(0)  # let the writer in while this read is half done
    if newest_first:
        got.reverse()
    assert got, "empty path"
    assert got[0]["metadata"]["parent"] is None
    for i, m in enumerate(got):
        assert m["metadata"]["depth"] == i, (m["id"], i)
        if i:
            assert m["metadata"]["parent"] == got[i - 1]["id"]
    if leaf_id is not None:
        assert got[-1]["id"] == leaf_id
    return len(got)


@pytest.mark.slow
@pytest.mark.parametrize("shared_store", [True, False], ids=["one-store", "two-stores"])
def test_readers_streaming_while_another_thread_appends_see_consistent_paths(tmp_path, shared_store):
    path = tmp_path / "read.db"
    writer_store = sk.open_store(path)
    reader_store = writer_store if shared_store else sk.open_store(path)
    wsession = writer_store.session("live")
    rsession = reader_store.session("live")
    written: list[tuple[str, int]] = []  # (id, depth)
    total = 4000
    done = threading.Event()
    errors: list[BaseException] = []
    reads = {"paths": 0, "messages": 0}
    rounds = [0, 0]  # reading rounds each reader finished
    checkpoints = 8

    def writer():
        rng = random.Random(7)
        try:
            for n in range(total):
                if n and n % (total // checkpoints) == 0:
                    # let each reader finish a round at this size, so reads are spread over
                    # the whole run however the threads get scheduled
                    seen = list(rounds)
                    wait_until(
                        lambda seen=seen: errors or all(r > s for r, s in zip(rounds, seen)),
                        what="each reader to finish a round",
                    )
                # mostly extend the latest leaf; sometimes branch off an earlier message
                if written and rng.random() < 0.1:
                    parent, depth = written[rng.randrange(len(written))]
                    depth += 1
                elif written:
                    parent, depth = written[-1][0], written[-1][1] + 1
                else:
                    parent, depth = None, 0
                mid = f"x{n}"
                msg = {
                    "id": mid,
                    "role": "user",
                    "parts": [{"type": "text", "text": "word " * (n % 50)}],
                    "metadata": {"parent": parent, "depth": depth},
                }
                assert wsession.append(msg, parent_id=parent).inserted
                written.append((mid, depth))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    def reader(seed):
        rng = random.Random(seed)
        try:
            wait_until(lambda: written or done.is_set(), what="a first message")
            while not done.is_set():
                leaf = written[rng.randrange(len(written))][0]
                for leaf_id in (None, leaf):
                    for newest_first in (False, True):
                        reads["messages"] += _reader_check(rsession, leaf_id, newest_first)
                        reads["paths"] += 1
                # a window read mid-stream is a whole suffix of its path
                window = rsession.recent_history(2000, min_messages=3)
                depths = [m["metadata"]["depth"] for m in window.messages]
                assert depths == list(range(depths[0], depths[0] + len(depths)))
                assert window.truncated == (depths[0] > 0)
                for a, b in zip(window.messages, window.messages[1:]):
                    assert b["metadata"]["parent"] == a["id"]
                rounds[seed] += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, daemon=True)]
    threads += [threading.Thread(target=reader, args=(k,), daemon=True) for k in range(2)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        done.set()
        if reader_store is not writer_store:
            reader_store.close()
        writer_store.close()
    assert not errors, errors
    # the readers really ran while the writer wrote: a round at each checkpoint at least
    assert min(rounds) >= checkpoints - 1, (rounds, reads)
    with sk.open_store(path) as store:
        assert len(store.session("live")) == total
