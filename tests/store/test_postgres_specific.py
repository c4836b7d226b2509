"""What only the PostgreSQL engine promises: many processes on one store, the change feed
across processes (LISTEN/NOTIFY), concurrent schema creation, and the search index kept
current by writers that did not build it.

Each test gets a fresh schema on the throwaway server of ``pg_cluster.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest
from helpers import msg, wait_until

import sessionkit as sk

pytestmark = pytest.mark.postgres  # every test here needs the PostgreSQL test server

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The session of the marker writes below. PostgreSQL delivers notifications in commit order,
#: so once a listener has the marker's event it has every event of what committed before
#: it: anything of that still missing, or one too many, is there to see.
MARKER = "marker"


# ---------------------------------------------------------------------------
# helper processes: each prints "ready", waits for a line on stdin, works, prints JSON

_WRITER = """
import json, sys
import sessionkit as sk
url, wid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
store = sk.open_store(url)
s = store.session("shared")
print("ready", flush=True)
sys.stdin.readline()
inserted = 0
for i in range(n):
    text = f"writer {wid} message {i} " + "words " * (i % 7)
    r = s.append({"id": f"w{wid}-{i}", "role": "user" if i % 2 == 0 else "assistant",
                  "parts": [{"type": "text", "text": text}]})
    inserted += r.inserted
retry = s.append({"id": f"w{wid}-0", "role": "user", "parts": []})  # a retried append
store.close()
print(json.dumps({"inserted": inserted, "retry_inserted": retry.inserted}), flush=True)
"""

_SUBSCRIBER = """
import json, sys, threading
import sessionkit as sk
url, marker = sys.argv[1], sys.argv[2]
store = sk.open_store(url)
got = []
done = threading.Event()
def on_event(ev):
    if ev.session_id == marker:  # written after everything else: nothing is still on its way
        done.set()
    else:
        got.append([ev.type, ev.session_id, list(ev.message_ids), ev.message])
store.subscribe(on_event)
print("ready", flush=True)
sys.stdin.readline()
done.wait(120)  # a hang guard: the marker comes within a second or so
store.close()
print(json.dumps({"events": got, "marker": done.is_set()}), flush=True)
"""

_OPENER = """
import json, sys
import sessionkit as sk
url, wid = sys.argv[1], sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()
with sk.open_store(url) as store:
    r = store.session(f"opener-{wid}").append({"id": "first", "role": "user", "parts": []})
    stats = store.stats()
print(json.dumps({"inserted": r.inserted, "schema_version": stats["schema_version"]}), flush=True)
"""


def spawn(code: str, *args) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def await_ready(procs, timeout: float = 60.0) -> None:
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.kill()
            raise AssertionError(f"helper process did not start: {line!r} {p.stderr.read()[-2000:]}")


def go(procs) -> None:
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()


def result(p: subprocess.Popen, timeout: float = 90.0):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------


@pytest.mark.slow  # several processes
def test_four_processes_append_to_one_session_and_a_fifth_receives_every_append(pg_store_url):
    url = pg_store_url()
    n = 60
    writers_count = 4
    sk.open_store(url).close()  # the schema exists; concurrent creation has its own test
    subscriber = spawn(_SUBSCRIBER, url, MARKER)
    writers = [spawn(_WRITER, url, w, n) for w in range(writers_count)]
    try:
        await_ready([subscriber, *writers])
        go([subscriber, *writers])
        outcomes = [result(w) for w in writers]
        with sk.open_store(url) as marker:  # after every writer committed and ended
            marker.session(MARKER).append(msg("end"))
        got = result(subscriber)
    finally:
        for p in (subscriber, *writers):
            if p.poll() is None:
                p.kill()
    assert all(o == {"inserted": n, "retry_inserted": False} for o in outcomes), outcomes
    assert got["marker"], "the subscriber never saw the marker written after the writers"
    events = got["events"]

    with sk.open_store(url) as store:
        s = store.session("shared")
        nodes = s.nodes()
        ids = [node.id for node in nodes]
        expected_ids = {f"w{w}-{i}" for w in range(writers_count) for i in range(n)}
        # nothing lost, nothing duplicated
        assert len(ids) == writers_count * n and set(ids) == expected_ids
        # every append attached to the latest leaf: one chain in write order
        assert nodes[0].parent_id is None and nodes[0].depth == 0
        for before, node in zip(nodes, nodes[1:]):
            assert node.parent_id == before.id, (before, node)
            assert node.depth == before.depth + 1
        # each writer's messages keep its own order
        for w in range(writers_count):
            mine = [i for i in ids if i.startswith(f"w{w}-")]
            assert mine == [f"w{w}-{i}" for i in range(n)]
        history = s.get_history()
        assert [m["id"] for m in history] == ids
        window = s.recent_history(10**9)
        assert window.total_content_bytes == sum(node.bytes for node in nodes)
        stored = {m["id"]: m for m in history}

    # the fifth process saw every append exactly once, with the message as stored
    assert [e[0] for e in events] == ["append"] * len(events)
    seen = [e[2][0] for e in events]
    assert len(seen) == len(set(seen)) == writers_count * n
    assert set(seen) == expected_ids
    assert all(e[1] == "shared" and e[3] == stored[e[2][0]] for e in events)
    # per writer, events arrive in that writer's order
    for w in range(writers_count):
        mine = [i for i in seen if i.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(n)]


def _open_at_once(url: str, n: int) -> list:
    """What ``n`` processes report after opening the store at ``url`` at the same moment."""
    openers = [spawn(_OPENER, url, w) for w in range(n)]
    try:
        await_ready(openers)
        go(openers)
        return [result(p) for p in openers]
    finally:
        for p in openers:
            if p.poll() is None:
                p.kill()


@pytest.mark.slow  # several processes
def test_concurrent_schema_creation_by_several_processes(pg_store_url):
    url = pg_store_url()  # a schema nobody created yet
    outcomes = _open_at_once(url, 4)
    from sessionkit.store.engines.postgresql.engine import SCHEMA_VERSION

    assert outcomes == [{"inserted": True, "schema_version": SCHEMA_VERSION}] * 4
    with sk.open_store(url) as store:
        assert sorted(i.id for i in store.list_sessions()) == [f"opener-{w}" for w in range(4)]
        eng = store._engine
        with eng._pool.connection() as conn:
            rows = conn.execute(f"SELECT key, value FROM {eng.table('meta')} ORDER BY key").fetchall()
        assert [(k, v) for k, v in rows if k != "store_id"] == [
            ("index_built", "0"),
            ("schema_version", str(SCHEMA_VERSION)),
        ]
        assert [len(v) for k, v in rows if k == "store_id"] == [32]  # one id, made by the one process that created it


@pytest.mark.slow  # several processes
def test_an_older_schema_is_migrated_once_when_many_processes_open_it(pg_store_url):
    from sessionkit.store.engines.postgresql import engine as postgres

    url = pg_store_url()
    with sk.open_store(url) as store:
        store.session("s").append(msg("a"))
        eng = store._engine
        with eng._pool.connection() as conn:  # make it a version 1 store: no records table
            conn.execute(f"DROP TABLE {eng.table('records')}")
            conn.execute(f"UPDATE {eng.table('meta')} SET value = '1' WHERE key = 'schema_version'")
    outcomes = _open_at_once(url, 3)
    assert outcomes == [{"inserted": True, "schema_version": postgres.SCHEMA_VERSION}] * 3
    with sk.open_store(url) as store:
        assert store.session("s").get("a")["id"] == "a"
        store.session_records.put("s", "kind", [(1, {"x": 1}), (2, [2])])
        store.session_records.put("s", "kind", [(1, {"x": "replaced"})])
        assert store.session_records.get("s", "kind") == [(1, {"x": "replaced"}), (2, [2])]
        assert store.session_records.get("s", "other") == []
        store.session_records.put("only-records", "kind", [(0, "v")])
        assert store._engine.session_exists("only-records")
        store.delete_session("only-records")
        assert store.session_records.get("only-records", "kind") == []


# ---------------------------------------------------------------------------
# two engines in one process behave like two processes (each has its own origin)


def test_remote_writes_reported_once_and_own_writes_not_twice(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        events = []
        a.subscribe(events.append)
        a.session("s").append(msg("local"))
        b.session("s").append(msg("remote"))
        wait_until(lambda: len(events) >= 2, what="two append events")
        b.session("s").update(msg("remote", "edited"))
        b.session("s").on_compaction(lambda m, c: sk.CompactionResult("local", "remote", "sum")).compact()
        b.session("s").import_message(msg("imported"))  # imports send no event, here or elsewhere
        b.session("s").delete("imported")
        b.session("other").append(msg("x"))
        b.delete_session("other")
        b.session(MARKER).append(msg("end"))
        wait_until(lambda: any(e.session_id == MARKER for e in events), what="the marker's event")
        kinds = [(e.type, e.session_id, e.message_ids) for e in events]
        assert kinds.pop() == ("append", MARKER, ("end",))
        assert kinds == [
            ("append", "s", ("local",)),
            ("append", "s", ("remote",)),
            ("update", "s", ("remote",)),
            ("compact", "s", ("local", "remote")),
            ("delete", "s", ("imported",)),
            ("append", "other", ("x",)),
            ("clear", "other", ()),
        ]
        assert (
            events[1].message == b.session("s").get("remote")
            or events[1].message["parts"][0]["text"] == "text of remote"
        )
        assert events[2].message["parts"][0]["text"] == "edited"
        overlay = events[3].message
        assert overlay["parts"] == [{"type": "text", "text": "sum"}]
        assert overlay["metadata"]["compaction"]["messages"] == 2


@pytest.mark.slow  # several processes
def test_large_events_cross_processes_intact(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        events = []
        a.subscribe(events.append)
        s = b.session("s")
        medium = msg("medium", "é" * 20_000)  # several NOTIFY payloads, reassembled
        big = msg("big", "word " * 40_000)  # too long to send: read back by the listener
        s.append(medium)
        s.append(big)
        ids = [f"n{i}" for i in range(600)]
        s.append_many([msg(i) for i in ids])
        s.delete(["medium", "big", *ids], subtree=True)
        wait_until(lambda: len(events) >= 603, what="603 events")
        assert events[0].message["parts"] == medium["parts"]
        assert events[1].message["parts"] == big["parts"]
        assert [e.message_ids[0] for e in events[2:602]] == ids
        assert events[602].type == "delete" and set(events[602].message_ids) == {"medium", "big", *ids}


def test_mirror_follows_writes_of_another_process(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        target = []
        a.session("s").mirror(target, transform=lambda m: m["id"])
        b.session("s").append(msg("one"))
        b.session("s").append(msg("two"))
        wait_until(lambda: target == ["one", "two"], what="the mirror to show one, two")
        b.session("s").append(msg("alt"), parent_id="one")
        wait_until(lambda: target == ["one", "alt"], what="the mirror to show one, alt")


def test_index_built_elsewhere_is_kept_current_by_every_writer(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        sa, sb = a.session("s"), b.session("s")
        sb.append(msg("before", "zebra before"))
        assert b.stats()["indexed_messages"] == 0
        assert [h.id for h in sa.search("zebra")] == ["before"]  # a builds the index
        # b never searched: its writes still find the flag and index themselves
        sb.append(msg("fast", "zebra fast path"))
        sb.import_message(msg("imported", "zebra imported"), parent_id="fast")
        sb.update(msg("before", "giraffe"))
        assert {h.id for h in sa.search("zebra")} == {"fast", "imported"}
        assert [h.id for h in sa.search("giraffe")] == ["before"]
        assert a.stats()["indexed_messages"] == 3


def test_concurrent_first_searches_and_writes_lose_no_index_entry(pg_store_url):
    url = pg_store_url()
    stores = [sk.open_store(url) for _ in range(3)]
    try:
        errors = []
        written = [0, 0]

        def write(k):
            try:
                s = stores[k].session(f"w{k}")
                for i in range(40):
                    s.append(msg(f"{k}-{i}", f"needle {k} {i}"))
                    written[k] += 1
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        # both writers are under way: messages written before the index and after it
        wait_until(lambda: errors or all(written), what="both writers to have written")
        stores[2].search("needle")  # builds the index while the others write
        for t in threads:
            t.join()
        assert errors == []
        hits = stores[2].search("needle", limit=1000)
        assert len(hits) == 80
        assert stores[2].stats()["indexed_messages"] == 80
    finally:
        for st in stores:
            st.close()


def test_threads_appending_to_one_session_build_one_chain(pg_store_url):
    with sk.open_store(pg_store_url(), pool_size=4) as store:
        s = store.session("s")

        def work(t):
            for i in range(25):
                s.append(msg(f"t{t}-{i}"))

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        nodes = s.nodes()
        assert len(nodes) == 100
        assert all(b.parent_id == a.id for a, b in zip(nodes, nodes[1:]))


def test_event_seq_is_unique_under_concurrent_writers(pg_store_url):
    with sk.open_store(pg_store_url()) as store:

        def work(t):
            for i in range(20):
                store.run_log.append_events("s", [{"kind": "x", "run_id": f"r{t}", "i": i}])

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [e["seq"] for e in store.events("s")] == list(range(80))


def test_long_paths_are_read_in_pages(pg_store_url, monkeypatch):
    from sessionkit.store.engines.postgresql import engine as postgres

    monkeypatch.setattr(postgres.PostgresEngine, "PAGE", 7)
    with sk.open_store(pg_store_url(), chunk_chars=50) as store:
        s = store.session("s")
        ids = [f"m{i}" for i in range(40)]
        for i in ids:
            s.append(msg(i, "a fairly long text that needs continuation rows " * 2))
        comp = s.on_compaction(lambda m, c: sk.CompactionResult("m3", "m30", "sum")).compact()
        assert [m["id"] for m in s.get_history()] == ids[:3] + [f"compaction:{comp.id}"] + ids[31:]
        assert [m["id"] for m in s.get_history(compacted=False)] == ids
        assert s.get("m5")["parts"][0]["text"].startswith("a fairly long text")
        window = s.recent_history(10**9, leaf_id="m30", compacted=False)  # continuation rows too
        assert [m["id"] for m in window.messages] == ids[:31] and window.truncated is False
        assert window.messages[-1] == s.get("m30")
        with store._engine.write():  # inside a transaction too
            assert [row[1] for row in store._engine.path_skeleton("s", s.nodes()[-1].seq)] == ids[::-1]


def test_path_hides_password_and_reopens_the_same_schema(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as store:
        store.session("s").append(msg("a"))
        path = store.path
    assert "schema=" in path
    with sk.open_store(path) as again:
        assert again.session("s").get("a") is not None
    from sessionkit.store.engines.postgresql.text import _parse_url, _shown_url

    conninfo, schema = _parse_url("postgres://u:secret@h:5/db?sslmode=disable&schema=x&password=p2")
    assert schema == "x" and "secret" in conninfo and "schema" not in conninfo
    shown = _shown_url(conninfo, schema)
    assert "secret" not in shown and "p2" not in shown and shown.endswith("sslmode=disable&schema=x")


def test_nul_in_ids_is_refused_and_stores_nothing(pg_store_url):
    with sk.open_store(pg_store_url()) as store:
        s = store.session("s")
        s.append(msg("ok"))
        for bad in ("a\x00b",):
            with pytest.raises(sk.InvalidMessage):
                s.append(msg(bad))
            with pytest.raises(sk.InvalidMessage):
                store.session(bad).append(msg("x"))
        assert [n.id for n in s.nodes()] == ["ok"]
        s.append(msg("after"))  # the pool's connections are still usable
        assert len(s) == 2


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(sk.SessionKitError) as info:
        sk.open_store("postgresql://nobody@127.0.0.1:1/none", connect_timeout=2)
    assert "127.0.0.1" in str(info.value)


def test_a_huge_message_of_distinct_words_is_stored_and_found_by_its_first_words(pg_store_url):
    """PostgreSQL caps a tsvector at 1 MB of lexemes and positions: a longer message keeps
    what fits in the index (its first distinct words) and is stored whole, whether it
    is appended to an indexed store or met by the first search's index build."""
    import random
    import uuid

    rng = random.Random(5)
    # ~2.4 MB, 60,000 distinct words: about twice what fits in a tsvector's 1 MB
    log = "\n".join(
        "request "
        + " ".join(uuid.UUID(int=rng.getrandbits(128)).hex for _ in range(4))
        + f" served in {rng.randint(1, 999)} ms"
        for _ in range(15_000)
    )
    first = log.split()[1]
    for indexed_first in (True, False):
        with sk.open_store(pg_store_url()) as store:
            s = store.session("s")
            s.append(msg("small", "hello world"))
            if indexed_first:
                store.search("hello")  # appends now index as they go
            s.append(msg("big", log))
            assert s.get("big")["parts"][0]["text"] == log
            assert [h.id for h in s.search("request served")] == ["big"]
            assert [h.id for h in s.search(first)] == ["big"]
            assert s.search(log.split()[-5]) == []  # a word of the last line: past what fits
            assert [h.id for h in s.search("hello")] == ["small"]
            assert store.stats()["indexed_messages"] == 2


# ---------------------------------------------------------------------------
# the public coordination API (what the HTTP server's workers share a store with)


def test_holds_are_store_wide_and_given_back(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        assert a.capabilities == sk.store.Capabilities(bulk_insert=False, coordination=True, shared_feed=True)
        assert a.coordination.try_hold("session.run\x00chat") is True
        assert b.coordination.try_hold("session.run\x00chat") is False  # another process holds it
        assert a.coordination.try_hold("session.run\x00chat") is False  # not re-entrant either
        assert (
            b.coordination.hold_taken("session.run\x00chat") is True
            and a.coordination.hold_taken("session.run\x00chat") is True
        )
        assert b.coordination.hold_taken("session.run\x00other") is False
        assert b.coordination.try_hold("session.run\x00other") is True  # holds are per name
        a.coordination.release_hold("session.run\x00chat")
        assert b.coordination.hold_taken("session.run\x00chat") is False
        assert b.coordination.try_hold("session.run\x00chat") is True
        b.coordination.release_hold("session.run\x00never-taken")  # nothing to give back: no error
    with sk.open_store(url) as c:  # a closed store gives its holds back
        assert (
            c.coordination.hold_taken("session.run\x00chat") is False
            and c.coordination.try_hold("session.run\x00other") is True
        )
        c.close()
        c.coordination.release_hold("session.run\x00other")  # after close: nothing
        c.coordination.signal("s", "note")


def test_signals_reach_the_other_processes_only(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b:
        got_a, got_b = [], []
        a.coordination.on_signal(lambda sid, kind, data: got_a.append((sid, kind, data)))
        b.coordination.on_signal(lambda sid, kind, data: got_b.append((sid, kind, data)))
        b.coordination.signal("chat", "message", {"n": 1, "text": "é"})
        a.coordination.signal("chat", "stop")
        wait_until(
            lambda: ("chat", "message", {"n": 1, "text": "é"}) in got_a and ("chat", "stop", None) in got_b,
            what="each store to get the other's signal",
        )
        stored = b.run_log.append_events("chat", [{"kind": "k1"}, {"kind": "k2"}])
        wait_until(lambda: ("chat", "events", stored[-1]["seq"]) in got_a, what="the events signal")
        # a marker signal each way, sent after the others: once it arrived, an echo of a
        # store's own signals would have arrived before it
        a.coordination.signal(MARKER, "end")
        b.coordination.signal(MARKER, "end")
        wait_until(lambda: (MARKER, "end", None) in got_a and (MARKER, "end", None) in got_b, what="the marker signals")
        assert all(kind != "stop" for _, kind, _ in got_a)  # its own signal is not reported back
        assert all(kind not in ("message", "events") for _, kind, _ in got_b)
        with pytest.raises(TypeError):
            a.coordination.on_signal("not callable")


def test_a_transaction_reaches_other_processes_only_when_it_commits(pg_store_url):
    url = pg_store_url()
    with sk.open_store(url) as a, sk.open_store(url) as b, sk.open_store(url) as c:
        remote = []
        b.subscribe(remote.append)
        s = a.session("s")

        def mark(n: int) -> None:
            """A write by a third store, committed now; once ``b`` has its event, ``b`` has
            every event of what committed before it (nothing else of it is on its way)."""
            c.session(MARKER).append(msg(f"m{n}"))
            wait_until(
                lambda: any(e.session_id == MARKER and e.message_ids == (f"m{n}",) for e in remote),
                what=f"the marker m{n}",
            )

        with pytest.raises(RuntimeError):
            with a.transaction():
                s.append(msg("dropped"))
                raise RuntimeError("rolled back")
        with a.transaction():
            s.append_many([msg("one"), msg("two")])
            mark(1)
            # not committed: nothing to see yet
            assert [e.session_id for e in remote] == [MARKER] and len(b.session("s")) == 0
        wait_until(lambda: len(remote) >= 3, what="the two appends' events")
        mark(2)
        assert [(e.session_id, e.message_ids) for e in remote] == [
            (MARKER, ("m1",)),
            ("s", ("one",)),
            ("s", ("two",)),
            (MARKER, ("m2",)),
        ]
        assert [m["id"] for m in b.session("s").get_history()] == ["one", "two"]


def test_open_without_create_leaves_an_empty_schema_alone(pg_store_url):
    url = pg_store_url()
    for _ in range(2):  # the first refusal created nothing
        with pytest.raises(ValueError, match="not a sessionkit store"):
            sk.open_store(url, create=False)
    with sk.open_store(url) as created:
        created.session("s").append(msg("a"))
    with sk.open_store(url, create=False) as again:
        assert again.stats()["schema_version"] >= 1 and len(again.session("s")) == 1
