"""The store conformance suite: SPEC sections 1-7, run against any engine.

An engine runs it by importing everything from this module into a test module
and providing a ``make_store`` fixture: a function ``make_store(**options)`` that
opens a fresh, empty store on a new target each call. The suite builds its
``store``, ``store_factory`` and ``reopen`` fixtures on it. An engine may also
override ``raw_sql`` to give the schema checks raw access::

    import pytest
    import sessionkit as sk
    from sessionkit.testing.conformance import *  # noqa: F401,F403

    @pytest.fixture
    def make_store(tmp_path):
        n = iter(range(1000))
        return lambda **opts: sk.open_store(tmp_path / f"t{next(n)}.db", **opts)

Every test names the SPEC item it checks.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as _dt
import gc
import hashlib
import json
import math
import re
import threading
from dataclasses import FrozenInstanceError

import pytest

import sessionkit as sk

try:  # the property tests need hypothesis; without it they skip
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as hst
except ImportError:  # pragma: no cover - depends on the environment
    given = None  # type: ignore[assignment]  # the tests that need it check for None

__all__ = [
    "store_factory",
    "store",
    "reopen",
    "open_target",
    "raw_sql",
    "TestMessages",
    "TestStoresAndSessions",
    "TestWriting",
    "TestReading",
    "TestCompaction",
    "TestSearch",
    "TestChangeFeed",
    "TestAppendMany",
    "TestImports",
    "TestTransactions",
    "TestRunsEventsRecords",
    "TestTreeReadModel",
    "TestScan",
    "TestCapabilities",
    "TestBadInput",
    "TestBadInputProperties",
]

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def msg(mid: str, text: str = "", role: str = "user", **extra) -> dict:
    """A text message."""
    m = {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}
    m.update(extra)
    return m


def chain(session, n: int, prefix: str = "m", text=None) -> list[str]:
    ids = []
    for i in range(n):
        mid = f"{prefix}{i}"
        role = "user" if i % 2 == 0 else "assistant"
        session.append(msg(mid, text(i) if text else f"message number {i}", role))
        ids.append(mid)
    return ids


def ids_of(messages) -> list[str]:
    return [m["id"] for m in messages]


def strip_created(m: dict) -> dict:
    return {k: v for k, v in m.items() if k != "createdAt"}


def snapshot_store(store, session_ids=("", "s", "t")) -> dict:
    """Everything observable about some sessions, to check that a failed write changed nothing."""
    out = {}
    for sid in session_ids:
        s = store.session(sid)
        out[sid] = {
            "len": len(s),
            "history": s.get_history(compacted=False),
            "compactions": s.compactions(),
        }
    stats = store.stats()
    out["stats"] = {k: stats[k] for k in ("sessions", "messages", "compactions", "blobs")}
    return out


def b64_payload(n: int, seed: str = "x") -> tuple[bytes, str]:
    raw = hashlib.sha256(seed.encode()).digest() * (n // 32 + 1)
    raw = raw[:n]
    return raw, base64.b64encode(raw).decode("ascii")


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture
def store_factory(make_store):
    """Open fresh stores with options; all are closed after the test."""
    opened = []

    def factory(**options):
        st = make_store(**options)
        opened.append(st)
        return st

    yield factory
    for st in opened:
        st.close()


@pytest.fixture
def store(store_factory):
    """A fresh, empty store."""
    return store_factory()


@pytest.fixture
def open_target():
    """How ``reopen`` opens a target again: ``sk.open_store`` (an API wrapping the store
    overrides it, so the suite reopens through that API)."""
    return sk.open_store


@pytest.fixture
def reopen(open_target):
    """``reopen(store, expect_error=None)``: close a store and open its target again.

    Returns the new store, ``"refused"`` when ``expect_error`` was raised, or
    None for stores that keep nothing after close (in memory).
    """
    opened = []

    def do(st, expect_error=None):
        path = st.path
        engine = st.engine
        st.close()
        if path is None:
            return None
        target = path if engine == "postgresql" else f"{engine}:///{path}"
        if expect_error is not None:
            with pytest.raises(expect_error):
                opened.append(open_target(target))
            return "refused"
        again = open_target(target)
        opened.append(again)
        return again

    yield do
    for st in opened:
        st.close()


@pytest.fixture
def raw_sql():
    """Engine-specific raw access: ``raw_sql(store, "tables"|"version"|"bump"|"garbage")`` (``bump``
    records a newer schema version, ``garbage`` a version that is not a number); None when unsupported."""
    return lambda store, what: None


# ---------------------------------------------------------------------------
class TestMessages:
    """SPEC 1: message shape, validation, round trip, size, payloads, tokens."""

    def test_M1_parts_of_every_kind_round_trip(self, store):
        s = store.session("s")
        m = {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "hello"},
                {"type": "reasoning", "text": "thinking..."},
                {"type": "tool-weather", "toolCallId": "c1", "input": {"city": "Oslo"},
                 "output": {"temp": -3.5}, "state": "output-available"},
                {"type": "file", "mediaType": "text/plain", "url": "https://example.org/a.txt"},
                {"type": "data-custom", "payload": [1, 2, {"x": None}]},
            ],
            "metadata": {"model": "m", "nested": {"k": [True, False]}},
            "unknownKey": {"kept": 1},
        }
        s.append(m)
        got = s.get("a1")
        assert strip_created(got) == m

    @pytest.mark.parametrize(
        "bad, field",
        [
            ({"role": "user", "parts": []}, "id"),
            ({"id": "", "role": "user", "parts": []}, "id"),
            ({"id": "x", "parts": []}, "role"),
            ({"id": "x", "role": "user"}, "parts"),
            ({"id": "x", "role": "user", "parts": "text"}, "parts"),
            ({"id": "x", "role": "user", "parts": [{"text": "no type"}]}, "type"),
            ({"id": "x", "role": "user", "parts": [{"type": 3}]}, "type"),
            ({"id": "x", "role": "user", "parts": [], "createdAt": "yesterday"}, "createdAt"),
            ({"id": "x", "role": "user", "parts": [], "createdAt": "2024-13-01T00:00:00.000Z"}, "createdAt"),
        ],
    )
    def test_M2_invalid_message_names_the_field_and_stores_nothing(self, store, bad, field):
        s = store.session("s")
        s.append(msg("keep"))
        before = snapshot_store(store)
        with pytest.raises(sk.InvalidMessage) as info:
            s.append(bad)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, sk.SessionKitError)
        assert field in str(info.value)
        assert snapshot_store(store) == before

    @pytest.mark.parametrize("bad", [None, "text", 42, ["id", "x"]])
    def test_M2_not_a_dict_is_type_error(self, store, bad):
        s = store.session("s")
        before = snapshot_store(store)
        with pytest.raises(TypeError):
            s.append(bad)
        assert snapshot_store(store) == before

    @pytest.mark.parametrize(
        "value", [{1, 2}, object(), float("nan"), float("inf")], ids=["set", "object", "nan", "inf"]
    )
    def test_M2_json_unencodable_is_type_error(self, store, value):
        s = store.session("s")
        s.append(msg("keep"))
        before = snapshot_store(store)
        bad = msg("bad", metadata={"v": value})
        with pytest.raises(TypeError):
            s.append(bad)
        assert snapshot_store(store) == before
        assert s.get("bad") is None

    def test_M2_invalid_in_every_write_path(self, store):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        with pytest.raises(sk.InvalidMessage):
            s.import_message({"id": "x", "role": "user"})
        with pytest.raises(sk.InvalidMessage):
            s.update({"id": "a", "role": "user", "parts": "nope"})
        assert snapshot_store(store) == before

    def test_M3_created_at_added_when_missing(self, store):
        s = store.session("s")
        res = s.append(msg("a"))
        got = s.get("a")
        assert ISO_MS.match(got["createdAt"]), got["createdAt"]
        assert res.message["createdAt"] == got["createdAt"]
        stamp = _dt.datetime.strptime(got["createdAt"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.UTC)
        assert abs((_dt.datetime.now(_dt.UTC) - stamp).total_seconds()) < 120

    def test_M3_writer_created_at_kept(self, store):
        s = store.session("s")
        s.append(msg("a", createdAt="2020-01-02T03:04:05.678Z"))
        assert s.get("a")["createdAt"] == "2020-01-02T03:04:05.678Z"

    def test_M3_reads_return_fresh_copies(self, store):
        s = store.session("s")
        original = msg("a", metadata={"tags": ["x"]})
        res = s.append(original)
        original["parts"][0]["text"] = "changed by caller"
        res.message["parts"][0]["text"] = "changed result"
        got = s.get("a")
        got["metadata"]["tags"].append("y")
        got["parts"].append({"type": "text", "text": "more"})
        for read in (s.get("a"), s.get_history()[0], next(s.history()), s.latest_leaf()):
            assert read["parts"] == [{"type": "text", "text": "text of a"}]
            assert read["metadata"] == {"tags": ["x"]}

    def test_M3_json_semantics_tuples_become_lists(self, store):
        s = store.session("s")
        s.append({"id": "a", "role": "user", "parts": [{"type": "text", "text": "t", "extra": (1, 2)}]})
        assert s.get("a")["parts"][0]["extra"] == [1, 2]

    def test_M3_unicode_round_trip(self, store):
        s = store.session("s")
        text = "naïve café — 日本語 🚀 \u0000 null byte and \U0001f600"
        s.append(msg("u", text))
        assert s.get("u")["parts"][0]["text"] == text

    def test_M4_large_message_round_trips(self, store):
        s = store.session("s")
        big = "".join(f"line {i} with some words é\n" for i in range(200_000))  # ~5 MB
        s.append(msg("big", big))
        s.append(msg("after"))
        assert s.get("big")["parts"][0]["text"] == big
        assert ids_of(s.get_history()) == ["big", "after"]
        assert s.get_history()[0]["parts"][0]["text"] == big

    def test_M4_max_message_bytes(self, store_factory):
        store = store_factory(max_message_bytes=2000)
        s = store.session("s")
        s.append(msg("small", "x" * 100))
        before = snapshot_store(store)
        with pytest.raises(sk.MessageTooLarge) as info:
            s.append(msg("big", "x" * 5000))
        assert isinstance(info.value, sk.SessionKitError)
        assert snapshot_store(store) == before
        assert s.get("big") is None

    def test_M5_inline_payloads_are_deduplicated_and_restored_exactly(self, store):
        s = store.session("s")
        raw, b64 = b64_payload(10_000, "img")
        as_url = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + b64}
        as_data = {"type": "file", "mediaType": "image/png", "data": b64}
        s.append({"id": "a", "role": "user", "parts": [as_url]})
        s.append({"id": "b", "role": "user", "parts": [as_data, {"type": "text", "text": "see"}]})
        store.session("other").append({"id": "c", "role": "user", "parts": [dict(as_url)]})
        stats = store.stats()
        assert stats["blobs"] == 1
        assert stats["blob_bytes"] == len(raw)
        assert s.get("a")["parts"] == [as_url]
        assert s.get("b")["parts"][0] == as_data
        assert store.session("other").get("c")["parts"] == [as_url]
        assert ids_of(s.get_history()) == ["a", "b"]
        assert s.get_history()[0]["parts"] == [as_url]

    def test_M5_small_or_noncanonical_payloads_stay_inline(self, store):
        s = store.session("s")
        _, small = b64_payload(1000, "small")
        _, big = b64_payload(9000, "big")
        wrapped = "\n".join(big[i:i + 76] for i in range(0, len(big), 76))  # MIME line breaks
        parts = [
            {"type": "file", "mediaType": "image/png", "data": small},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + wrapped},
        ]
        s.append({"id": "a", "role": "user", "parts": parts})
        assert s.get("a")["parts"] == parts
        assert store.stats()["blobs"] == 0

    def test_M5_payload_removed_with_its_last_message(self, store):
        s = store.session("s")
        _, b64 = b64_payload(8000, "gone")
        s.append({"id": "a", "role": "user", "parts": [{"type": "file", "mediaType": "x/y", "data": b64}]})
        s.append({"id": "b", "role": "user", "parts": [{"type": "file", "mediaType": "x/y", "data": b64}]},
                 parent_id=None)
        assert store.stats()["blobs"] == 1
        s.delete("a")
        assert store.stats()["blobs"] == 1
        assert s.get("b")["parts"][0]["data"] == b64
        s.delete("b")
        assert store.stats()["blobs"] == 0

    def test_M6_token_estimate(self, store):
        from sessionkit.messages import estimate_tokens

        s = store.session("s")
        text = "The quick brown fox jumps over the lazy dog " * 10
        m = {
            "id": "t",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": text},
                {"type": "reasoning", "text": "a b c d e f"},
                {"type": "tool-search", "toolCallId": "1", "input": {"q": "fox"}, "output": ["r1", "r2"],
                 "state": "output-available"},
                {"type": "file", "mediaType": "text/plain", "url": "https://x.invalid/" + "y" * 500},
            ],
        }
        strings = [text, "a b c d e f", json.dumps({"q": "fox"}, separators=(",", ":")),
                   json.dumps(["r1", "r2"], separators=(",", ":"))]
        chars = sum(len(x) for x in strings)
        words = sum(len(x.split()) for x in strings)
        expected = math.ceil(max(chars / 4, words * 1.3)) + 4
        assert estimate_tokens(m) == expected
        s.append(m)
        assert s.context_tokens() == expected
        df_free = [x for x in s.get_history()]
        assert len(df_free) == 1


# ---------------------------------------------------------------------------
class TestStoresAndSessions:
    """SPEC 2: stores, sessions, listing, stats, durability basics, schema."""

    def test_S1_context_manager_and_close(self, store):
        with store as st:
            assert st is store
            st.session("s").append(msg("a"))
        with pytest.raises(sk.StoreClosed):
            store.session("s")
        with pytest.raises(sk.StoreClosed):
            store.stats()
        store.close()  # idempotent
        assert isinstance(sk.StoreClosed("x"), sk.SessionKitError)

    def test_S1_session_handle_use_after_close(self, store):
        s = store.session("s")
        s.append(msg("a"))
        store.close()
        with pytest.raises(sk.StoreClosed):
            s.append(msg("b"))
        with pytest.raises(sk.StoreClosed):
            s.get_history()

    def test_S1_unknown_target_is_value_error(self):
        for bad in ("notes.txt", "mysql://x", "store", ""):
            with pytest.raises(ValueError):
                sk.open_store(bad)
        with pytest.raises(TypeError):
            sk.open_store(42)

    def test_S2_session_handle_is_cached(self, store):
        a = store.session("x")
        a.compact_after(123)
        assert store.session("x") is a
        assert store.session() is store.session("")
        assert store.session().session_id == ""
        assert a.session_id == "x"

    def test_S2_settings_outlive_the_handle(self, store):
        # store.session(id) holds handles only while in use; one given a compaction
        # function and threshold keeps them for the next store.session(id)
        calls = []
        store.session("kept").on_compaction(lambda m, ctx: calls.append(ctx.leaf_id)).compact_after(0)
        gc.collect()
        store.session("kept").append(msg("k1", "word " * 20))
        assert calls == ["k1"]
        assert store.session("kept") is store.session("kept")
        store.session("other").append(msg("o1", "word " * 20))  # no settings: nothing runs
        assert calls == ["k1"]

    def test_S2_sessions_share_nothing(self, store):
        a, b = store.session("a"), store.session("b")
        a.append(msg("same", "alpha words"))
        b.append(msg("same", "beta words"))
        a.append(msg("only-a", "alpha again"))
        assert a.get("same")["parts"][0]["text"] == "alpha words"
        assert b.get("same")["parts"][0]["text"] == "beta words"
        assert b.get("only-a") is None
        assert len(a) == 2 and len(b) == 1
        assert ids_of(b.get_history()) == ["same"]
        assert {h.id for h in b.search("words")} == {"same"}
        assert all(h.session_id == "b" for h in b.search("words"))
        assert {h.session_id for h in store.search("words")} == {"a", "b"}
        with pytest.raises(sk.MessageNotFound):
            b.append(msg("x"), parent_id="only-a")

    def test_S3_list_sessions_newest_activity_first(self, store):
        store.session("old").append(msg("1"))
        store.session("new").append(msg("1"))
        store.session("empty")
        store.session("old").append(msg("2"))
        infos = store.list_sessions()
        assert [i.id for i in infos] == ["old", "new"]
        assert infos[0].message_count == 2 and infos[1].message_count == 1
        for info in infos:
            assert ISO_MS.match(info.created_at) and ISO_MS.match(info.updated_at)
            assert info.created_at <= info.updated_at

    def test_S3_delete_session(self, store):
        a, b = store.session("a"), store.session("b")
        chain(a, 3)
        chain(b, 2)
        a.search("message")  # build the index
        store.delete_session("a")
        assert len(a) == 0
        assert [i.id for i in store.list_sessions()] == ["b"]
        assert store.search("message", session_id="a") == []
        assert len(store.search("message")) == 2
        with pytest.raises(sk.SessionNotFound) as info:
            store.delete_session("a")
        assert isinstance(info.value, LookupError)
        with pytest.raises(sk.SessionNotFound):
            store.delete_session("never")

    def test_S4_stats(self, store):
        st = store.stats()
        for key in ("sessions", "messages", "compactions", "blobs", "blob_bytes", "indexed_messages", "bytes"):
            assert key in st
        assert st["sessions"] == 0 and st["messages"] == 0
        chain(store.session("a"), 3)
        chain(store.session("b"), 2)
        st = store.stats()
        assert st["sessions"] == 2 and st["messages"] == 5
        assert st["indexed_messages"] == 0

    def test_S5_threads_share_one_store(self, store):
        errors = []

        def work(t):
            try:
                s = store.session(f"t{t}")
                for i in range(50):
                    s.append(msg(f"{t}-{i}"))
                    store.session("shared").append(msg(f"{t}-{i}"), parent_id=None)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for k in range(4):
            s = store.session(f"t{k}")
            assert ids_of(s.get_history()) == [f"{k}-{i}" for i in range(50)]
        assert len(store.session("shared")) == 200

    def test_S5_appends_survive_reopen(self, store, reopen):
        s = store.session("s")
        chain(s, 5)
        again = reopen(store)
        if again is None:
            pytest.skip("this engine keeps nothing after close (in-memory)")
        assert ids_of(again.session("s").get_history()) == [f"m{i}" for i in range(5)]
        again.close()

    def test_S6_schema_version_and_prefix(self, store, reopen, raw_sql):
        tables = raw_sql(store, "tables")
        if tables is None:
            pytest.skip("engine gives no raw access")
        assert tables and all(t.startswith("sessionkit_") for t in tables)
        assert raw_sql(store, "version") >= 1

    def test_S6_newer_schema_refused(self, store, reopen, raw_sql):
        if raw_sql(store, "version") is None:
            pytest.skip("engine gives no raw access")
        raw_sql(store, "bump")
        again = reopen(store, expect_error=sk.SchemaVersionError)
        if again is None:
            pytest.skip("in-memory store cannot be reopened")

    def test_S13_a_garbage_schema_version_is_StoreCorrupt(self, store, reopen, raw_sql):
        if raw_sql(store, "version") is None:
            pytest.skip("engine gives no raw access")
        raw_sql(store, "garbage")
        again = reopen(store, expect_error=sk.StoreCorrupt)
        if again is None:
            pytest.skip("in-memory store cannot be reopened")

    def test_S13_reads_racing_deletes_see_before_or_after(self, store):
        """A reader never gets an error from a delete in another thread: each read is a
        state the store was in (a path is a chain of parent and child), or the message
        is gone (MessageNotFound for an explicit leaf that was deleted)."""
        s = store.session("race")
        s.append(msg("root", "common words here"))
        stop = threading.Event()
        errors: list[BaseException] = []

        def writer():
            try:
                for r in range(25):
                    ids = [f"b{r}-{i}" for i in range(6)]
                    parent = "root"
                    for mid in ids:
                        s.append(msg(mid, "common words here"), parent_id=parent)
                        parent = mid
                    s.delete(ids[0], subtree=True)
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                stop.set()

        def check_path(path, whole=True):
            # a chain from the root; a stream may end early where a message was deleted
            assert path and path[0]["id"] == "root" or not whole
            for a, b in zip(path, path[1:]):
                assert b["id"].split("-")[0] == a["id"].split("-")[0] or a["id"] == "root"

        def reader():
            try:
                while not stop.is_set():
                    check_path(s.get_history())
                    check_path(list(s.history()) or [{"id": "root"}])  # a prefix of the path
                    newest = list(s.history(newest_first=True))
                    check_path(newest[::-1], whole=False)  # a suffix of the path
                    for m in s.branches("root"):
                        assert m["id"].endswith("-0")
                    for hit in s.search("common words"):
                        assert hit.content == "common words here"
                    for hit in store.search("common"):
                        assert hit.session_id == "race"
                    window = s.recent_history(10**6)
                    if window.messages:
                        assert window.messages[-1]["id"] == window.messages[-1]["id"]
                    leaf = s.latest_leaf()
                    if leaf is not None and leaf["id"] != "root":
                        try:
                            check_path(s.get_history(leaf_id=leaf["id"]))
                        except sk.MessageNotFound:
                            pass  # deleted after the leaf was read: the state after
            except BaseException as exc:  # reported below
                errors.append(exc)

        s.search("common")  # the index exists, so every write keeps it
        threads = [threading.Thread(target=writer), threading.Thread(target=reader),
                   threading.Thread(target=reader)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors


# ---------------------------------------------------------------------------
class TestWriting:
    """SPEC 3: append, import, latest leaf, update, delete, clear."""

    def test_W1_default_attaches_to_latest_leaf(self, store):
        s = store.session("s")
        r = s.append(msg("a"))
        assert r.inserted is True
        assert strip_created(r.message) == msg("a")
        s.append(msg("b", role="assistant"))
        s.append(msg("c"))
        assert ids_of(s.get_history()) == ["a", "b", "c"]
        assert s.branches("a")[0]["id"] == "b"

    def test_W1_explicit_parent_makes_branch(self, store):
        s = store.session("s")
        chain(s, 3)  # m0 m1 m2
        s.append(msg("alt", role="assistant"), parent_id="m0")
        assert ids_of(s.branches("m0")) == ["m1", "alt"]
        assert ids_of(s.get_history()) == ["m0", "alt"]
        assert ids_of(s.get_history(leaf_id="m2")) == ["m0", "m1", "m2"]

    def test_W1_new_root(self, store):
        s = store.session("s")
        chain(s, 2)
        s.append(msg("root2"), parent_id=None)
        assert ids_of(s.get_history()) == ["root2"]
        assert s.path_length() == 1

    def test_W1_unknown_parent(self, store):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound) as info:
            s.append(msg("b"), parent_id="nope")
        assert isinstance(info.value, LookupError)
        assert "nope" in str(info.value)
        assert snapshot_store(store) == before

    def test_W1_duplicate_id_first_write_wins(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        first = s.append(msg("a", "first"))
        s.append(msg("b"))
        again = s.append(msg("a", "second"), parent_id=None)
        assert again.inserted is False
        assert again.message["parts"][0]["text"] == "first"
        assert again.message == first.message
        assert len(s) == 2
        assert ids_of(s.get_history()) == ["a", "b"]
        assert [e.type for e in events] == ["append", "append"]

    def test_W1_retry_is_safe_even_with_parent_gone(self, store):
        s = store.session("s")
        s.append(msg("a"))
        s.append(msg("b"), parent_id="a")
        again = s.append(msg("b"), parent_id="zzz")
        assert again.inserted is False

    def test_W2_client_source_strips_reserved_metadata(self, store_factory):
        store = store_factory(reserved_metadata_keys=["cost", "internal"])
        s = store.session("s")
        s.append(msg("c", metadata={"cost": 1, "internal": "x", "kept": 2}), source="client")
        s.append(msg("v", metadata={"cost": 1, "kept": 2}))
        assert s.get("c")["metadata"] == {"kept": 2}
        assert s.get("v")["metadata"] == {"cost": 1, "kept": 2}
        with pytest.raises(ValueError):
            s.append(msg("z"), source="browser")

    def test_W3_import_message(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        t0 = _dt.datetime(2021, 5, 6, 7, 8, 9, 123000, tzinfo=_dt.UTC)
        r = s.import_message(msg("a"), created_at=t0)
        assert r.inserted
        s.import_message(msg("b"), parent_id="a", created_at=1_600_000_000_000)
        assert s.get("a")["createdAt"] == "2021-05-06T07:08:09.123Z"
        assert s.get("b")["createdAt"] == "2020-09-13T12:26:40.000Z"
        assert s.import_message(msg("a", "again")).inserted is False
        assert s.get("a")["parts"][0]["text"] == "text of a"
        assert events == []
        with pytest.raises(sk.MessageNotFound):
            s.import_message(msg("c"), parent_id="missing")
        assert ids_of(s.get_history()) == ["a", "b"]
        # imports default to a new root
        s.import_message(msg("r2"))
        assert s.branches("a")[0]["id"] == "b"
        assert ids_of(s.get_history()) == ["r2"]

    def test_W3_import_never_compacts(self, store):
        s = store.session("s")
        calls = []
        s.on_compaction(lambda m, ctx: calls.append(1)).compact_after(0)
        s.import_message(msg("a", "many words " * 50))
        s.import_message(msg("b", "many words " * 50), parent_id="a")
        assert calls == []

    def test_W4_latest_leaf_uses_write_order_not_time(self, store):
        s = store.session("s")
        s.append(msg("a", createdAt="2030-01-01T00:00:00.000Z"))
        s.append(msg("b", createdAt="2000-01-01T00:00:00.000Z"), parent_id=None)
        assert s.latest_leaf()["id"] == "b"
        s.import_message(msg("c", createdAt="1990-01-01T00:00:00.000Z"), parent_id="a")
        assert s.latest_leaf()["id"] == "c"
        s.update(msg("b", "updated"))
        assert s.latest_leaf()["id"] == "c"
        assert store.session("empty").latest_leaf() is None

    def test_W4_latest_leaf_after_deleting_it(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("x"), parent_id="m0")
        s.delete("x")
        assert s.latest_leaf()["id"] == "m2"
        s.append(msg("y"))
        assert ids_of(s.get_history()) == ["m0", "m1", "m2", "y"]

    def test_W5_update_replaces_content_in_place(self, store):
        s = store.session("s")
        chain(s, 3)
        events: list = []
        store.subscribe(events.append)
        created = s.get("m1")["createdAt"]
        s.update(msg("m1", "rewritten", role="assistant", metadata={"edited": True}))
        got = s.get("m1")
        assert got["parts"][0]["text"] == "rewritten"
        assert got["metadata"] == {"edited": True}
        assert got["createdAt"] == created
        assert ids_of(s.get_history()) == ["m0", "m1", "m2"]
        assert [e.type for e in events] == ["update"]
        assert events[0].message_ids == ("m1",)
        with pytest.raises(sk.MessageNotFound):
            s.update(msg("nope"))

    def test_W5_update_changes_sizes_seen_by_windows(self, store):
        s = store.session("s")
        chain(s, 3)
        before = s.recent_history(10**9).total_content_bytes
        s.update(msg("m0", "x" * 5000))
        after = s.recent_history(10**9).total_content_bytes
        assert after > before + 4000
        assert s.recent_history(10**9, leaf_id="m2").total_content_bytes == after

    def test_W6_delete_leaf_and_refusals(self, store):
        s = store.session("s")
        chain(s, 3)
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound):
            s.delete(["m2", "ghost"])
        with pytest.raises(ValueError):
            s.delete("m1")
        assert snapshot_store(store) == before
        s.delete("m2")
        assert ids_of(s.get_history()) == ["m0", "m1"]
        s.delete(["m1", "m0"])  # parent and child together
        assert len(s) == 0

    def test_W6_delete_subtree(self, store):
        s = store.session("s")
        chain(s, 4)
        s.append(msg("alt"), parent_id="m1")
        s.append(msg("alt2"), parent_id="alt")
        events: list = []
        store.subscribe(events.append)
        s.delete("m1", subtree=True)
        assert ids_of(s.get_history(compacted=False)) == ["m0"]
        assert len(s) == 1
        assert events[0].type == "delete"
        assert set(events[0].message_ids) == {"m1", "m2", "m3", "alt", "alt2"}

    def test_W6_clear(self, store):
        s, other = store.session("s"), store.session("o")
        chain(s, 6)
        chain(other, 2)
        s.on_compaction(lambda m, c: sk.CompactionResult("m1", "m3", "sum")).compact()
        s.search("message")
        s.clear()
        assert len(s) == 0 and s.compactions() == [] and s.get_history() == []
        assert s.search("message") == []
        assert len(other) == 2 and len(other.search("message")) == 2
        s.append(msg("fresh"))
        assert ids_of(s.get_history()) == ["fresh"]


# ---------------------------------------------------------------------------
class TestReading:
    """SPEC 4: history, windows, navigation."""

    def test_R1_history_streams_root_to_leaf(self, store):
        s = store.session("s")
        ids = chain(s, 600)
        it = s.history()
        assert next(it)["id"] == "m0"
        assert ids_of(it) == ids[1:]
        assert ids_of(s.history(newest_first=True)) == ids[::-1]

    def test_R1_newest_first_stops_early(self, store):
        s = store.session("s")
        chain(s, 300)
        it = s.history(newest_first=True)
        got = [next(it)["id"] for _ in range(3)]
        assert got == ["m299", "m298", "m297"]

    def test_R1_generator_does_not_block_writers(self, store):
        s = store.session("s")
        chain(s, 400)
        it = s.history()
        next(it)
        s.append(msg("during"))  # must not deadlock or fail
        rest = list(it)
        assert len(rest) == 399
        assert s.latest_leaf()["id"] == "during"

    def test_R1_unknown_leaf(self, store):
        s = store.session("s")
        chain(s, 2)
        with pytest.raises(sk.MessageNotFound):
            s.history(leaf_id="nope")
        with pytest.raises(sk.MessageNotFound):
            s.get_history(leaf_id="nope")
        with pytest.raises(sk.MessageNotFound):
            s.path_length("nope")
        with pytest.raises(sk.MessageNotFound):
            s.recent_history(100, leaf_id="nope")
        assert store.session("empty").get_history() == []
        assert list(store.session("empty").history(newest_first=True)) == []

    def test_R2_get_history_equals_history(self, store):
        s = store.session("s")
        chain(s, 10)
        s.append(msg("b"), parent_id="m4")
        assert s.get_history() == list(s.history())
        assert s.get_history(leaf_id="m9") == list(s.history(leaf_id="m9"))

    def test_R3_recent_history_window(self, store):
        s = store.session("s")
        ids = chain(s, 50, text=lambda i: "w" * (100 + i))
        full = s.get_history()
        sizes = [len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()) for m in full]
        total = sum(sizes)
        r = s.recent_history(total)
        assert ids_of(r.messages) == ids and r.truncated is False
        assert r.total_content_bytes == total
        budget = sum(sizes[-7:])
        r = s.recent_history(budget)
        assert ids_of(r.messages) == ids[-7:] and r.truncated is True
        assert r.total_content_bytes == total
        r = s.recent_history(budget + sizes[-8] - 1)
        assert ids_of(r.messages) == ids[-7:]
        r = s.recent_history(0)
        assert ids_of(r.messages) == ids[-1:]
        r = s.recent_history(0, min_messages=5)
        assert ids_of(r.messages) == ids[-5:]
        r = s.recent_history(10, min_messages=500)
        assert ids_of(r.messages) == ids and r.truncated is False
        r = s.recent_history(sum(sizes[10:20]), leaf_id="m19")
        assert ids_of(r.messages) == ids[10:20]
        assert r.total_content_bytes == sum(sizes[:20])
        empty = store.session("e").recent_history(100)
        assert empty.messages == [] and empty.truncated is False and empty.total_content_bytes == 0
        with pytest.raises(ValueError):
            s.recent_history(-1)

    @staticmethod
    def _expected_window(path, max_bytes, min_messages):
        """The longest suffix of ``path`` within ``max_bytes`` (at least ``min_messages``)."""
        sizes = [len(json.dumps(m, ensure_ascii=False, separators=(",", ":")).encode()) for m in path]
        out: list = []
        total = 0
        for m, size in zip(reversed(path), reversed(sizes)):
            if len(out) >= min_messages and total + size > max_bytes:
                break
            out.append(m)
            total += size
        return out[::-1], sizes

    def test_R3_the_window_is_a_suffix_of_the_compacted_path(self, store):
        s = store.session("s")
        chain(s, 40, text=lambda i: "w" * (50 + 7 * i))
        # a branch that shares a compacted prefix, and one compaction inside another's
        # range that a newer, overlapping one replaces on read
        s.append(msg("b1", "a branch " * 30), parent_id="m25")
        s.append(msg("b2", "on the branch " * 10))
        s.on_compaction(_summary_fn("m2", "m9")).compact(leaf_id="m39")
        s.on_compaction(_summary_fn("m12", "m20")).compact(leaf_id="m39")
        s.on_compaction(_summary_fn("m18", "m30")).compact(leaf_id="m39")  # newer, overlaps the one before
        s.on_compaction(_summary_fn("m26", "m33")).compact(leaf_id="m39")  # on the main path only
        for leaf in ("m39", "b2", "m22", "m5"):
            path = s.get_history(leaf_id=leaf)
            raw_total = sum(n.bytes for n in s.path(leaf).nodes)
            for min_messages in (1, 3):
                for budget in [0, 500, 1500, 4000, 9000, 10**7]:
                    expected, _ = self._expected_window(path, budget, min_messages)
                    got = s.recent_history(budget, min_messages=min_messages, leaf_id=leaf)
                    assert got.messages == expected, (leaf, budget, min_messages)
                    assert got.truncated == (len(expected) < len(path))
                    assert got.total_content_bytes == raw_total
        assert ids_of(s.recent_history(10**7).messages) == ids_of(s.get_history())  # the latest leaf: b2
        raw = s.recent_history(10**7, compacted=False)
        assert ids_of(raw.messages) == ids_of(s.get_history(compacted=False))

    def test_R3_a_summary_counts_with_its_own_size(self, store):
        s = store.session("s")
        chain(s, 12, text=lambda i: "x" * 400)
        comp = s.on_compaction(_summary_fn("m0", "m8")).compact()
        path = s.get_history()
        overlay = path[0]
        assert overlay["id"] == f"compaction:{comp.id}"
        _, sizes = self._expected_window(path, 0, 1)
        # exactly the summary and what follows it fits: the whole compacted path, not truncated
        got = s.recent_history(sum(sizes))
        assert got.messages == path and got.truncated is False
        got = s.recent_history(sum(sizes) - 1)  # one byte short: the summary is left out
        assert got.messages == path[1:] and got.truncated is True

    def test_R3_sizes_include_payloads_and_split_rows(self, store):
        s = store.session("s")
        _, b64 = b64_payload(20_000, "p")
        m = {"id": "p", "role": "user", "parts": [{"type": "file", "mediaType": "a/b", "data": b64}]}
        s.append(m)
        r = s.recent_history(1000)
        assert r.total_content_bytes > 20_000
        assert len(r.messages) == 1

    def test_R4_roots_and_nodes(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("r2", "second tree"), parent_id=None)
        s.append(msg("x"), parent_id="m0")
        assert ids_of(s.roots()) == ["m0", "r2"]
        nodes = s.nodes()
        assert [n.id for n in nodes] == ["m0", "m1", "m2", "r2", "x"]
        by_id = {n.id: n for n in nodes}
        assert by_id["x"].parent_id == "m0" and by_id["x"].depth == 1
        assert by_id["m2"].depth == 2 and by_id["r2"].parent_id is None
        assert [n.seq for n in nodes] == sorted(n.seq for n in nodes)
        from sessionkit.messages import estimate_tokens

        assert by_id["m1"].tokens == estimate_tokens(s.get("m1"))
        assert by_id["m1"].role == "assistant"
        assert store.session("empty").nodes() == [] and store.session("empty").roots() == []

    def test_R4_navigation(self, store):
        s = store.session("s")
        chain(s, 3)
        s.append(msg("x"), parent_id="m0")
        s.append(msg("y"), parent_id="m0")
        assert s.get("m1")["id"] == "m1" and s.get("nope") is None
        assert s.latest_leaf()["id"] == "y"
        assert ids_of(s.branches("m0")) == ["m1", "x", "y"]
        assert s.branches("m2") == []
        with pytest.raises(sk.MessageNotFound):
            s.branches("nope")
        assert s.path_length() == 2
        assert s.path_length("m2") == 3
        assert len(s) == 5
        assert store.session("e").path_length() == 0
        assert len(store.session("e")) == 0


# ---------------------------------------------------------------------------
def _summary_fn(from_id, to_id, summary="SUMMARY"):
    def fn(messages, ctx):
        return sk.CompactionResult(from_id, to_id, summary)

    return fn


class TestCompaction:
    """SPEC 5: compaction overlays, thresholds, the ready-made function."""

    def test_C1_C5_overlay_on_read_originals_kept(self, store):
        s = store.session("s")
        ids = chain(s, 8)
        comp = s.on_compaction(_summary_fn("m2", "m5", "the middle")).compact()
        assert isinstance(comp, sk.Compaction)
        assert (comp.from_id, comp.to_id, comp.summary) == ("m2", "m5", "the middle")
        hist = s.get_history()
        assert ids_of(hist) == ["m0", "m1", f"compaction:{comp.id}", "m6", "m7"]
        overlay = hist[2]
        assert overlay["role"] == "assistant"
        assert overlay["parts"] == [{"type": "text", "text": "the middle"}]
        assert overlay["createdAt"] == comp.created_at and ISO_MS.match(comp.created_at)
        meta = overlay["metadata"]["compaction"]
        assert meta == {"id": comp.id, "from_id": "m2", "to_id": "m5", "messages": 4,
                        "tokens_before": comp.tokens_before}
        assert ids_of(s.get_history(compacted=False)) == ids
        assert len(s) == 8 and s.path_length() == 8
        assert ids_of(s.history(newest_first=True)) == ["m7", "m6", f"compaction:{comp.id}", "m1", "m0"]
        assert ids_of(s.history(newest_first=True, compacted=False)) == ids[::-1]

    def test_C3_compaction_record(self, store):
        s = store.session("s")
        chain(s, 6, text=lambda i: "word " * 40)
        raw = s.get_history(compacted=False)
        from sessionkit.messages import estimate_tokens

        comp = s.on_compaction(_summary_fn("m1", "m4", "short")).compact()
        assert comp.tokens_before == sum(estimate_tokens(m) for m in raw[1:5])
        assert comp.tokens_after == estimate_tokens(s.get_history()[1])
        assert comp.tokens_after < comp.tokens_before
        assert s.compactions() == [comp]
        assert store.stats()["compactions"] == 1

    def test_C3_compact_without_function(self, store):
        s = store.session("s")
        chain(s, 3)
        with pytest.raises(sk.UsageError):
            s.compact()

    def test_C3_function_may_decline(self, store):
        s = store.session("s")
        chain(s, 3)
        assert s.on_compaction(lambda m, c: None).compact() is None
        assert s.compactions() == []

    def test_C3_bad_ranges_refused(self, store):
        s = store.session("s")
        chain(s, 5)
        s.append(msg("side"), parent_id="m1")
        for a, b in (("m3", "m1"), ("m0", "ghost"), ("m0", "side")):
            with pytest.raises(ValueError):
                s.on_compaction(_summary_fn(a, b)).compact(leaf_id="m4")
        assert s.compactions() == []

    def test_C2_auto_compaction_threshold(self, store):
        s = store.session("s")
        seen = []

        def fn(messages, ctx):
            seen.append((ids_of(messages), ctx.leaf_id, ctx.tokens, ctx.previous, ctx.session))
            return sk.CompactionResult(messages[0]["id"], messages[-2]["id"], "S")

        assert s.on_compaction(fn) is s
        assert s.compact_after(200) is s
        for i in range(6):
            s.append(msg(f"m{i}", "word " * 30))
            if i < 3:
                assert seen == []
        assert seen, "threshold crossed but function not called"
        first_ids, leaf, tokens, previous, sess = seen[0]
        assert sess is s and previous is None and tokens > 200
        assert leaf == first_ids[-1]
        assert s.context_tokens() <= tokens

    def test_C2_previous_and_overlay_passed_on(self, store):
        s = store.session("s")
        chain(s, 6)
        first = s.on_compaction(_summary_fn("m1", "m3", "S1")).compact()
        seen = {}

        def fn(messages, ctx):
            seen["ids"] = ids_of(messages)
            seen["previous"] = ctx.previous
            return sk.CompactionResult(messages[1]["id"], messages[-2]["id"], "S2")

        s.on_compaction(fn)
        s.append(msg("m6"))
        second = s.compact()
        assert seen["ids"] == ["m0", f"compaction:{first.id}", "m4", "m5", "m6"]
        assert seen["previous"] == first
        # starting at the overlay maps back to the original start, so the newer one replaces it
        assert (second.from_id, second.to_id) == ("m1", "m5")
        assert ids_of(s.get_history()) == ["m0", f"compaction:{second.id}", "m6"]
        assert len(s.compactions()) == 2

    def test_C2_failing_function_keeps_conversation(self, store, caplog):
        s = store.session("s")

        def boom(messages, ctx):
            raise RuntimeError("summarizer down")

        s.on_compaction(boom).compact_after(0)
        r = s.append(msg("a"))
        assert r.inserted
        assert ids_of(s.get_history()) == ["a"]
        assert s.compactions() == []
        assert "summarizer down" in caplog.text or "compaction" in caplog.text.lower()

    def test_C2_duplicate_append_does_not_trigger(self, store):
        s = store.session("s")
        s.append(msg("a"))
        calls = []
        s.on_compaction(lambda m, c: calls.append(1)).compact_after(0)
        s.append(msg("a"))
        assert calls == []

    def test_C5_branch_local_and_shared_prefix(self, store):
        s = store.session("s")
        chain(s, 4)  # m0..m3
        s.append(msg("b2"), parent_id="m1")  # branch B: m0 m1 b2
        s.append(msg("b3"), parent_id="b2")
        shared = s.on_compaction(_summary_fn("m0", "m1", "prefix")).compact(leaf_id="m3")
        on_a = s.on_compaction(_summary_fn("m1", "m3", "branch A")).compact(leaf_id="m3")
        # newest on A overlaps the shared one: it wins there
        assert ids_of(s.get_history(leaf_id="m3")) == ["m0", f"compaction:{on_a.id}"]
        # B sees the shared prefix summary and is untouched by A's
        assert ids_of(s.get_history(leaf_id="b3")) == [f"compaction:{shared.id}", "b2", "b3"]

    def test_C5_newer_same_start_replaces(self, store):
        s = store.session("s")
        chain(s, 8)
        c1 = s.on_compaction(_summary_fn("m1", "m3", "one")).compact()
        c2 = s.on_compaction(_summary_fn("m1", "m5", "two")).compact()
        hist = s.get_history()
        assert ids_of(hist) == ["m0", f"compaction:{c2.id}", "m6", "m7"]
        assert c1 in s.compactions() and c2 in s.compactions()

    def test_C5_compaction_dropped_when_range_deleted(self, store):
        s = store.session("s")
        chain(s, 5)
        s.on_compaction(_summary_fn("m2", "m4")).compact()
        s.delete("m4")
        assert s.compactions() == []
        assert ids_of(s.get_history()) == ["m0", "m1", "m2", "m3"]

    def test_C2_threshold_check_uses_compacted_tokens(self, store):
        s = store.session("s")
        chain(s, 6, text=lambda i: "word " * 100)
        s.on_compaction(_summary_fn("m0", "m4", "tiny")).compact()
        calls = []
        s.on_compaction(lambda m, c: calls.append(c.tokens)).compact_after(500)
        s.append(msg("m6", "small"))
        assert calls == []  # raw path is ~900 tokens; compacted is far below 500

    def test_C4_create_compact_function(self, store):
        prompts = []

        def summarize(prompt):
            prompts.append(prompt)
            return f"summary #{len(prompts)}"

        s = store.session("s")
        fn = sk.create_compact_function(summarize, keep_recent_tokens=150, protect_head=2, min_tail_messages=2)
        s.on_compaction(fn)
        chain(s, 12, text=lambda i: f"turn {i} " + "lorem ipsum dolor " * 10)
        c1 = s.compact()
        assert c1.from_id == "m2"  # head of 2 protected
        hist = s.get_history()
        assert ids_of(hist[:2]) == ["m0", "m1"]
        tail = hist[3:]
        assert len(tail) >= 2
        from sessionkit.messages import estimate_tokens

        assert sum(estimate_tokens(m) for m in tail) <= 150 or len(tail) == 2
        assert "turn 2" in prompts[0] and "turn 0" not in prompts[0]
        chain(s, 6, prefix="n", text=lambda i: f"later {i} " + "lorem ipsum dolor " * 10)
        c2 = s.compact()
        assert c2.from_id == "m2"  # extends the first summary
        assert "summary #1" in prompts[1]
        hist = s.get_history()
        assert [m["id"] for m in hist].count(f"compaction:{c2.id}") == 1
        assert not any(m["id"] == f"compaction:{c1.id}" for m in hist)

    def test_C4_no_tail_kept_when_asked(self, store):
        s = store.session("s")
        chain(s, 5)
        fn = sk.create_compact_function(lambda p: "all", keep_recent_tokens=0, protect_head=0, min_tail_messages=0)
        comp = s.on_compaction(fn).compact()
        assert (comp.from_id, comp.to_id) == ("m0", "m4")
        assert ids_of(s.get_history()) == [f"compaction:{comp.id}"]

    def test_C4_async_summarize(self, store):
        async def summarize(prompt):
            await asyncio.sleep(0)
            return "async summary"

        s = store.session("s")
        s.on_compaction(sk.create_compact_function(summarize, keep_recent_tokens=0, protect_head=1))
        chain(s, 6)
        comp = s.compact()
        assert comp.summary == "async summary"

        async def inside_loop():
            s.append(msg("z"))
            return s.compact()

        comp2 = asyncio.run(inside_loop())
        assert comp2.summary == "async summary"

    def test_C4_tool_call_never_separated_from_result(self, store):
        s = store.session("s")
        chain(s, 4, text=lambda i: "x " * 50)
        s.append({"id": "call", "role": "assistant", "parts": [
            {"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}]})
        s.append({"id": "result", "role": "tool", "parts": [
            {"type": "tool-lookup", "toolCallId": "t1", "output": "found " * 5, "state": "output-available"}]})
        s.append(msg("final", "done"))
        fn = sk.create_compact_function(lambda p: "s", keep_recent_tokens=30, protect_head=1, min_tail_messages=1)
        s.on_compaction(fn)
        comp = s.compact()
        hist_ids = ids_of(s.get_history())
        assert ("call" in hist_ids) == ("result" in hist_ids)
        assert comp.to_id not in ("call",)

    # Tool call shapes: (call message, result message), the call third on the path.
    TOOL_PAIRS = {
        "result-message": (
            {"id": "call", "role": "assistant", "parts": [
                {"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}]},
            {"id": "result", "role": "tool", "parts": [
                {"type": "tool-lookup", "toolCallId": "t1", "output": "found " * 40, "state": "output-available"}]},
        ),
        "answered-part-repeated": (
            {"id": "call", "role": "assistant", "parts": [
                {"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"}, "state": "input-available"}]},
            {"id": "result", "role": "assistant", "parts": [
                {"type": "tool-lookup", "toolCallId": "t1", "input": {"q": "a"},
                 "output": {"rows": ["found"] * 40}, "state": "output-available"}]},
        ),
        "error-result": (
            {"id": "call", "role": "assistant", "parts": [
                {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "t1", "input": {}}]},
            {"id": "result", "role": "assistant", "parts": [
                {"type": "dynamic-tool", "toolName": "lookup", "toolCallId": "t1", "input": {},
                 "state": "output-error", "errorText": "failed " * 40}]},
        ),
        "chat-completions": (
            {"id": "call", "role": "assistant", "parts": [],
             "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
            {"id": "result", "role": "tool", "tool_call_id": "t1", "parts": [{"type": "text", "text": "found " * 40}]},
        ),
        "tool-role-without-id": (
            {"id": "call", "role": "assistant", "parts": [{"type": "text", "text": "let me look"}]},
            {"id": "result", "role": "tool", "parts": [{"type": "text", "text": "found " * 40}]},
        ),
    }

    @pytest.mark.parametrize("shape", sorted(TOOL_PAIRS))
    def test_C4_head_keeps_the_result_of_a_call_it_keeps(self, store, shape):
        call, result = self.TOOL_PAIRS[shape]
        s = store.session("s")
        chain(s, 2, prefix="h", text=lambda i: "head words " * 20)
        s.append(call)
        s.append(result)
        chain(s, 6, prefix="n", text=lambda i: f"later {i} " + "lorem ipsum " * 20)
        prompts: list = []

        def summarize(prompt):
            prompts.append(prompt)
            return "S"

        fn = sk.create_compact_function(summarize, keep_recent_tokens=60,
                                        protect_head=3, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        hist = ids_of(s.get_history())
        assert hist[:4] == ["h0", "h1", "call", "result"]  # the call is in the head: its result too
        assert comp.from_id == "n0"
        assert "found" not in prompts[0] and "failed" not in prompts[0]
        # Compacting again extends that summary and still leaves the pair alone.
        chain(s, 4, prefix="m", text=lambda i: f"more {i} " + "lorem ipsum " * 20)
        comp2 = s.compact()
        assert comp2.from_id == "n0"
        assert ids_of(s.get_history())[:4] == ["h0", "h1", "call", "result"]

    @pytest.mark.parametrize("shape", sorted(TOOL_PAIRS))
    def test_C4_tail_keeps_the_call_of_a_result_it_keeps(self, store, shape):
        call, result = self.TOOL_PAIRS[shape]
        s = store.session("s")
        chain(s, 6, text=lambda i: "early words " * 20)
        s.append(call)
        s.append(result)
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=1, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        assert comp.to_id == "m5"  # the result is the tail, so its call is too
        assert ids_of(s.get_history())[-2:] == ["call", "result"]

    def test_C4_pairs_reused_call_ids_with_the_nearest_call(self, store):
        s = store.session("s")
        for turn in range(4):  # some providers number calls per response, so ids repeat
            s.append({"id": f"c{turn}", "role": "assistant", "parts": [
                {"type": "tool-lookup", "toolCallId": "call_0", "input": {"turn": turn}}]})
            s.append({"id": f"r{turn}", "role": "tool", "parts": [
                {"type": "tool-lookup", "toolCallId": "call_0", "output": "row " * 30,
                 "state": "output-available"}]})
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=1, min_tail_messages=1)
        comp = s.on_compaction(fn).compact()
        # The head c0 keeps r0; the tail r3 keeps c3; the pairs between are summarised.
        assert (comp.from_id, comp.to_id) == ("c1", "r2")
        assert ids_of(s.get_history()) == ["c0", "r0", f"compaction:{comp.id}", "c3", "r3"]

    def test_C4_head_pair_reaching_the_tail_leaves_nothing_to_summarise(self, store):
        s = store.session("s")
        s.append(msg("h0", "head"))
        s.append({"id": "call", "role": "assistant", "parts": [
            {"type": "tool-lookup", "toolCallId": "t1", "input": {}, "state": "input-available"}]})
        chain(s, 3, prefix="x", text=lambda i: "between " * 30)
        s.append({"id": "result", "role": "tool", "parts": [
            {"type": "tool-lookup", "toolCallId": "t1", "output": "late", "state": "output-available"}]})
        fn = sk.create_compact_function(lambda p: "S", keep_recent_tokens=0, protect_head=2, min_tail_messages=1)
        assert s.on_compaction(fn).compact() is None
        assert s.compactions() == []


# ---------------------------------------------------------------------------
class TestSearch:
    """SPEC 6: full-text search semantics, safety, lazy index."""

    @pytest.fixture
    def corpus(self, store):
        s = store.session("s")
        s.append(msg("d1", "We are deploying the new service tonight"))
        s.append(msg("d2", "Deployments failed twice last week", role="assistant"))
        s.append(msg("d3", "The cat sat on the mat"))
        s.append(msg("d4", "mat sat cat the on"), parent_id="d1")  # a branch
        s.append({"id": "d5", "role": "assistant", "parts": [
            {"type": "reasoning", "text": "secret deploying thoughts"},
            {"type": "tool-x", "toolCallId": "1", "input": {"q": "deploying"}, "output": "deploying"}]})
        store.session("other").append(msg("o1", "deploying elsewhere"))
        return s

    def test_Q1_stemming_and_case(self, store, corpus):
        hits = corpus.search("DEPLOYING")
        assert {h.id for h in hits} == {"d1", "d2"}
        assert {h.id for h in corpus.search("deployments")} == {"d1", "d2"}

    def test_Q1_hit_fields(self, store, corpus):
        hits = corpus.search("deployments failed")
        assert [h.id for h in hits] == ["d2"]
        h = hits[0]
        assert h.session_id == "s" and h.role == "assistant"
        assert h.content == "Deployments failed twice last week"
        assert "[Deployments]" in h.snippet and "[failed]" in h.snippet
        assert isinstance(h.score, float)

    def test_Q1_all_words_must_occur(self, store, corpus):
        assert {h.id for h in corpus.search("cat mat")} == {"d3", "d4"}
        assert corpus.search("cat deploying") == []

    def test_Q1_phrase(self, store, corpus):
        assert [h.id for h in corpus.search('"cat sat"')] == ["d3"]
        assert {h.id for h in corpus.search('"sat on the mat"')} == {"d3"}
        assert {h.id for h in corpus.search("sat cat")} == {"d3", "d4"}

    def test_Q1_only_text_parts_every_branch_and_compacted(self, store, corpus):
        assert all(h.id != "d5" for h in corpus.search("deploying"))
        corpus.on_compaction(_summary_fn("d1", "d2", "x")).compact(leaf_id="d3")
        assert {h.id for h in corpus.search("deployments")} == {"d1", "d2"}
        assert {h.id for h in corpus.search("mat")} == {"d3", "d4"}

    def test_Q1_ranking_best_first(self, store):
        s = store.session("r")
        s.append(msg("weak", "apple " + "filler words here " * 30))
        s.append(msg("strong", "apple apple apple"))
        hits = s.search("apple")
        assert [h.id for h in hits] == ["strong", "weak"]
        assert hits[0].score >= hits[1].score

    def test_Q1_store_search_and_limit(self, store, corpus):
        assert {h.session_id for h in store.search("deploying")} == {"s", "other"}
        assert [h.session_id for h in store.search("deploying", session_id="other")] == ["other"]
        assert len(store.search("deploying", limit=1)) == 1
        assert store.search("deploying", limit=0) == []

    def test_Q1_session_search_alone_then_beside_others(self, store):
        # A store holding one session, then others interleaved within its range of rows:
        # a session's search keeps to its own messages either way.
        a = store.session("a")
        a.append(msg("a1", "walrus on the ice"))
        assert [h.id for h in a.search("walrus")] == ["a1"]
        b = store.session("b")
        b.append(msg("b1", "walrus in the sea"))
        a.append(msg("a2", "another walrus"))
        store.session("0-first").append(msg("z1", "walrus zero"))
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        assert [h.id for h in b.search("walrus")] == ["b1"]
        b.clear()
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        store.session("0-first").clear()
        assert {h.id for h in a.search("walrus")} == {"a1", "a2"}
        assert b.search("walrus") == []

    @pytest.mark.parametrize("query", [
        "", "   ", '"', '""', '"unbalanced', "AND", "OR NOT", "NEAR(a b)", "a*", "*", "^x", "(", ")",
        "cat:", "col:val", "{a b}", "'", "\\", "-", "+", "\x00", "🚀", "!!! ??? ...", "a" * 5000,
        "cat " * 500, 'cat "sat', "ü" * 10, "deploy* OR 1=1; --",
    ])
    def test_Q2_any_string_is_safe(self, store, corpus, query):
        hits = corpus.search(query)
        assert isinstance(hits, list)
        if not query.strip():
            assert hits == []

    def test_Q1_bounded_candidates_rank_the_newest_matches(self, store):
        s = store.session("s")
        s.append(msg("old-best", "kiwi kiwi kiwi kiwi"))
        for i in range(6):
            s.append(msg(f"n{i}", "kiwi " + "padding words " * (i + 3)))
        assert s.search("kiwi")[0].id == "old-best"
        store.search_candidates = 3
        hits = s.search("kiwi")
        assert {h.id for h in hits} == {"n3", "n4", "n5"}
        assert [h.id for h in hits] == ["n3", "n4", "n5"]  # shorter text ranks higher
        with pytest.raises(ValueError):
            store.search_candidates = 0

    def test_Q3_lazy_index_then_kept_current(self, store):
        s = store.session("s")
        chain(s, 5)
        assert store.stats()["indexed_messages"] == 0
        s.append(msg("x", "zebra crossing"))
        assert store.stats()["indexed_messages"] == 0
        assert [h.id for h in s.search("zebra")] == ["x"]
        assert store.stats()["indexed_messages"] == 6
        s.append(msg("y", "zebra stripes"))
        s.import_message(msg("z", "zebra imported"))
        assert {h.id for h in s.search("zebra")} == {"x", "y", "z"}
        s.update(msg("x", "giraffe now"))
        assert {h.id for h in s.search("zebra")} == {"y", "z"}
        assert [h.id for h in s.search("giraffe")] == ["x"]
        s.delete("z")
        assert {h.id for h in s.search("zebra")} == {"y"}
        s.clear()
        assert s.search("zebra") == [] and s.search("giraffe") == []
        assert store.stats()["indexed_messages"] == 0


# ---------------------------------------------------------------------------
class TestChangeFeed:
    """SPEC 7: subscribe and mirror."""

    def test_F1_every_write_type_reported(self, store):
        events: list = []
        unsub = store.subscribe(events.append)
        s = store.session("s")
        s.append(msg("a"))
        s.append(msg("b"))
        s.update(msg("b", "new"))
        s.on_compaction(_summary_fn("a", "a")).compact()
        s.delete("b")
        store.session("t").append(msg("x"))
        s.clear()
        assert [(e.type, e.session_id) for e in events] == [
            ("append", "s"), ("append", "s"), ("update", "s"), ("compact", "s"), ("delete", "s"),
            ("append", "t"), ("clear", "s"),
        ]
        assert events[0].message_ids == ("a",) and strip_created(events[0].message) == msg("a")
        assert events[2].message["parts"][0]["text"] == "new"
        assert events[4].message_ids == ("b",)
        unsub()
        s.append(msg("after"))
        assert len(events) == 7

    def test_F1_event_message_is_not_the_returned_dict(self, store):
        events: list = []
        store.subscribe(events.append)
        r = store.session("s").append(msg("a"))
        r.message["parts"][0]["text"] = "changed by the caller"
        assert events[0].message["parts"][0]["text"] == "text of a"
        events[0].message["role"] = "changed by a subscriber"
        assert store.session("s").get("a")["role"] == "user" and r.message["role"] == "user"

    def test_F1_raising_callback_does_not_stop_write(self, store, caplog):
        seen: list = []

        def bad(ev):
            raise RuntimeError("subscriber bug")

        store.subscribe(bad)
        store.subscribe(seen.append)
        r = store.session("s").append(msg("a"))
        assert r.inserted and len(seen) == 1
        assert store.session("s").get("a") is not None

    def test_F2_mirror_list(self, store):
        s = store.session("s")
        s.append(msg("a"))
        target: list = []
        stop = s.mirror(target, transform=lambda m: m["id"])
        assert target == ["a"]
        s.append(msg("b"))
        s.append(msg("c"), parent_id="a")
        assert target == ["a", "c"]
        s.update(msg("a", "edit"))
        s.on_compaction(_summary_fn("a", "a", "S")).compact()
        assert target == [m["id"] for m in s.get_history()]
        s.import_message(msg("imp"), parent_id="c")  # imports send no event
        assert target == [m["id"] for m in s.get_history(leaf_id="c")]
        store.session("other").append(msg("zzz"))
        assert "zzz" not in target
        stop()
        s.append(msg("d"))
        assert "d" not in target

    def test_F2_mirror_object_and_intercept(self, store):
        s = store.session("s")

        class Box:
            def __init__(self):
                self.value = []
                self.sets = 0

            def get(self):
                return self.value

            def set(self, v):
                self.sets += 1
                self.value = list(v)

        box = Box()
        handled = []

        def intercept(ev):
            if ev.type == "update":
                handled.append(ev)
                return True
            return False

        s.mirror(box, intercept=intercept)
        s.append(msg("a"))
        s.append(msg("b"))
        assert [m["id"] for m in box.value] == ["a", "b"]
        s.update(msg("a", "changed"))
        assert len(handled) == 1
        assert box.value[0]["parts"][0]["text"] == "text of a"  # left alone
        s.append(msg("c"))
        assert box.value == s.get_history()


# ---------------------------------------------------------------------------
# The public API the layers above the store live on: chains, bulk imports,
# transactions, runs and events, records, the tree read model, scans, capabilities.


def _parent_of(session, mid):
    """The parent id of ``mid``, read from the raw path (not from the API under test)."""
    path = ids_of(session.get_history(leaf_id=mid, compacted=False))
    return path[-2] if len(path) > 1 else None


class TestAppendMany:
    """SPEC W7: ``session.append_many`` appends a chain in one transaction."""

    def test_W7_chain_under_the_latest_leaf(self, store):
        s = store.session("s")
        s.append(msg("m0"))
        results = s.append_many([msg("a"), msg("b", role="assistant"), msg("c")])
        assert [r.inserted for r in results] == [True, True, True]
        assert ids_of(s.get_history()) == ["m0", "a", "b", "c"]
        assert [_parent_of(s, m) for m in ("a", "b", "c")] == ["m0", "a", "b"]
        assert [r.message for r in results] == [s.get("a"), s.get("b"), s.get("c")]
        assert all(ISO_MS.match(r.message["createdAt"]) for r in results)

    def test_W7_parent_none_and_explicit_parent(self, store):
        s = store.session("s")
        chain(s, 3)  # m0 m1 m2
        s.append_many([msg("r1"), msg("r2")], parent_id=None)
        assert ids_of(s.get_history(leaf_id="r2")) == ["r1", "r2"]
        s.append_many([msg("b1"), msg("b2")], parent_id="m0")
        assert ids_of(s.get_history(leaf_id="b2")) == ["m0", "b1", "b2"]
        assert ids_of(s.branches("m0")) == ["m1", "b1"]
        assert s.latest_leaf()["id"] == "b2"
        assert s.append_many([]) == [] and len(s) == 7

    def test_W7_unknown_parent_stores_nothing(self, store):
        s = store.session("s")
        chain(s, 2)
        before = snapshot_store(store)
        with pytest.raises(sk.MessageNotFound):
            s.append_many([msg("x"), msg("y")], parent_id="ghost")
        assert snapshot_store(store) == before

    @pytest.mark.parametrize("bad, error", [
        ({"id": "bad", "parts": []}, ValueError),  # no role
        ({"id": "bad", "role": "user", "parts": [{"type": "text", "text": {1, 2}}]}, TypeError),
        ("not a message", TypeError),
    ])
    def test_W7_one_invalid_message_stores_nothing(self, store, bad, error):
        s = store.session("s")
        chain(s, 2)
        events: list = []
        store.subscribe(events.append)
        before = snapshot_store(store)
        with pytest.raises(error):
            s.append_many([msg("x"), msg("y"), bad, msg("z")])
        assert snapshot_store(store) == before
        assert events == []
        if error is ValueError:
            with pytest.raises(sk.InvalidMessage, match="role"):
                s.append_many([msg("x"), bad])

    def test_W7_an_existing_id_keeps_its_place_and_the_next_attaches_under_it(self, store):
        s = store.session("s")
        chain(s, 2)  # m0 m1
        s.append(msg("y"), parent_id="m0")  # a branch beside m1
        stored = s.get("m1")
        results = s.append_many([msg("m1", "changed text"), msg("n")], parent_id="y")
        assert [r.inserted for r in results] == [False, True]
        assert results[0].message == s.get("m1") == stored  # the first write wins
        assert _parent_of(s, "m1") == "m0"  # not moved under y
        assert ids_of(s.get_history(leaf_id="n")) == ["m0", "m1", "n"]

    def test_W7_a_retried_chain_adds_nothing_and_sends_no_event(self, store):
        s = store.session("s")
        chain(s, 1)
        first = s.append_many([msg("a"), msg("b")])
        events: list = []
        store.subscribe(events.append)
        again = s.append_many([msg("a"), msg("b")])
        assert [r.inserted for r in again] == [False, False]
        assert [r.message for r in again] == [r.message for r in first]
        assert len(s) == 3 and events == []

    def test_W7_one_event_per_inserted_message_after_the_commit(self, store):
        s = store.session("s")
        chain(s, 1)  # m0
        seen = []

        def on_event(ev):  # every message of the chain is stored when the first event comes
            seen.append((ev.type, ev.message_ids, len(store.session("s"))))

        store.subscribe(on_event)
        s.append_many([msg("m0"), msg("a"), msg("b"), msg("c")], parent_id=None)
        assert seen == [("append", ("a",), 4), ("append", ("b",), 4), ("append", ("c",), 4)]

    def test_W7_compaction_is_checked_once_after_the_chain(self, store):
        s = store.session("s")
        calls = []

        def fn(messages, ctx):
            calls.append((ctx.leaf_id, ids_of(messages)))
            return None

        s.on_compaction(fn).compact_after(0)
        s.append_many([msg("a"), msg("b"), msg("c")])
        assert calls == [("c", ["a", "b", "c"])]
        s.append_many([msg("a"), msg("b")], parent_id=None)  # nothing inserted: no check
        assert len(calls) == 1

    def test_W7_client_source_strips_reserved_metadata(self, store_factory):
        st = store_factory(reserved_metadata_keys=["verified"])
        s = st.session("s")
        meta = {"verified": True, "note": "kept"}
        client = s.append_many([msg("a", metadata=dict(meta)), msg("b", metadata=dict(meta))], source="client")
        assert [r.message["metadata"] for r in client] == [{"note": "kept"}, {"note": "kept"}]
        assert s.get("b")["metadata"] == {"note": "kept"}
        server = s.append_many([msg("c", metadata=dict(meta))])
        assert server[0].message["metadata"] == meta
        with pytest.raises(ValueError, match="source"):
            s.append_many([msg("d")], source="browser")
        assert s.get("d") is None


class TestImports:
    """``session.import_many`` and ``session.import_compaction``: bulk import, idempotent, silent."""

    def test_import_many_parents_times_and_silence(self, store):
        s = store.session("s")
        calls: list = []
        events: list = []
        s.on_compaction(lambda m, c: calls.append(1)).compact_after(0)
        store.subscribe(events.append)
        when = _dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=_dt.UTC)
        results = s.import_many([
            (msg("r"), None, when),
            (msg("a", role="assistant"), "r", 1_700_000_000_000),
            (msg("b"), "a", None),
            (msg("alt", role="assistant"), "r", None),
        ])
        assert [r.inserted for r in results] == [True] * 4
        assert s.get("r")["createdAt"] == "2024-05-06T07:08:09.123Z"
        assert s.get("a")["createdAt"] == sk.messages.to_iso(1_700_000_000_000)
        assert ids_of(s.get_history(leaf_id="b")) == ["r", "a", "b"]
        assert ids_of(s.branches("r")) == ["a", "alt"]
        assert s.latest_leaf()["id"] == "alt"
        assert calls == [] and events == []

    def test_import_many_is_idempotent(self, store):
        s = store.session("s")
        items = [(msg(f"m{i}"), f"m{i - 1}" if i else None, None) for i in range(5)]
        first = s.import_many(items)
        again = s.import_many(items)
        assert [r.inserted for r in again] == [False] * 5
        assert [r.message for r in again] == [r.message for r in first] == s.get_history()
        assert len(s) == 5

    def test_import_many_latest_parent(self, store):
        s = store.session("s")
        chain(s, 2)
        s.import_many([(msg("x"), sk.LATEST, None), (msg("y"), sk.LATEST, None)])
        assert ids_of(s.get_history()) == ["m0", "m1", "x", "y"]

    @pytest.mark.parametrize("bad_item", [
        (msg("z"), "ghost", None),  # unknown parent
        ({"id": "z", "role": "user"}, None, None),  # no parts
        (msg("z"), 42, None),  # a parent that is not an id
    ])
    def test_import_many_stores_all_or_nothing(self, store, bad_item):
        s = store.session("s")
        chain(s, 1)
        before = snapshot_store(store)
        with pytest.raises((LookupError, ValueError, TypeError)):
            s.import_many([(msg("x"), "m0", None), (msg("y"), "x", None), bad_item])
        assert snapshot_store(store) == before

    def test_import_compaction_restores_exactly_and_once(self, store):
        s = store.session("s")
        chain(s, 5)
        events: list = []
        store.subscribe(events.append)
        comp = sk.Compaction("c0ffee", "m1", "m3", "an imported summary", "2024-01-02T03:04:05.678Z", 321, 12)
        assert s.import_compaction(comp) is True
        assert s.import_compaction(comp) is False
        assert s.compactions() == [comp]
        hist = s.get_history()
        assert ids_of(hist) == ["m0", "compaction:c0ffee", "m4"]
        assert hist[1]["createdAt"] == comp.created_at
        assert hist[1]["metadata"]["compaction"]["tokens_before"] == 321
        assert s.context_tokens() == s.path().tokens_model
        assert events == []
        with pytest.raises(sk.MessageNotFound):
            s.import_compaction(sk.Compaction("other", "m1", "ghost", "x", comp.created_at, 1, 1))
        with pytest.raises(TypeError):
            s.import_compaction({"id": "dict"})
        assert s.compactions() == [comp]


class TestTransactions:
    """``store.transaction()``: many writes, one commit; events after it, none after a rollback."""

    def test_writes_commit_together_and_events_follow_the_commit(self, store):
        events: list = []
        store.subscribe(events.append)
        a, b = store.session("a"), store.session("b")
        with store.transaction() as tx:
            assert tx is store
            a.append(msg("a1"))
            a.append(msg("a2"))
            a.append_many([msg("a3"), msg("a4")])
            b.import_message(msg("b1"))
            b.update(msg("b1", "edited"))
            store.begin_run("a", "run-1", "hi")
            store.append_events("a", [{"run_id": "run-1", "kind": "run.start"}])
            store.put_records("a", "k", [(1, "one")])
            assert ids_of(a.get_history()) == ["a1", "a2", "a3", "a4"]  # reads see the transaction
            assert events == []
        assert [(e.type, e.message_ids) for e in events] == [
            ("append", ("a1",)), ("append", ("a2",)), ("append", ("a3",)), ("append", ("a4",)),
            ("update", ("b1",)),
        ]
        assert ids_of(a.get_history()) == ["a1", "a2", "a3", "a4"]
        assert b.get("b1")["parts"][0]["text"] == "edited"
        assert [r.run_id for r in store.runs("a")] == ["run-1"]
        assert [e["kind"] for e in store.events("a")] == ["run.start"]
        assert store.records("a", "k") == [(1, "one")]

    def test_an_error_rolls_everything_back_and_drops_the_events(self, store):
        s = store.session("s")
        chain(s, 2)
        before = snapshot_store(store)
        events: list = []
        store.subscribe(events.append)
        with pytest.raises(RuntimeError, match="changed my mind"):
            with store.transaction():
                s.append(msg("x"))
                s.append(msg("y"), parent_id="m0")
                s.delete("y")
                s.update(msg("m0", "edited"))
                store.session("t").append_many([msg("t1"), msg("t2")])
                s.on_compaction(_summary_fn("m0", "x")).compact(leaf_id="x")
                store.begin_run("s", "run-1", "hi")
                store.put_records("s", "k", [(1, "one")])
                raise RuntimeError("changed my mind")
        assert snapshot_store(store) == before
        assert events == [] and store.runs("s") == [] and store.records("s", "k") == []
        s.append(msg("after"))  # writes after a rollback report as usual
        assert [e.message_ids for e in events] == [("after",)]

    def test_a_nested_transaction_joins_the_outer_one(self, store):
        s = store.session("s")
        events: list = []
        store.subscribe(events.append)
        with pytest.raises(ValueError):
            with store.transaction():
                s.append(msg("outer"))
                with store.transaction():
                    s.append(msg("inner"))
                assert events == []  # the inner exit commits nothing
                raise ValueError("abort")
        assert len(s) == 0 and events == []
        with store.transaction():
            s.append(msg("outer"))
            with store.transaction():
                s.append(msg("inner"))
        assert ids_of(s.get_history()) == ["outer", "inner"]
        assert [e.message_ids for e in events] == [("outer",), ("inner",)]

    def test_a_failed_write_inside_keeps_the_transaction_usable(self, store):
        s = store.session("s")
        with store.transaction():
            s.append(msg("a"))
            with pytest.raises(sk.MessageNotFound):
                s.append(msg("b"), parent_id="ghost")
            s.append(msg("c"))
        assert ids_of(s.get_history()) == ["a", "c"]

    def test_transaction_on_a_closed_store(self, store):
        store.close()
        with pytest.raises(sk.StoreClosed):
            with store.transaction():
                pass


class TestRunsEventsRecords:
    """SPEC A3/A4 storage: ``begin_run``/``end_run``/``append_events``; ``records``/``put_records``."""

    def test_runs_are_recorded_from_start_to_end(self, store):
        store.begin_run("s", "s.1", "first prompt")
        (run,) = store.runs("s")
        assert (run.run_id, run.session_id, run.status, run.input, run.ended_at) == ("s.1", "s", "running",
                                                                                   "first prompt", None)
        assert ISO_MS.match(run.started_at)
        usage = {"in": 10, "out": 4, "cost_usd": None, "model": "m"}
        store.end_run("s.1", status="completed", usage=usage)
        store.begin_run("s", "s.2", "second")
        store.end_run("s.2", status="failed", error="boom")
        done, failed = store.runs("s")
        assert (done.status, done.error, done.usage) == ("completed", None, usage)
        assert ISO_MS.match(done.ended_at)
        assert (failed.run_id, failed.status, failed.error, failed.usage) == ("s.2", "failed", "boom", None)
        assert store.runs("other") == []
        with pytest.raises(TypeError):
            store.begin_run("s", 3, "x")

    def test_events_are_numbered_per_session_across_runs(self, store):
        out = store.append_events("s", [{"run_id": "s.1", "kind": "run.start", "input": "hi"},
                                        {"run_id": "s.1", "kind": "run.end", "session_id": "ignored"}])
        more = store.append_events(
            "s", [{"run_id": "s.2", "kind": "run.start", "v": 1, "ts": "2024-01-01T00:00:00.000Z"}]
        )
        other = store.append_events("t", [{"kind": "note"}])
        assert [e["seq"] for e in out + more] == [0, 1, 2] and other[0]["seq"] == 0
        assert all(e["session_id"] == "s" and e["v"] == 1 and ISO_MS.match(e["ts"]) for e in out + more)
        assert more[0]["ts"] == "2024-01-01T00:00:00.000Z"
        assert store.events("s") == out + more
        assert store.events("s", after_seq=0) == out[1:] + more
        assert store.events("t") == other
        assert store.append_events("s", []) == []
        with pytest.raises(TypeError):
            store.append_events("s", ["not an event"])
        with pytest.raises(TypeError):
            store.append_events("s", [{"kind": "x", "bad": {1, 2}}])
        assert len(store.events("s")) == 3

    def test_records_sit_beside_a_session_and_go_with_it(self, store):
        store.session("s").append(msg("a"))
        store.put_records("s", "queue", [(2, {"text": "b"}), (1, ["a", 1, None, 2.5])])
        store.put_records("s", "queue", [(2, "replaced")])
        store.put_records("s", "table", [(0, {"n": 0})])
        store.put_records("t", "queue", [(1, True)])
        assert store.records("s", "queue") == [(1, ["a", 1, None, 2.5]), (2, "replaced")]
        assert store.records("s", "table") == [(0, {"n": 0})]
        assert store.records("s", "nothing") == []
        assert store.records("t", "queue") == [(1, True)]
        with pytest.raises(TypeError):
            store.put_records("s", "queue", [(3, "ok"), ("4", "not an int")])
        with pytest.raises(TypeError):
            store.put_records("s", "queue", [(3, "ok"), (4, {1, 2})])
        assert [n for n, _ in store.records("s", "queue")] == [1, 2]  # nothing of a failed call
        store.begin_run("s", "s.1", "x")
        store.append_events("s", [{"kind": "k"}])
        store.delete_session("s")
        assert store.records("s", "queue") == [] and store.records("s", "table") == []
        assert store.runs("s") == [] and store.events("s") == []
        assert store.records("t", "queue") == [(1, True)]

    def test_a_session_holding_only_records_or_runs_exists(self, store):
        store.put_records("only-records", "k", [(0, "v")])
        store.begin_run("only-runs", "r.1", "x")
        store.delete_session("only-records")
        store.delete_session("only-runs")
        assert store.records("only-records", "k") == [] and store.runs("only-runs") == []
        with pytest.raises(sk.SessionNotFound):
            store.delete_session("only-records")


def _branched(store):
    """m0..m3 with a branch b2, b3 under m1; compactions on the shared prefix and on branch A."""
    s = store.session("s")
    chain(s, 4)
    s.append(msg("b2", "branch b two", "assistant"), parent_id="m1")
    s.append(msg("b3", "branch b three"), parent_id="b2")
    shared = s.on_compaction(_summary_fn("m0", "m1", "prefix")).compact(leaf_id="m3")
    on_a = s.on_compaction(_summary_fn("m1", "m3", "branch A")).compact(leaf_id="m3")
    return s, shared, on_a


class TestTreeReadModel:
    """``session.tree()``, ``session.path()`` and ``session.get_many()``: what views, plots and the CLI draw."""

    def test_tree_nodes_latest_children_and_paths(self, store):
        s, shared, on_a = _branched(store)
        tree = s.tree()
        assert isinstance(tree, sk.store.Tree) and tree.session_id == "s"
        assert list(tree.nodes) == s.nodes() and len(tree) == len(s) == 6
        assert tree.latest_id == s.latest_leaf()["id"] == "b3"
        for node in tree.nodes:
            assert [n.id for n in tree.children(node.id)] == ids_of(s.branches(node.id))
            assert [n.id for n in tree.path(node.id)] == ids_of(s.get_history(leaf_id=node.id, compacted=False))
        assert [n.id for n in tree.path()] == ids_of(s.get_history(compacted=False))
        assert [n.id for n in tree.roots()] == ids_of(s.roots()) == ["m0"]
        assert "b2" in tree and "ghost" not in tree
        with pytest.raises(sk.MessageNotFound):
            tree.node("ghost")
        empty = store.session("empty").tree()
        assert (empty.nodes, empty.latest_id, empty.compactions, empty.path()) == ((), None, (), [])

    def test_tree_places_each_compaction(self, store):
        s, shared, on_a = _branched(store)
        # a range whose start is not above its end covers nothing (as a read would apply it nowhere)
        stray = sk.Compaction("stray", "b2", "m3", "stray", shared.created_at, 1, 1)
        s.import_compaction(stray)
        placed = {p.compaction.id: p for p in s.tree().compactions}
        assert [p.compaction for p in s.tree().compactions] == s.compactions()

        def raw_range(a, b, leaf):
            ids = ids_of(s.get_history(leaf_id=leaf, compacted=False))
            return tuple(ids[ids.index(a): ids.index(b) + 1])

        assert placed[shared.id].ids == raw_range("m0", "m1", "m3") and placed[shared.id].messages == 2
        assert placed[on_a.id].ids == raw_range("m1", "m3", "m3") and placed[on_a.id].messages == 3
        assert placed["stray"].ids == () and placed["stray"].messages == 0
        assert placed[shared.id].superseded is True  # the newer one on branch A shares m1
        assert placed[on_a.id].superseded is False and placed["stray"].superseded is False
        assert s.tree().compacted_by() == {"m0": shared.id, "m1": on_a.id, "m2": on_a.id, "m3": on_a.id}

    def test_tree_build_from_scanned_rows_equals_session_tree(self, store):
        s, _, _ = _branched(store)
        nodes = [n for batch in store.scan("nodes") for sid, n in batch if sid == "s"]
        comps = [c for batch in store.scan("compactions") for sid, c in batch if sid == "s"]
        assert sk.store.Tree.build("s", reversed(nodes), comps) == s.tree()

    @pytest.mark.parametrize("leaf", ["m3", "b3", "m1", "m0", None])
    def test_path_spans_match_what_a_read_applies(self, store, leaf):
        from sessionkit.messages import estimate_tokens

        s, shared, on_a = _branched(store)
        path = s.path(leaf)
        raw = s.get_history(leaf_id=leaf, compacted=False)
        seen = s.get_history(leaf_id=leaf)
        assert path.leaf_id == raw[-1]["id"]
        assert [n.id for n in path.nodes] == ids_of(raw)
        assert [n.tokens for n in path.nodes] == [estimate_tokens(m) for m in raw]
        assert path.tokens_full == sum(estimate_tokens(m) for m in raw)
        assert path.tokens_model == s.context_tokens(leaf)
        # the model's view: each span where a read puts its summary
        view = ["compaction:" + i.compaction.id if isinstance(i, sk.store.CompactionSpan) else i.id
                for i in path.model_view()]
        assert view == ids_of(seen)
        overlays = [m["metadata"]["compaction"] for m in seen if m["id"].startswith("compaction:")]
        assert [(sp.compaction.id, sp.messages) for sp in path.spans] == [(o["id"], o["messages"]) for o in overlays]
        for span in path.spans:
            covered = ids_of(raw)[span.start: span.end + 1]
            assert (covered[0], covered[-1]) == (span.compaction.from_id, span.compaction.to_id)
            assert span.tokens_full == sum(estimate_tokens(m) for m in raw[span.start: span.end + 1])
            assert span.tokens_model == span.compaction.tokens_after
            assert all(path.span_at(p) == span for p in range(span.start, span.end + 1))
        expected = {"m3": [on_a.id], "b3": [shared.id], "m1": [shared.id], "m0": [], None: [shared.id]}[leaf]
        assert [sp.compaction.id for sp in path.spans] == expected

    def test_path_of_an_empty_session_and_unknown_leaf(self, store):
        s = store.session("s")
        path = s.path()
        assert (path.leaf_id, path.nodes, path.spans, path.tokens_full, path.tokens_model) == (None, (), (), 0, 0)
        with pytest.raises(sk.MessageNotFound):
            s.path("ghost")

    def test_get_many_reads_a_batch(self, store):
        s = store.session("s")
        chain(s, 5)
        raw, b64 = b64_payload(5000, "many")
        s.append({"id": "f", "role": "user", "parts": [{"type": "file", "mediaType": "image/png",
                                                          "url": "data:image/png;base64," + b64}]})
        store.session("t").append(msg("t0"))
        got = s.get_many(["m3", "ghost", "f", "m0", "m3", "t0", "compaction:x"])
        assert list(got) == ["m3", "f", "m0"]
        assert got == {k: s.get(k) for k in ("m3", "f", "m0")}
        got["m3"]["role"] = "changed"
        assert s.get("m3")["role"] == "assistant"
        assert s.get_many([]) == {} and s.get_many("m1") == {"m1": s.get("m1")}
        with pytest.raises(TypeError):
            s.get_many(["m1", 2])
        big = store.session("big")
        ids = chain(big, 90, prefix="b")
        wanted = ids[::-1][:80] + ["ghost", "m0"]  # many ids: read another way, same answer
        got = big.get_many(wanted)
        assert list(got) == ids[::-1][:80] and got == {k: big.get(k) for k in ids[::-1][:80]}


class TestScan:
    """``store.scan``: every row of a kind, in batches, in write order."""

    def _fill(self, store):
        a, b = store.session("a"), store.session("b")
        for i in range(4):  # interleaved writes: the scan must follow write order across sessions
            a.append(msg(f"a{i}"))
            b.append(msg(f"b{i}"))
        raw, b64 = b64_payload(5000, "scan")
        a.append({"id": "file", "role": "user", "parts": [{"type": "file", "mediaType": "image/png", "data": b64}]})
        a.on_compaction(_summary_fn("a0", "a1")).compact()
        b.on_compaction(_summary_fn("b1", "b2")).compact()
        store.begin_run("a", "a.1", "x")
        store.begin_run("runs-only", "r.1", "y")
        store.append_events("events-only", [{"kind": "k1"}, {"kind": "k2"}, {"kind": "k3"}])
        store.append_events("a", [{"kind": "a-event"}])
        return a, b

    def test_nodes_and_messages_in_write_order_in_small_batches(self, store):
        a, b = self._fill(store)
        batches = list(store.scan("nodes", batch_size=3))
        assert all(1 <= len(batch) <= 3 for batch in batches) and len(batches) == 3
        rows = [row for batch in batches for row in batch]
        expected = sorted([("a", n) for n in a.nodes()] + [("b", n) for n in b.nodes()], key=lambda r: r[1].seq)
        assert rows == expected
        assert [n.id for _, n in rows][:4] == ["a0", "b0", "a1", "b1"]
        messages = [row for batch in store.scan("messages", batch_size=2) for row in batch]
        assert [(sid, node) for sid, node, _ in messages] == expected
        assert all(m == store.session(sid).get(node.id) for sid, node, m in messages)
        one = [row for batch in store.scan("messages", session_ids=["b"], batch_size=100) for row in batch]
        assert [node.id for _, node, _ in one] == ["b0", "b1", "b2", "b3"]

    def test_compactions_runs_events_cover_every_session(self, store):
        a, b = self._fill(store)
        comps = [row for batch in store.scan("compactions", batch_size=1) for row in batch]
        assert comps == [("a", c) for c in a.compactions()] + [("b", c) for c in b.compactions()]
        runs = [row for batch in store.scan("runs") for row in batch]
        assert sorted((sid, r.run_id) for sid, r in runs) == [("a", "a.1"), ("runs-only", "r.1")]
        assert all(r == next(x for x in store.runs(sid) if x.run_id == r.run_id) for sid, r in runs)
        events = [row for batch in store.scan("events", batch_size=2) for row in batch]
        assert sorted((sid, e["seq"], e["kind"]) for sid, e in events) == [
            ("a", 0, "a-event"), ("events-only", 0, "k1"), ("events-only", 1, "k2"), ("events-only", 2, "k3")]
        only = [e["seq"] for sid, e in events if sid == "events-only"]
        assert only == [0, 1, 2]  # each session's rows in its order
        picked = [row for batch in store.scan("runs", session_ids=["runs-only", "b"]) for row in batch]
        assert [(sid, r.run_id) for sid, r in picked] == [("runs-only", "r.1")]

    def test_a_scan_of_an_empty_store_and_bad_arguments(self, store):
        assert list(store.scan("nodes")) == [] and list(store.scan("events")) == []
        with pytest.raises(ValueError, match="kind"):
            store.scan("tables")
        with pytest.raises(ValueError, match="batch_size"):
            store.scan("nodes", batch_size=0)
        with pytest.raises(TypeError):
            store.scan("nodes", session_ids=[1])
        store.close()
        with pytest.raises(sk.StoreClosed):
            store.scan("nodes")


class TestCapabilities:
    """``store.capabilities``: what the engine declares; coordination calls need it."""

    def test_capabilities_are_declared(self, store):
        caps = store.capabilities
        assert isinstance(caps, sk.store.Capabilities)
        assert all(isinstance(getattr(caps, f), bool) for f in ("bulk_insert", "coordination", "shared_feed"))
        with pytest.raises(FrozenInstanceError):
            caps.coordination = not caps.coordination  # type: ignore[misc,unused-ignore]

    def test_coordination_needs_the_capability(self, store):
        if store.capabilities.coordination:
            name = f"conformance-{id(store)}"
            assert store.try_hold(name) is True
            assert store.hold_taken(name) is True
            assert store.try_hold(name) is False  # not re-entrant
            store.release_hold(name)
            assert store.hold_taken(name) is False
            store.signal("s", "note", {"x": 1})  # best effort, to other processes
            return
        for call in (lambda: store.try_hold("h"), lambda: store.hold_taken("h"), lambda: store.release_hold("h"),
                     lambda: store.signal("s", "k"), lambda: store.on_signal(lambda *a: None)):
            with pytest.raises(sk.UsageError, match="coordination"):
                call()


# Bad input (SPEC M2, M7, section 13): refused with a contract error naming the
# field or argument, before anything reaches an engine; and caller data is never
# read as a reference of the store.

#: The key under which the store points at an out-of-row payload.
RESERVED = "__sessionkit_blob__"
LONE = "\ud800"

#: Errors that are not part of the contract even where they subclass one that is.
FOREIGN = (UnicodeError, KeyError, OSError, OverflowError, RecursionError, ArithmeticError)


def contract_error(exc: BaseException) -> bool:
    """Whether ``exc`` is one of the types SPEC section 13 allows for bad arguments."""
    if isinstance(exc, FOREIGN):
        return False
    if type(exc).__module__.split(".")[0] not in ("sessionkit", "builtins"):
        return False  # a driver's own type, even one deriving from ValueError
    return isinstance(exc, (sk.SessionKitError, TypeError, ValueError, LookupError))


def attempt(fn, *args, **kwargs):
    """``(True, result)``, or ``(False, error)`` after checking the error is a contract one."""
    try:
        return True, fn(*args, **kwargs)
    except Exception as exc:  # checked right here
        assert contract_error(exc), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        return False, exc


def as_read(message: dict) -> dict:
    """A message as JSON semantics give it back."""
    return json.loads(json.dumps(message))


def nested(depth: int, leaf=1):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def tool_msg(mid, **part):
    return {"id": mid, "role": "assistant", "parts": [dict({"type": "tool-t", "toolCallId": "c"}, **part)]}


class TestBadInput:
    """SPEC M2, M7 and 13: bad input raises a contract error and stores nothing."""

    SURROGATE_FIELDS = [
        (msg("x", "ok" + LONE), "parts[0].text"),
        (msg("x" + LONE), "id"),
        (msg("x", role="us" + LONE + "er"), "role"),
        (msg("x", metadata={"k" + LONE: 1}), 'metadata["k\\ud800"]'),
        (msg("x", metadata={"k": ["fine", {"deep": LONE}]}), "metadata.k[1].deep"),
        ({"id": "x", "role": "user", "parts": [{"type": "text", "text": "a", "odd" + LONE: 1}]},
         'parts[0]["odd\\ud800"]'),
        ({"id": "x", "role": "user", "parts": [{"type": "t" + LONE}]}, "parts[0].type"),
        (tool_msg("x", input={"q": [1, {"r": "a" + LONE}]}), "parts[0].input.q[1].r"),
        (tool_msg("x", output={"x": LONE}), "parts[0].output.x"),
        (tool_msg("x", output="plain " + LONE), "parts[0].output"),
        (msg("x", createdAt="2024-01-01" + LONE), "createdAt"),
        (msg("x", extra={"a b": [LONE]}), 'extra["a b"][0]'),
    ]

    @pytest.mark.parametrize("bad, where", SURROGATE_FIELDS, ids=[w for _, w in SURROGATE_FIELDS])
    def test_M7_lone_surrogate_names_the_field_on_every_write(self, store, bad, where):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        writes = [
            lambda: s.append(bad),
            lambda: s.append(bad, source="client"),
            lambda: s.append(bad, parent_id="a"),
            lambda: s.import_message(bad),
            lambda: s.import_message(bad, created_at=0),
            lambda: s.update(dict(bad, id="a") if where != "id" else bad),
        ]
        for write in writes:
            with pytest.raises(sk.InvalidMessage) as info:
                write()
            text = str(info.value)
            assert where in text and "Unicode" in text, text
            text.encode("utf-8")  # the error itself prints anywhere
        assert snapshot_store(store) == before

    def test_M7_lone_surrogate_in_ids_names_the_argument(self, store):
        s = store.session("s")
        s.append(msg("a"))
        s.append(msg("b"))
        bad = "a" + LONE
        before = snapshot_store(store)
        calls = {
            "session_id": [lambda: store.session(bad), lambda: store.delete_session(bad),
                           lambda: store.search("text", session_id=bad), lambda: store.runs(bad),
                           lambda: store.events(bad)],
            "parent_id": [lambda: s.append(msg("c"), parent_id=bad),
                          lambda: s.import_message(msg("c"), parent_id=bad)],
            "leaf_id": [lambda: s.get_history(leaf_id=bad), lambda: list(s.history(leaf_id=bad)),
                        lambda: s.recent_history(100, leaf_id=bad), lambda: s.path_length(bad)],
            "id": [lambda: s.get(bad), lambda: s.branches(bad)],
            "message id": [lambda: s.delete(bad), lambda: s.delete(["b", bad])],
        }
        for name, fns in calls.items():
            for fn in fns:
                with pytest.raises(ValueError) as info:
                    fn()
                assert not isinstance(info.value, UnicodeError)
                assert name in str(info.value)
        assert snapshot_store(store) == before
        assert ids_of(s.get_history()) == ["a", "b"]

    @pytest.mark.parametrize("query", [LONE, "text" + LONE, "te" + LONE + "xt", '"' + LONE + ' of"',
                                       "\udfff\ud800", "text \udc80 of a"])
    def test_Q2_query_with_lone_surrogate(self, store, query):
        s = store.session("s")
        s.append(msg("a", "the text of a"))
        hits = s.search(query)  # the surrogate separates words, like any other non-word character
        expected = {"the", "text", "of", "a"}
        words = [w for w in re.split(r"[^a-z]+", query.replace(LONE, " ")) if w]
        assert [h.id for h in hits] == (["a"] if words and set(words) <= expected else [])
        assert store.search(query) == hits

    def test_M7_summary_with_lone_surrogate_is_refused(self, store):
        s = store.session("s")
        chain(s, 4)
        s.on_compaction(_summary_fn("m1", "m2", "sum" + LONE))
        with pytest.raises(ValueError) as info:
            s.compact()
        assert "summary" in str(info.value) and not isinstance(info.value, UnicodeError)
        assert s.compactions() == []
        assert ids_of(s.get_history()) == ["m0", "m1", "m2", "m3"]
        s.on_compaction(_summary_fn("m1", "m2", "fine")).compact_after(0)
        s.append(msg("m4"))  # automatic compaction works on
        assert len(s.compactions()) == 1

    def test_M7_store_records_and_events_refuse_lone_surrogates(self, store):
        before = store.events("s")
        for call in (lambda: store.append_events("s", [{"kind": "x", "text": LONE}]),
                     lambda: store.append_events("s", [{"kind": "x", LONE: 1}]),
                     lambda: store.put_records("s", "k", [(0, {"v": LONE})]),
                     lambda: store.put_records("s", "k" + LONE, [(0, 1)]),
                     lambda: store.begin_run("s", "r" + LONE, "hi"),
                     lambda: store.begin_run("s", "r", "hi" + LONE)):
            ok, err = attempt(call)
            assert not ok and isinstance(err, ValueError)
        with pytest.raises(ValueError):
            store.put_records("s", "k", [(2**70, 1)])
        assert store.events("s") == before
        assert store.records("s", "k") == []
        assert store.runs("s") == []

    # -- SPEC M7: keys are data -------------------------------------------------------

    ADVERSARIAL_KEYS = [RESERVED, RESERVED + RESERVED, RESERVED + "x", RESERVED * 3, "x" + RESERVED,
                        RESERVED[:-1], RESERVED + RESERVED + "\u00e9"]

    @pytest.mark.parametrize("key", ADVERSARIAL_KEYS)
    def test_M7_reserved_key_round_trips_as_data_at_any_depth(self, store, key):
        s = store.session("s")
        _, b64 = b64_payload(6000, "payload")
        m = {
            "id": "a", "role": "user", key: {key: [key]},
            "parts": [
                {"type": "text", "text": "findable words", key: {"sha256": "0" * 64, "field": "text", "prefix": ""}},
                {"type": "file", "mediaType": "x/y", "data": b64, key: key},
                {"type": "file", "mediaType": "x/y", "url": None, key: None},
                {"type": "tool-t", "toolCallId": "c",
                 "input": {key: {key: 1}, "list": [{key: 2}]}, "output": [[{key: 3}]]},
            ],
            "metadata": {key: "value", "n": {key: {key: True}}},
        }
        written = as_read(m)
        s.append(m)
        s.import_message(dict(m, id="b"), parent_id=None)
        s.append(dict(m, id="c"), source="client")
        for mid in ("a", "b", "c"):
            assert strip_created(s.get(mid)) == dict(written, id=mid)
        assert strip_created(s.get_history()[-1]) == dict(written, id="c")
        assert store.stats()["blobs"] == 1  # the genuine payload still moves out of the row
        s.update(dict(m, parts=list(m["parts"])[:1]))
        assert strip_created(s.get("a")) == dict(written, parts=written["parts"][:1])
        assert {h.id for h in s.search("findable")} == {"a", "b", "c"}

    def test_M7_reserved_key_holding_another_payload_reads_as_data(self, store):
        raw, b64 = b64_payload(8000, "secret")
        sha = hashlib.sha256(raw).hexdigest()
        store.session("victim").append({"id": "v", "role": "user", "parts": [
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + b64}]})
        s = store.session("s")
        forged = [
            {"type": "file", "mediaType": "image/png", "url": None,
             RESERVED: {"sha256": sha, "field": "url", "prefix": "data:image/png;base64,"}},
            {"type": "file", "mediaType": "image/png", "data": None,
             RESERVED: {"sha256": sha, "field": "data", "prefix": ""}},
            {"type": "text", "text": "t", RESERVED: {"sha256": sha, "field": "text", "prefix": ""}},
        ]
        m = {"id": "f", "role": "user", "parts": forged}
        s.append(m)
        s.import_message(dict(m, id="g"))
        for got in (s.get("f"), s.get("g"), s.get_history()[-1], s.recent_history(10**6).messages[-1]):
            assert got["parts"] == forged
            assert b64 not in json.dumps(got)
        assert store.session("victim").get("v")["parts"][0]["url"].endswith(b64)
        store.session("victim").delete("v")
        assert store.stats()["blobs"] == 0  # the forged parts hold no reference to it
        assert s.get("f")["parts"] == forged

    def test_M7_reserved_key_through_the_importers(self, store, tmp_path):
        from sessionkit.io import import_jsonl, import_openai

        part = {"type": "file", "mediaType": "x/y", "url": None,
                RESERVED: {"sha256": "a" * 64, "field": "url", "prefix": "data:x/y;base64,"}}
        m = {"id": "j", "role": "user", "parts": [part, {"type": "text", "text": "t", RESERVED: 1}],
             "createdAt": "2024-01-01T00:00:00.000Z"}
        path = tmp_path / "in.jsonl"
        path.write_text(json.dumps({"type": "message", "session_id": "j", "parent_id": None,
                                    "created_at": "2024-01-01T00:00:00.000Z", "message": m}) + "\n")
        import_jsonl(store, path)
        assert store.session("j").get("j") == m
        assert store.session("j").get_history() == [m]

        s = store.session("s")
        args = {RESERVED: {"sha256": "a" * 64, "field": "url", "prefix": "data:x;base64,"}, "q": 1}
        import_openai(s, [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({RESERVED: 1})},
        ])
        parts = [p for m in s.get_history() for p in m["parts"] if p["type"] == "tool-f"]
        assert parts[0]["input"] == args

    def test_M6_sizes_and_tokens_of_reserved_keys_are_the_callers(self, store):
        from sessionkit.messages import estimate_tokens

        s = store.session("s")
        key = RESERVED + RESERVED
        m = {"id": "a", "role": "user", "parts": [
            {"type": "tool-t", "toolCallId": "c", "input": {key: "word " * 10}, "output": {key: [key]}},
            {"type": "file", "url": None, RESERVED: {"sha256": "b" * 64, "field": "url", "prefix": "data:;base64,"}}],
            "metadata": {key: 1}, RESERVED: 2}
        s.append(m)
        got = s.get("a")
        node = [n for n in s.nodes() if n.id == "a"][0]
        encoded = json.dumps(got, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        assert node.bytes == len(encoded)
        assert node.tokens == estimate_tokens(m)
        assert s.recent_history(10**6).total_content_bytes == len(encoded)

    # -- created_at -------------------------------------------------------------------

    @pytest.mark.parametrize("created_at", [
        10**20, -(10**20), 2**63, 10**400, float("nan"), float("inf"), -float("inf"), 1e300,
        "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "not a time",
        _dt.datetime.min.replace(tzinfo=_dt.timezone(_dt.timedelta(hours=1))),
        True, [1], {"ms": 1}, b"2024",
    ], ids=lambda v: type(v).__name__ + ":" + repr(v)[:24])
    def test_W3_created_at_out_of_range_or_wrong_type(self, store, created_at):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        with pytest.raises((ValueError, TypeError)) as info:
            s.import_message(msg("b"), created_at=created_at)
        assert contract_error(info.value)
        assert "created_at" in str(info.value)
        assert snapshot_store(store) == before

    @pytest.mark.parametrize("created_at, iso", [
        (_dt.datetime(2021, 5, 6, 7, 8, 9, 123456), "2021-05-06T07:08:09.123Z"),
        (_dt.datetime(2021, 5, 6, 9, 8, 9, 5000, tzinfo=_dt.timezone(_dt.timedelta(hours=2))),
         "2021-05-06T07:08:09.005Z"),
        (1_600_000_000_123, "2020-09-13T12:26:40.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (253402300799999, "9999-12-31T23:59:59.999Z"),
        (1.5, "1970-01-01T00:00:00.001Z"),
    ])
    def test_W3_import_time_is_the_messages_createdAt_too(self, store, created_at, iso):
        s = store.session("s")
        s.import_message(msg("a", createdAt="1999-01-01T00:00:00.000Z"), created_at=created_at)
        s.import_message(msg("b"), parent_id="a", created_at=created_at)
        s.import_message(msg("c", createdAt=None), parent_id="b", created_at=created_at)
        for mid in ("a", "b", "c"):
            assert s.get(mid)["createdAt"] == iso
        assert {n.created_at for n in s.nodes()} == {iso}
        assert s.import_message(msg("a", createdAt="x"), created_at=0).message["createdAt"] == iso  # first wins

    # -- ints that reach SQL ----------------------------------------------------------------

    @pytest.mark.parametrize("huge", [2**31, 2**63, 2**64, 10**30])
    def test_Q1_R3_huge_ints_are_clamped(self, store_factory, huge):
        store = store_factory()
        s = store.session("s")
        chain(s, 3, text=lambda i: f"word {i}")
        assert [h.id for h in store.search("word", limit=huge)] == ["m0", "m1", "m2"] or \
            {h.id for h in store.search("word", limit=huge)} == {"m0", "m1", "m2"}
        assert len(s.search("word", limit=huge)) == 3
        store.search_candidates = huge
        assert len(s.search("word 1", limit=huge)) == 1
        window = s.recent_history(huge, min_messages=huge)
        assert ids_of(window.messages) == ["m0", "m1", "m2"] and not window.truncated
        assert len(s.recent_history(0, min_messages=huge).messages) == 3
        s.on_compaction(_summary_fn("m0", "m1")).compact_after(huge)
        s.append(msg("m3"))
        assert s.compactions() == []
        assert store.events("s", after_seq=huge) == []
        big = store_factory(max_message_bytes=huge)
        assert big.session("s").append(msg("a")).inserted

    def test_R3_count_arguments_still_checked(self, store):
        s = store.session("s")
        for bad in (-1, True, 1.5, "3", None):
            with pytest.raises((ValueError, TypeError)):
                store.search("x", limit=bad)
        with pytest.raises(ValueError):
            s.recent_history(100, min_messages=True)
        with pytest.raises(ValueError):
            store.search_candidates = 0

    # -- nesting -------------------------------------------------------------------------------

    @pytest.mark.parametrize("where", ["input", "metadata", "top"])
    def test_M2_deep_nesting_is_refused_naming_the_field(self, store, where):
        s = store.session("s")
        s.append(msg("a"))
        store.subscribe(lambda ev: None)  # events copy the message
        before = snapshot_store(store)
        for depth in (200, 1_000, 100_000):
            value = nested(depth)
            bad = {"input": tool_msg("x", input=value), "metadata": msg("x", metadata={"k": value}),
                   "top": msg("x", deep=value)}[where]
            for write in (s.append, s.import_message, lambda m: s.update(dict(m, id="a"))):
                ok, err = attempt(write, bad)
                assert not ok and isinstance(err, (sk.InvalidMessage, TypeError)), err
                assert "nested deeper" in str(err)
        assert snapshot_store(store) == before

    def test_M2_nesting_within_the_limit_round_trips(self, store):
        from sessionkit.messages import MAX_NESTING

        s = store.session("s")
        seen: list = []
        store.subscribe(seen.append)
        # message, parts and part are three levels: MAX_NESTING - 3 more fit
        m = tool_msg("a", input=nested(MAX_NESTING - 3), output={"k": nested(MAX_NESTING - 4, "x")})
        s.append(m)
        assert strip_created(s.get("a")) == m
        assert strip_created(seen[-1].message) == m
        assert strip_created(s.get_history()[0]) == m
        with pytest.raises(sk.InvalidMessage):
            s.append(tool_msg("b", input=nested(MAX_NESTING - 2)))
        with pytest.raises(sk.InvalidMessage):
            s.append(tool_msg("b", output={"k": nested(MAX_NESTING - 3, "x")}))

    def test_M2_cycle_is_type_error(self, store):
        s = store.session("s")
        loop: dict = {"k": 1}
        loop["self"] = loop
        for bad in (msg("x", metadata=loop), tool_msg("x", output=[loop])):
            with pytest.raises(TypeError) as info:
                s.append(bad)
            assert not isinstance(info.value, RecursionError)
        assert len(s) == 0


if given is not None:
    _R = RESERVED
    _chars = hst.one_of(hst.characters(categories=["Cs"]), hst.characters(),
                        hst.sampled_from("a_ .\"\\{}[]:,\x00\u00e9"))
    _text = hst.text(_chars, max_size=8)
    _key = hst.one_of(_text, hst.sampled_from([_R, _R + _R, _R + "x", "type", "toolCallId", "url", "data"]))
    _scalar = hst.one_of(hst.none(), hst.booleans(), hst.integers(-(2**70), 2**70),
                         hst.floats(allow_nan=False, allow_infinity=False), _text)
    _json = hst.recursive(_scalar, lambda inner: hst.one_of(hst.lists(inner, max_size=3),
                                                              hst.dictionaries(_key, inner, max_size=3)),
                          max_leaves=8)
    _, _B64 = b64_payload(4200, "hyp")
    _part = hst.one_of(
        hst.fixed_dictionaries({"type": hst.just("text"), "text": _text}),
        hst.fixed_dictionaries({"type": hst.sampled_from(["tool-a", "dynamic-tool"]), "toolCallId": _text},
                               optional={"input": _json, "output": _json, "state": _text}),
        hst.fixed_dictionaries({"type": hst.just("file"), "mediaType": _text},
                               optional={"data": hst.sampled_from([_B64, "aGk="]),
                                         "url": hst.sampled_from(["data:x/y;base64," + _B64, None])}),
        hst.builds(lambda t, extra: dict(extra, type=t), _text, hst.dictionaries(_key, _json, max_size=3)),
    )
    _message = hst.fixed_dictionaries(
        {"id": _text.filter(bool), "role": _text.filter(bool), "parts": hst.lists(_part, max_size=3)},
        optional={"metadata": hst.dictionaries(_key, _json, max_size=3), "createdAt": _text,
                  _R: _json, "extra": _json},
    )
    _created = hst.one_of(hst.none(), hst.integers(-(2**70), 2**70), hst.floats(), hst.booleans(), _text,
                          hst.datetimes(timezones=hst.none() | hst.timezones()))
    _counter = iter(range(10**9))


def _string_slots(value, out: list) -> list:
    """Every place in a JSON value that holds a string: ``(container, key, is_key)``."""
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((value, k, True))
            if isinstance(v, str):
                out.append((value, k, False))
            else:
                _string_slots(v, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            if isinstance(v, str):
                out.append((value, i, False))
            else:
                _string_slots(v, out)
    return out


def _poison(message: dict, pick: int, at: int) -> dict:
    """A copy of ``message`` with a lone surrogate put into one of its strings (key or value)."""
    copy = json.loads(json.dumps(message))
    slots = _string_slots(copy, [])
    container, key, is_key = slots[pick % len(slots)]
    if is_key:
        items = [((k[: at % (len(k) + 1)] + LONE + k[at % (len(k) + 1):]) if k == key else k, v)
                 for k, v in container.items()]
        container.clear()
        container.update(items)
    else:
        text = container[key]
        container[key] = text[: at % (len(text) + 1)] + LONE + text[at % (len(text) + 1):]
    return copy


class TestBadInputProperties:
    """Random unicode (lone surrogates included) and JSON into every write and read:
    only contract errors come out, and whatever was accepted reads back equal."""

    if given is None:  # pragma: no cover - depends on the environment

        def test_any_input_gives_contract_errors_only(self):
            pytest.skip("hypothesis is not installed")

    else:

        @settings(max_examples=40, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                         HealthCheck.data_too_large])
        @given(data=hst.data())
        def test_any_input_gives_contract_errors_only(self, store, data):  # type: ignore[misc]  # unlike the skip variant
            n = next(_counter)
            ok, s = attempt(store.session, f"p{n}-" + data.draw(_text, "session id"))
            if ok:  # an engine may refuse an id on first use (PostgreSQL: NUL)
                ok, _ = attempt(len, s)
            if not ok:
                s = store.session(f"p{n}")
            stored: dict[str, dict] = {}

            def accepted(result, written):
                expected = as_read(written)
                got = result.message
                if result.inserted:
                    assert strip_created(got) == strip_created(expected)
                stored[got["id"]] = got

            for _ in range(data.draw(hst.integers(1, 4), "messages")):
                m = data.draw(_message, "message")
                poisoned = data.draw(hst.booleans(), "poison")
                if poisoned:
                    m = _poison(m, data.draw(hst.integers(0, 10**6)), data.draw(hst.integers(0, 10)))
                how = data.draw(hst.sampled_from(["append", "parent", "import", "client"]), "how")
                if how == "append":
                    ok, res = attempt(s.append, m)
                elif how == "client":
                    ok, res = attempt(s.append, m, source="client")
                elif how == "parent":
                    parent = data.draw(hst.one_of(_text, hst.sampled_from(sorted(stored) or ["none"])), "parent")
                    ok, res = attempt(s.append, m, parent_id=parent)
                else:
                    created = data.draw(_created, "created_at")
                    parent = data.draw(hst.one_of(hst.none(), hst.sampled_from(sorted(stored) or ["none"])))
                    ok, res = attempt(s.import_message, m, parent_id=parent, created_at=created)
                    if ok and res.inserted and created is not None:
                        assert res.message["createdAt"] == sk.messages.to_iso(created)
                        m = dict(m, createdAt=res.message["createdAt"])
                if ok:
                    assert not poisoned, "a message with a lone surrogate was accepted"
                    accepted(res, m)
            if stored and data.draw(hst.booleans(), "update"):
                target = data.draw(hst.sampled_from(sorted(stored)), "update target")
                new = dict(data.draw(_message, "new content"), id=target)
                new.pop("createdAt", None)
                ok, res = attempt(s.update, new)
                if ok:
                    assert strip_created(res) == strip_created(as_read(new))
                    stored[target] = res
            # reads: stored messages read back equal, any id gives a contract error at worst
            for mid, message in stored.items():
                assert s.get(mid) == message
            for probe in [data.draw(_text, "probe id"), *stored]:
                attempt(s.get, probe)
                attempt(s.branches, probe)
                attempt(s.get_history, leaf_id=probe)
                attempt(s.recent_history, data.draw(hst.integers(0, 2**70), "max_bytes"), leaf_id=probe)
            for message in s.get_history():
                assert message == stored.get(message["id"], message)
            query = data.draw(_text, "query")
            assert isinstance(s.search(query), list)  # SPEC Q2: never raises
            attempt(store.search, query, session_id=data.draw(_text, "search session"),
                    limit=data.draw(hst.integers(0, 2**70), "limit"))
            # compaction with any summary
            path = s.get_history(compacted=False)
            if path:
                summary = data.draw(_text, "summary")
                s.on_compaction(_summary_fn(path[0]["id"], path[-1]["id"], summary))
                ok, comp = attempt(s.compact)
                if ok:
                    assert comp.summary == summary
                    assert s.get_history()[0]["parts"][0]["text"] == summary
            # deletes with any ids
            ids = data.draw(hst.lists(hst.one_of(_text, hst.sampled_from(sorted(stored) or ["none"])),
                                      max_size=3), "delete ids")
            ok, removed = attempt(s.delete, ids, subtree=True)
            if ok:
                for mid in removed:
                    assert s.get(mid) is None
