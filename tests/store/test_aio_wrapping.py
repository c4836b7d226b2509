"""``sk.aio`` member by member: every public member of the async classes, called on each
store variant, gives what the sync API gives for the same state -- the same values of
the same types, the same errors.

Every public member (and protocol method: ``__aenter__``, ``__await__`` ...) of
``AsyncStore``, ``AsyncSession`` and the object ``store.transaction()`` returns has a
recipe in ``RECIPES``: ``test_every_async_member_has_a_recipe`` fails for a member
without one (or a recipe of no member), and while the recipes run every member is
instrumented, so a recipe that does not call its member fails too.

How results are compared (``Twins``):

- a read runs twice on one store at one state: through ``store.sync`` (the sync API
  behind the async store) and through the async API;
- a write runs on two stores that hold the same rows, one written through the sync
  API (``sk.open_store``) and one through the async API. Times and compaction ids are
  made deterministic while the recipes run (both count from the same start for the two
  sides of a write), so the two results are equal value for value; before the last
  recipe (closing) both stores must hold the same rows.

A coroutine's result is awaited; an async iterator's items (``history()``, ``scan()``)
are compared with the sync iterator's. An error is compared by type and message (the
store's own path, named in some messages, stands as ``<store>``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import linecache
import time
import traceback
import types
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import pytest
from helpers import msg, wait_until

import sessionkit as sk
import sessionkit.messages as sk_messages
from sessionkit.aio import AsyncSession, AsyncStore
from sessionkit.store import _labels as labels_module
from sessionkit.store import _session as session_module

from .test_aio import new_target  # noqa: F401  (the store variants, a fixture)

#: Options both stores of a variant are opened with (so MessageTooLarge and client
#: metadata stripping can be compared too).
OPTIONS = {"max_message_bytes": 20_000, "reserved_metadata_keys": ("secret",)}

T0 = "2030-01-01T00:00:00.000Z"


# ---------------------------------------------------------------------------
# comparing outcomes


@dataclasses.dataclass(frozen=True)
class Returned:
    shape: str  # "value" (returned, or awaited), "iterator" (items of a sync or async iterator), "plain"
    value: Any


@dataclasses.dataclass(frozen=True)
class Raised:
    type: type
    message: str


class Paths:
    """The stores' paths, replaced by ``<store>`` in error messages."""

    names: tuple[str, ...] = ()

    @classmethod
    def clean(cls, text: str) -> str:
        for name in cls.names:
            text = text.replace(name, "<store>")
        return text


def _raised(exc: Exception) -> Raised:
    return Raised(type(exc), Paths.clean(str(exc)))


def settle(call: Callable[[], Any]) -> Returned | Raised:
    """The outcome of a sync call (an iterator's items read)."""
    try:
        result = call()
        if isinstance(result, Iterator):
            return Returned("iterator", list(result))
        return Returned("value", result)
    except Exception as exc:
        return _raised(exc)


async def asettle(call: Callable[[], Any]) -> Returned | Raised:
    """The outcome of an async call: a coroutine awaited, an async iterator's items read."""
    try:
        result = call()
        if inspect.isawaitable(result):
            return Returned("value", await result)
        if isinstance(result, AsyncIterator):
            return Returned("iterator", [item async for item in result])
        return Returned("plain", result)
    except Exception as exc:
        return _raised(exc)


def same(expected: Any, got: Any, where: str = "result") -> None:
    """``got`` equals ``expected`` value for value, with the same types all the way down."""
    assert type(got) is type(expected), (
        f"{where}: the sync API gives {type(expected).__qualname__} {expected!r}, "
        f"the async API {type(got).__qualname__} {got!r}"
    )
    if dataclasses.is_dataclass(expected) and not isinstance(expected, type):
        for f in dataclasses.fields(expected):
            if f.compare:
                same(getattr(expected, f.name), getattr(got, f.name), f"{where}.{f.name}")
    elif isinstance(expected, dict):
        assert list(got) == list(expected), f"{where}: keys {list(expected)} (sync) != {list(got)} (async)"
        for key in expected:
            same(expected[key], got[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), f"{where}: {len(expected)} items (sync) != {len(got)} (async)"
        for i, (x, y) in enumerate(zip(expected, got)):
            same(x, y, f"{where}[{i}]")
    elif type(expected).__module__.startswith("pandas"):
        import pandas.testing

        if hasattr(expected, "columns"):
            pandas.testing.assert_frame_equal(got, expected, check_exact=True, obj=where)
        else:
            pandas.testing.assert_series_equal(got, expected, check_exact=True, obj=where)
    elif type(expected).__module__.startswith("pyarrow"):
        assert got.schema.equals(expected.schema, check_metadata=True), f"{where}: schemas differ"
        assert got.equals(expected), f"{where}: tables differ:\n{expected}\n!=\n{got}"
    elif isinstance(expected, float) and expected != expected:
        assert got != got, f"{where}: nan (sync) != {got!r} (async)"
    else:
        assert got == expected, f"{where}: {expected!r} (sync) != {got!r} (async)"


# ---------------------------------------------------------------------------
# deterministic times and compaction ids


class Stamps:
    """Times (``now_iso``) and compaction ids (``uuid4``) counted from a settable start.

    ``start(phase)`` before each side of a write: the two stores get the same times and
    ids when the same writes are made on them.
    """

    BASE_MS = 1_893_456_000_000  # 2030-01-01T00:00:00Z

    def __init__(self) -> None:
        self.n = 0

    def start(self, phase: int) -> None:
        self.n = phase * 10_000

    def now_iso(self) -> str:
        self.n += 1
        ms = self.BASE_MS + self.n
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"

    def uuid4(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=self.n)


# ---------------------------------------------------------------------------
# the two stores


class Twins:
    """``a``: a store written through the sync API; ``b``: an async store given the same writes.

    ``b_target`` names ``b``'s store, for another, independent opening of it (signals
    between processes).
    """

    def __init__(self, a: sk.Store, b: AsyncStore, stamps: Stamps, b_target: Any) -> None:
        self.a = a
        self.b = b
        self.stamps = stamps
        self.b_target = b_target
        self.phase = 0

    @staticmethod
    def _on(store, session_id: str | None):
        return store if session_id is None else store.session(session_id)

    @staticmethod
    def _label(call: Callable, what: str) -> str:
        code = call.__code__
        return what or f"line {code.co_firstlineno}: {linecache.getline(code.co_filename, code.co_firstlineno).strip()}"

    async def read(self, call: Callable[[Any], Any], on: str | None = None, what: str = "") -> Any:
        """``call(x)`` with ``x`` the sync store behind ``b`` (or its session ``on``), then the async one."""
        return await self.read2(
            lambda st: call(self._on(st, on)), lambda st: call(self._on(st, on)), self._label(call, what)
        )

    async def read2(
        self, sync_call: Callable[[sk.Store], Any], aio_call: Callable[[AsyncStore], Any], what: str = ""
    ) -> Any:
        """``sync_call(b.sync)`` and ``aio_call(b)``: the same outcome."""
        expected = settle(lambda: sync_call(self.b.sync))
        got = await asettle(lambda: aio_call(self.b))
        same(expected, got, self._label(sync_call, what))
        return got

    async def write(self, call: Callable[[Any], Any], on: str | None = None, what: str = "") -> Any:
        """``call(x)`` on store ``a`` (or its session ``on``) and on ``b``: the same outcome."""
        return await self.write2(
            lambda st: call(self._on(st, on)), lambda st: call(self._on(st, on)), self._label(call, what)
        )

    async def write2(
        self, sync_call: Callable[[sk.Store], Any], aio_call: Callable[[AsyncStore], Any], what: str = ""
    ) -> Any:
        """``sync_call(a)`` and ``aio_call(b)`` from the same times and ids: the same outcome."""
        self.phase += 1
        self.stamps.start(self.phase)
        expected = settle(lambda: sync_call(self.a))
        self.stamps.start(self.phase)
        got = await asettle(lambda: aio_call(self.b))
        same(expected, got, self._label(sync_call, what))
        return got

    async def same_rows(self, call: Callable[[sk.Store], Any], what: str = "") -> None:
        """``call`` gives the same on ``a`` as on ``b`` (through the sync API): their rows are alike.

        A row's ``seq`` is its place in the store's write order; two stores may number the
        same writes differently (an engine may reserve numbers in blocks), so seqs are
        compared by their order among the rows read."""
        same(ranked(settle(lambda: call(self.a))), ranked(settle(lambda: call(self.b.sync))), self._label(call, what))


def ranked(outcome: Any) -> Any:
    """``outcome`` with every row's ``seq`` replaced by its rank among the seqs read."""
    if not isinstance(outcome, Returned) or not isinstance(outcome.value, list):
        return outcome
    rows = outcome.value
    rank = ranks(r.seq for r in rows if hasattr(r, "seq"))
    value = [with_seq(r, rank[r.seq]) if hasattr(r, "seq") else r for r in rows]
    return dataclasses.replace(outcome, value=value)


def ranks(seqs: Iterable[int]) -> dict[int, int]:
    """Each seq's place in write order among ``seqs``."""
    return {seq: i for i, seq in enumerate(sorted(set(seqs)))}


def with_seq(row: Any, seq: int) -> Any:
    """A node (a named tuple or a frozen dataclass) with another ``seq``."""
    return row._replace(seq=seq) if hasattr(row, "_replace") else dataclasses.replace(row, seq=seq)


def populate(st: sk.Store) -> None:
    """The rows both stores start from."""
    s = st.session("s")  # u1 - a1 - u2 - a2, and a branch a1 - u2b - a2b (the latest); u1..a1 compacted
    s.append_many(
        [
            msg("u1", "an apple a day"),
            msg("a1", "keeps the doctor away", "assistant"),
            msg("u2", "apple pie, please"),
            msg("a2", "here is a recipe", "assistant"),
        ],
        parent_id=None,
    )
    s.append(msg("u2b", "banana bread instead"), parent_id="a1")
    s.append(msg("a2b", "a loaf of banana bread", "assistant", metadata={"model": "m"}))
    s.import_compaction(sk.Compaction("c0", "u1", "a1", "greetings", T0, 20, 4))
    st.session("t").append_many([msg(f"t{i}", f"note {i}: apples and pears") for i in range(6)])
    st.run_log.begin("t", "r1", "hello")
    st.run_log.append_events("t", [{"kind": "run.start", "run_id": "r1"}, {"kind": "run.end", "run_id": "r1"}])
    st.run_log.end("r1", status="completed", usage={"input_tokens": 3, "output_tokens": 5})
    st.run_log.append_events("s", [{"kind": "note", "text": "not a run's"}])
    st.session_records.put("t", "notes", [(1, {"a": 1}), (2, ["b", 2])])
    st.session("c").append(msg("c1"))
    st.session("gone").append(msg("g1"))
    st.session("s").add_label("a1", "seen", rating=1, author="ana")
    st.add_label("t", "t2", "seen", target="branch", note="the apples")


def rows(st: sk.Store) -> dict:
    """Everything a store holds, read through the sync API."""
    out: dict = {
        kind: [row for batch in st.scan(kind) for row in batch]
        for kind in ("nodes", "messages", "compactions", "runs", "events")
    }
    # seqs by their order (two stores may number the same writes differently; see same_rows)
    rank = ranks(row[1].seq for kind in ("nodes", "messages") for row in out[kind])
    for kind in ("nodes", "messages"):  # rows: (session id, node, ...)
        out[kind] = [(row[0], with_seq(row[1], rank[row[1].seq]), *row[2:]) for row in out[kind]]
    out["sessions"] = st.list_sessions()
    out["records"] = [st.session_records.get(sid, kind) for sid, kind in (("t", "notes"), ("w", "k"))]
    out["labels"] = st.labels()
    return out


# ---------------------------------------------------------------------------
# the recipes: one or more per member, registered under "Class.member"

RECIPES: dict[str, Callable[[Twins], Any]] = {}
#: Recipes that end the stores (run last, after the rows of both stores are compared).
CLOSING: set[Callable] = set()


def recipe(*keys: str, closing: bool = False):
    def register(fn):
        for key in keys:
            assert key not in RECIPES, f"two recipes for {key}"
            RECIPES[key] = fn
        if closing:
            CLOSING.add(fn)
        return fn

    return register


# -- the store: attributes ----------------------------------------------------------------


@recipe("AsyncStore.path", "AsyncStore.closed", "AsyncStore.capabilities")
async def _attributes(t: Twins):
    for name in ("path", "closed", "capabilities"):
        same(getattr(t.b.sync, name), getattr(t.b, name), name)


@recipe("AsyncStore.settings", "settings.engine")
async def _settings(t: Twins):
    assert t.b.settings is t.b.settings
    same(t.b.sync.settings.engine, t.b.settings.engine, "engine")
    assert repr(t.b.sync.settings.engine) in repr(t.b.settings)


@recipe("AsyncStore.sync")
async def _store_sync(t: Twins):
    assert type(t.b.sync) is sk.Store and t.b.sync is t.b.sync and not t.b.sync.closed
    same(t.b.sync.path, t.b.path, "path")


@recipe("settings.search_candidates")
async def _search_candidates(t: Twins):
    same(t.b.sync.settings.search_candidates, t.b.settings.search_candidates)
    before = t.b.settings.search_candidates
    t.b.settings.search_candidates = 7
    assert t.b.sync.settings.search_candidates == 7 and t.b.settings.search_candidates == 7
    same(
        settle(lambda: setattr(t.b.sync.settings, "search_candidates", 0)),
        settle(lambda: setattr(t.b.settings, "search_candidates", 0)),
        "search_candidates = 0",
    )
    t.b.settings.search_candidates = before
    assert t.b.sync.settings.search_candidates == before


@recipe("AsyncStore.__await__")
async def _await(t: Twins):
    assert (await t.b) is t.b


@recipe("AsyncStore.session")
async def _session(t: Twins):
    handle = t.b.session("s")
    assert type(handle) is AsyncSession and handle is t.b.session("s")
    assert handle.sync is t.b.sync.session("s")
    assert t.b.session() is t.b.session("") and t.b.session().session_id == t.b.sync.session().session_id
    for odd in (42, None, "a\x00b", "ünï"):
        expected, got = settle(lambda odd=odd: t.b.sync.session(odd)), settle(lambda odd=odd: t.b.session(odd))
        if isinstance(expected, Returned):  # a handle: an AsyncSession for the sync Session
            assert isinstance(got, Returned) and type(got.value) is AsyncSession, got
            assert got.value.sync is expected.value and got.value.session_id == expected.value.session_id
        else:
            same(expected, got, f"session({odd!r})")


# -- the store: reads -----------------------------------------------------------------------


@recipe("AsyncStore.list_sessions")
async def _list_sessions(t: Twins):
    await t.read(lambda st: st.list_sessions())


@recipe("AsyncStore.stats")
async def _stats(t: Twins):
    await t.read(lambda st: st.stats())


@recipe("AsyncStore.change_marker")
async def _change_marker(t: Twins):
    await t.read(lambda st: st.change_marker())


@recipe("AsyncStore.search")
async def _store_search(t: Twins):
    await t.read(lambda st: st.search("apple"))
    await t.read(lambda st: st.search("apples pears", session_id="t", limit=2))
    await t.read(lambda st: st.search('"banana bread"'))
    await t.read(lambda st: st.search("apple", limit=-1))
    await t.read(lambda st: st.search("apple", labels=iter(["seen"])))


@recipe("AsyncStore.runs")
async def _runs(t: Twins):
    await t.read(lambda st: st.runs("t"))
    await t.read(lambda st: st.runs("nobody"))
    await t.read(lambda st: st.runs(3))


@recipe("AsyncStore.events")
async def _events(t: Twins):
    await t.read(lambda st: st.events("t"))
    await t.read(lambda st: st.events("t", 0))
    await t.read(lambda st: st.events("t", after_seq="0"))


@recipe("session_records.get")
async def _records(t: Twins):
    await t.read(lambda st: st.session_records.get("t", "notes"))
    await t.read(lambda st: st.session_records.get("t", "nothing"))
    await t.read(lambda st: st.session_records.get(1, "notes"))


@recipe("AsyncStore.scan")
async def _scan(t: Twins):
    for kind in ("nodes", "messages", "compactions", "runs", "events"):
        await t.read(lambda st, kind=kind: st.scan(kind), what=f"scan({kind!r})")
    await t.read(lambda st: st.scan("messages", session_ids=iter(["t", "s"]), batch_size=2))
    await t.read(lambda st: st.scan("nodes", session_ids="s", batch_size=3))
    await t.read(lambda st: st.scan("tables"))
    await t.read(lambda st: st.scan("nodes", batch_size=0))


@recipe("AsyncStore.messages_df")
async def _messages_df(t: Twins):
    await t.read(lambda st: st.messages_df())
    await t.read(lambda st: st.messages_df(["s"]))


@recipe("AsyncStore.sql")
async def _sql(t: Twins):
    await t.read(lambda st: st.sql("SELECT session_id, count(*) AS n FROM messages GROUP BY 1 ORDER BY 1"))
    await t.read(lambda st: st.sql("SELECT id, role FROM messages WHERE session_id = ? ORDER BY id", ["s"]))
    await t.read(lambda st: st.sql("DELETE FROM messages"))
    await t.read(lambda st: st.sql("SELECT * FROM sessionkit_messages"))
    await t.read(lambda st: st.sql("SELECT * FROM read_csv('/etc/passwd')"))
    await t.read(lambda st: st.sql("SELECT count(*) AS n FROM range(3)", files=True))


@recipe("AsyncStore.sql_arrow")
async def _sql_arrow(t: Twins):
    await t.read(lambda st: st.sql_arrow("SELECT id FROM messages ORDER BY id", session_ids=iter(["t"])))
    await t.read(
        lambda st: st.sql_arrow("SELECT count(*) AS n FROM messages WHERE role = $role", {"role": "assistant"})
    )
    await t.read(lambda st: st.sql_arrow(42))


@recipe("AsyncStore.interrupt_sql")
async def _interrupt_sql(t: Twins):
    await t.read(lambda st: st.interrupt_sql())  # nothing running: nothing to stop, the store goes on
    await t.read(lambda st: st.sql("SELECT count(*) AS n FROM messages"))


@recipe("AsyncStore.to_arrow")
async def _to_arrow(t: Twins):
    await t.read(lambda st: st.to_arrow("messages"))
    await t.read(lambda st: st.to_arrow("sessions"))
    await t.read(lambda st: st.to_arrow("nope"))


@recipe("AsyncStore.runs_df")
async def _runs_df(t: Twins):
    await t.read(lambda st: st.runs_df())


@recipe("AsyncStore.events_df")
async def _events_df(t: Twins):
    await t.read(lambda st: st.events_df())
    await t.read(lambda st: st.events_df(["t"]))


@recipe("AsyncStore.load")
async def _load(t: Twins):  # the SessionStore protocol: get_history() of the session
    await t.read2(lambda st: st.session("s").get_history(), lambda st: st.load("s"))
    await t.read2(lambda st: st.session("nobody").get_history(), lambda st: st.load("nobody"))


@recipe("coordination.try_hold", "coordination.hold_taken", "coordination.release_hold")
async def _holds(t: Twins):
    """The same calls in turn, on the sync store then on the async one (no coordination but on PostgreSQL)."""
    steps = [
        lambda st: st.coordination.try_hold("h"),
        lambda st: st.coordination.try_hold("h"),
        lambda st: st.coordination.hold_taken("h"),
        lambda st: st.coordination.release_hold("h"),
        lambda st: st.coordination.hold_taken("h"),
        lambda st: st.coordination.release_hold("h"),
        lambda st: st.coordination.try_hold(7),
    ]
    expected = [settle(lambda step=step: step(t.b.sync)) for step in steps]
    got = [await asettle(lambda step=step: step(t.b)) for step in steps]
    same(expected, got, "try_hold, hold_taken, release_hold")
    if t.b.capabilities.coordination:
        assert [o.value for o in got[:5]] == [True, False, True, None, False]


@recipe("coordination.signal", "coordination.on_signal")
async def _signals(t: Twins):
    await t.read(lambda st: st.coordination.on_signal(42))
    if not t.b.capabilities.coordination:
        await t.read(lambda st: st.coordination.on_signal(print))
        await t.read(lambda st: st.coordination.signal("t", "ping", {"n": 1}))
        return
    # Another opening of the same store stands for another process.
    other = sk.open_store(t.b_target)
    try:
        heard_sync: list = []
        heard_async: list = []
        arrived = asyncio.Event()

        async def handler(*signal):
            heard_async.append(signal)
            arrived.set()

        same(
            settle(lambda: t.b.sync.coordination.on_signal(lambda *signal: heard_sync.append(signal))),
            await asettle(lambda: t.b.coordination.on_signal(handler)),
            "on_signal(handler)",
        )
        other.coordination.signal("t", "ping", {"n": 1})
        await asyncio.wait_for(arrived.wait(), 60)
        wait_until(lambda: heard_sync, what="the sync handler to hear the signal")
        same(heard_sync, heard_async, "signals heard")
        assert heard_async == [("t", "ping", {"n": 1})]

        heard_other: list = []
        other.coordination.on_signal(lambda *signal: heard_other.append(signal))
        same(
            settle(lambda: t.b.sync.coordination.signal("t", "pong", [1, "x"])),
            await asettle(lambda: t.b.coordination.signal("t", "pong", [1, "x"])),
            "signal(...)",
        )
        wait_until(lambda: len(heard_other) == 2, what="the other store to hear both signals")
        same(heard_other[0], heard_other[1], "the signal as sent by the sync and the async API")
    finally:
        other.close()


# -- sessions: attributes and reads ------------------------------------------------------------


@recipe("AsyncSession.session_id")
async def _session_id(t: Twins):
    for sid in ("s", "", "nobody"):
        same(t.b.sync.session(sid).session_id, t.b.session(sid).session_id)


@recipe("AsyncSession.store")
async def _session_store(t: Twins):
    assert t.b.session("s").store is t.b and t.b.sync.session("s").store is t.b.sync


@recipe("AsyncSession.sync")
async def _session_sync(t: Twins):
    s = t.b.session("s")
    assert type(s.sync) is sk.Session and s.sync is t.b.sync.session("s") and s.sync.session_id == "s"


@recipe("AsyncSession.run_log", "AsyncSession.can_branch")
async def _session_run_log(t: Twins):
    s = t.b.session("s")
    assert s.run_log is t.b.run_log and s.sync.run_log is t.b.sync.run_log
    same(s.sync.can_branch, s.can_branch, "can_branch")


@recipe("AsyncSession.get")
async def _get(t: Twins):
    await t.read(lambda s: s.get("u2"), on="s")
    await t.read(lambda s: s.get("ghost"), on="s")
    await t.read(lambda s: s.get(5), on="s")


@recipe("AsyncSession.latest_leaf")
async def _latest_leaf(t: Twins):
    await t.read(lambda s: s.latest_leaf(), on="s")
    await t.read(lambda s: s.latest_leaf(), on="nobody")


@recipe("AsyncSession.branches")
async def _branches(t: Twins):
    await t.read(lambda s: s.branches("a1"), on="s")
    await t.read(lambda s: s.branches("a2"), on="s")
    await t.read(lambda s: s.branches("ghost"), on="s")


@recipe("AsyncSession.roots")
async def _roots(t: Twins):
    await t.read(lambda s: s.roots(), on="s")


@recipe("AsyncSession.nodes")
async def _nodes(t: Twins):
    await t.read(lambda s: s.nodes(), on="s")


@recipe("AsyncSession.get_many")
async def _get_many(t: Twins):
    await t.read(lambda s: s.get_many(iter(["u2", "ghost", "a1"])), on="s")
    await t.read(lambda s: s.get_many("u1"), on="s")


@recipe("AsyncSession.tree")
async def _tree(t: Twins):
    await t.read(lambda s: s.tree(), on="s")


@recipe("AsyncSession.path")
async def _path(t: Twins):
    await t.read(lambda s: s.path(), on="s")
    await t.read(lambda s: s.path("a2"), on="s")
    await t.read(lambda s: s.path("ghost"), on="s")


@recipe("AsyncSession.path_length")
async def _path_length(t: Twins):
    await t.read(lambda s: s.path_length(), on="s")
    await t.read(lambda s: s.path_length("u2"), on="s")


@recipe("AsyncSession.path_slice")
async def _path_slice(t: Twins):
    await t.read(lambda s: s.path_slice(0, 3), on="s")
    await t.read(lambda s: s.path_slice(1, 2, leaf_id="a2"), on="s")
    await t.read(lambda s: s.path_slice(0, 1, leaf_id="ghost"), on="s")
    await t.read(lambda s: s.path_slice(-1, 1), on="s")


@recipe("AsyncSession.count")
async def _count(t: Twins):  # len(session) of the sync API
    for sid in ("s", "t", "nobody"):
        await t.read2(
            lambda st, sid=sid: len(st.session(sid)), lambda st, sid=sid: st.session(sid).count(), f"count of {sid!r}"
        )


@recipe("AsyncSession.history")
async def _history(t: Twins):
    await t.read(lambda s: s.history(), on="s")
    await t.read(lambda s: s.history(leaf_id="a2", newest_first=True, compacted=False), on="s")
    await t.read(lambda s: s.history(newest_first=True), on="s")
    await t.read(lambda s: s.history(leaf_id="ghost"), on="s")
    await t.read(lambda s: s.history(), on="nobody")


@recipe("AsyncSession.get_history")
async def _get_history(t: Twins):
    await t.read(lambda s: s.get_history(), on="s")
    await t.read(lambda s: s.get_history(leaf_id="a2", compacted=False), on="s")
    await t.read(lambda s: s.get_history(leaf_id="ghost"), on="s")


@recipe("AsyncSession.snapshot")
async def _snapshot(t: Twins):
    await t.read(lambda s: s.snapshot(), on="s")


@recipe("AsyncSession.recent_history")
async def _recent_history(t: Twins):
    await t.read(lambda s: s.recent_history(10_000), on="s")
    await t.read(lambda s: s.recent_history(30, min_messages=2, leaf_id="a2", compacted=False), on="s")
    await t.read(lambda s: s.recent_history(-1), on="s")


@recipe("AsyncSession.compactions")
async def _compactions(t: Twins):
    await t.read(lambda s: s.compactions(), on="s")


@recipe("AsyncSession.context_tokens")
async def _context_tokens(t: Twins):
    await t.read(lambda s: s.context_tokens(), on="s")
    await t.read(lambda s: s.context_tokens("a2"), on="s")


@recipe("AsyncSession.to_pandas")
async def _to_pandas(t: Twins):
    await t.read(lambda s: s.to_pandas(), on="s")


@recipe("AsyncSession.search")
async def _session_search(t: Twins):
    await t.read(lambda s: s.search("apple"), on="s")
    await t.read(lambda s: s.search("apple", limit=1), on="t")
    await t.read(lambda s: s.search("apples", labels="seen"), on="t")


# -- sessions: writes (on both stores) ----------------------------------------------------------


@recipe("AsyncSession.append")
async def _append(t: Twins):
    await t.write(lambda s: s.append(msg("w1", "first write")), on="w")
    await t.write(lambda s: s.append(msg("w1", "the same id again")), on="w")  # inserted=False
    await t.write(
        lambda s: s.append(msg("w2", metadata={"secret": 1, "kept": 2}), parent_id=None, source="client"), on="w"
    )
    await t.write(lambda s: s.append(msg("w3", metadata={"secret": 1})), on="w")  # source="server" keeps it
    await t.write(lambda s: s.append(msg("w4"), parent_id="ghost"), on="w")
    await t.write(lambda s: s.append({"id": "bad", "parts": []}), on="w")
    await t.write(lambda s: s.append(msg("big", "x" * 30_000)), on="w")
    await t.write(lambda s: s.append("not a message"), on="w")
    await t.write(lambda s: s.append(msg("w4"), source="elsewhere"), on="w")


@recipe("AsyncSession.append_many")
async def _append_many(t: Twins):
    await t.write(lambda s: s.append_many(iter([msg("w5"), msg("w6", role="assistant")]), parent_id="w1"), on="w")
    await t.write(lambda s: s.append_many([msg("w7"), msg("w5")]), on="w")
    await t.write(lambda s: s.append_many([msg("ok"), {"id": "", "role": "user", "parts": []}]), on="w")
    await t.write(lambda s: s.append_many([msg("w8", metadata={"secret": 2})], source="client"), on="w")


@recipe("AsyncSession.import_message")
async def _import_message(t: Twins):
    await t.write(lambda s: s.import_message(msg("w9"), parent_id="w6", created_at="2020-01-01T00:00:00Z"), on="w")
    await t.write(lambda s: s.import_message(msg("w10")), on="w")
    await t.write(lambda s: s.import_message(msg("w11"), parent_id="ghost"), on="w")


@recipe("AsyncSession.import_many")
async def _import_many(t: Twins):
    await t.write(
        lambda s: s.import_many(iter([(msg("w12"), "w9", None), (msg("w13"), "w12", "2021-06-01T12:00:00.000Z")])),
        on="w",
    )
    await t.write(lambda s: s.import_many([(msg("w14"), "ghost", None)]), on="w")


@recipe("AsyncStore.import_many", "AsyncStore.sessions_holding")
async def _store_import_many(t: Twins):
    def records():
        chain = iter([(msg("v1"), None, None), (msg("v2"), "v1", None)])
        return iter([("w", [(msg("w20"), "w9", None)]), ("v", chain)])

    await t.write(lambda st: st.import_many(records()))
    await t.write(lambda st: st.import_many([("w", [(msg("w20"), None, None)]), ("v", [(msg("v3"), "v2", None)])]))
    await t.write(lambda st: st.import_many([("w", [(msg("w21"), None, None)]), ("u", [(msg("u1"), "ghost", None)])]))
    await t.same_rows(lambda st: st.session("v").get_history())
    await t.read(lambda st: st.sessions_holding(iter(["v", "w", "u", "none"])))


@recipe("AsyncSession.update")
async def _update(t: Twins):
    await t.write(lambda s: s.update(msg("w1", "rewritten")), on="w")
    await t.write(lambda s: s.update(msg("ghost")), on="w")


@recipe("AsyncSession.delete")
async def _delete(t: Twins):
    await t.write(lambda s: s.delete("w13"), on="w")
    await t.write(lambda s: s.delete(iter(["w5"]), subtree=True), on="w")
    await t.write(lambda s: s.delete(["ghost"]), on="w")
    await t.same_rows(lambda st: st.session("w").nodes())


@recipe("AsyncSession.clear")
async def _clear(t: Twins):
    await t.write(lambda s: s.clear(), on="c")
    await t.write(lambda s: s.clear(), on="nobody")


@recipe("AsyncSession.import_compaction")
async def _import_compaction(t: Twins):
    comp = sk.Compaction("cw", "w1", "w7", "imported", T0, 12, 3)
    await t.write(lambda s: s.import_compaction(comp), on="w")
    await t.write(lambda s: s.import_compaction(comp), on="w")  # False: already there
    await t.write(lambda s: s.import_compaction(sk.Compaction("cx", "ghost", "w1", "x", T0, 1, 1)), on="w")
    await t.write(lambda s: s.import_compaction({"id": "cx"}), on="w")


@recipe("AsyncSession.on_compaction", "AsyncSession.compact_after", "AsyncSession.compact")
async def _compaction(t: Twins):
    def sync_side(st):
        s = st.session("k")
        s.append_many([msg(f"k{i}", "word " * 12) for i in range(6)])
        seen = []

        def fn(messages, ctx):
            seen.append([messages, ctx.leaf_id, ctx.tokens, ctx.previous, ctx.session is s, ctx.session.path_length()])
            return sk.CompactionResult(messages[0]["id"], messages[-2]["id"], f"summary {len(seen)}")

        out: list = [s.on_compaction(fn) is s, s.compact()]
        out += [s.compact_after(60) is s, s.append(msg("k6", "word " * 40))]  # crosses it: compacts again
        out += [s.compactions(), s.get_history(), seen]
        assert len(seen) == 2
        return out

    async def aio_side(st):
        s = st.session("k")
        await s.append_many([msg(f"k{i}", "word " * 12) for i in range(6)])
        seen = []

        async def fn(messages, ctx):
            await asyncio.sleep(0)
            seen.append(
                [messages, ctx.leaf_id, ctx.tokens, ctx.previous, ctx.session is s, await ctx.session.path_length()]
            )
            return sk.CompactionResult(messages[0]["id"], messages[-2]["id"], f"summary {len(seen)}")

        out: list = [s.on_compaction(fn) is s, await s.compact()]
        out += [s.compact_after(60) is s, await s.append(msg("k6", "word " * 40))]
        out += [await s.compactions(), await s.get_history(), seen]
        return out

    await t.write2(sync_side, aio_side, "on_compaction, compact, compact_after")

    def sync_errors(st):
        s = st.session("k2")
        return [
            settle(lambda: s.on_compaction(42)),
            settle(lambda: s.compact_after(-1)),
            settle(lambda: s.compact_after("9")),
            settle(s.compact),
        ]

    async def aio_errors(st):
        s = st.session("k2")
        return [
            settle(lambda: s.on_compaction(42)),
            settle(lambda: s.compact_after(-1)),
            settle(lambda: s.compact_after("9")),
            await asettle(s.compact),
        ]

    await t.write2(sync_errors, aio_errors, "compaction errors")


@recipe("AsyncSession.mirror")
async def _mirror(t: Twins):
    def transform(m):
        return (m["id"], m["role"])

    def sync_side(st):
        s = st.session("m")
        s.append(msg("m0"))
        seen: list = []
        stop = s.mirror(seen, transform=transform, intercept=lambda event: False)
        first = list(seen)
        s.append(msg("m1", role="assistant"))
        second = list(seen)
        stop()
        s.append(msg("m2"))
        return [type(stop), first, second, list(seen), settle(lambda: s.mirror(42))]

    async def aio_side(st):
        s = st.session("m")
        await s.append(msg("m0"))
        seen: list = []
        stop = await s.mirror(seen, transform=transform, intercept=lambda event: False)
        first = list(seen)
        await s.append(msg("m1", role="assistant"))
        second = list(seen)  # updated before the append's await returned
        stop()
        await s.append(msg("m2"))
        return [type(stop), first, second, list(seen), await asettle(lambda: s.mirror(42))]

    await t.write2(sync_side, aio_side, "mirror")


# -- the store: writes (on both stores) -------------------------------------------------------------


@recipe("AsyncStore.delete_session")
async def _delete_session(t: Twins):
    await t.write(lambda st: st.delete_session("gone"))
    await t.write(lambda st: st.delete_session("gone"))  # SessionNotFound
    await t.write(lambda st: st.delete_session(None))


@recipe("run_log.begin", "run_log.end", "run_log.reopen")
async def _run_records(t: Twins):
    await t.write(lambda st: st.run_log.begin("w", "r2", "go"))
    await t.write(lambda st: st.run_log.begin("w", "r2", "again"))  # a run id is unique
    await t.write(lambda st: st.run_log.end("r2", status="failed", error="boom", usage={"total_tokens": 4}))
    await t.write(lambda st: st.run_log.reopen("r2"))
    await t.write(lambda st: st.run_log.reopen("unknown"))
    await t.write(lambda st: st.run_log.end("r2", status="completed"))
    await t.write(lambda st: st.run_log.end("r2", status="completed", usage={"x": object()}))
    await t.write(lambda st: st.run_log.begin("w", "r3", None))
    await t.same_rows(lambda st: st.runs("w"))


@recipe("AsyncStore.run_log", "AsyncStore.session_records", "AsyncStore.coordination")
async def _store_parts(t: Twins):
    for name in ("run_log", "session_records", "coordination"):
        same(getattr(t.b.sync, name) is None, getattr(t.b, name) is None, name)
        assert getattr(t.b, name) is getattr(t.b, name), name
    same(t.b.sync.capabilities.coordination, t.b.coordination is not None, "coordination")


@recipe("run_log.runs", "run_log.events")
async def _run_log_reads(t: Twins):
    await t.read(lambda st: st.run_log.runs("w"))
    await t.read(lambda st: st.run_log.events("w"))
    await t.read(lambda st: st.run_log.events("w", after_seq=0))


@recipe("run_log.append_events")
async def _append_events(t: Twins):
    await t.write(
        lambda st: st.run_log.append_events("w", iter([{"kind": "a", "run_id": "r2"}, {"kind": "b", "ts": T0, "v": 2}]))
    )
    await t.write(lambda st: st.run_log.append_events("w", [{"kind": "c"}]))
    await t.write(lambda st: st.run_log.append_events("w", [1]))
    await t.same_rows(lambda st: st.events("w"))


@recipe("AsyncStore.labels")
async def _store_labels(t: Twins):
    await t.read(lambda st: st.labels())
    await t.read(lambda st: st.labels(tag=iter(["seen"]), min_rating=0, session_id="s"))
    await t.read(lambda st: st.labels(message_id=["t2"], session_id="t", target="branch"))
    await t.read(lambda st: st.labels(tag=""))


@recipe("AsyncSession.labels")
async def _session_labels(t: Twins):
    await t.read(lambda s: s.labels(), on="s")
    await t.read(lambda s: s.labels(iter(["a1", "u1"]), tag="seen", author="ana"), on="s")
    await t.read(lambda s: s.labels(max_rating=float("nan")), on="s")


@recipe("AsyncStore.add_label", "AsyncSession.add_label", "AsyncStore.remove_label", "AsyncSession.remove_label")
async def _label_writes(t: Twins):
    await t.write(lambda st: st.add_label("t", "t1", "bug", rating=2, note="n", author="ana"))
    await t.write(lambda s: s.add_label("a2b", "good", target="branch"), on="s")
    await t.write(lambda s: s.add_label("a2b", ""), on="s")
    await t.write(lambda s: s.add_label("nope", "x"), on="s")
    bug, good = (t.a.labels(tag=tag)[0].id for tag in ("bug", "good"))  # (the same ids on both stores)
    assert [x.id for x in t.b.sync.labels(tag=["bug", "good"])] == [bug, good]
    await t.write(lambda st: st.remove_label(bug))
    await t.write(lambda s: s.remove_label(good), on="s")
    await t.write(lambda s: s.remove_label("no such label"), on="s")
    await t.same_rows(lambda st: st.labels())


@recipe("AsyncStore.import_labels")
async def _import_labels(t: Twins):
    label = sk.Label("imported", "c", "c1", "kept", rating=3, created_at=T0)
    await t.write(lambda st: st.import_labels(iter([label])))
    await t.write(lambda st: st.import_labels([label.to_dict()]))
    await t.write(lambda st: st.import_labels([sk.Label("x", "c", "missing", "kept")]))
    await t.same_rows(lambda st: st.labels(session_id="c"))


@recipe(
    "AsyncStore.dataset",
    "AsyncStore.datasets",
    "AsyncStore.dataset_items",
    "AsyncStore.delete_dataset",
    "AsyncStore.import_datasets",
)
async def _datasets(t: Twins):
    turns = "SELECT session_id, reply_id AS message_id FROM turns WHERE reply_id IS NOT NULL"
    await t.write(lambda st: st.dataset("d", query=turns))
    await t.write(lambda st: st.dataset("d", units=iter([("s", "a1"), ("t", "t2")]), level="path"))
    await t.write(lambda st: st.dataset("d", units=[("s", "nope")]))
    await t.write(lambda st: st.dataset("d", query="SELECT 1 AS x"))
    await t.read(lambda st: st.datasets())
    await t.read(lambda st: st.dataset_items("d"))
    await t.read(lambda st: st.dataset_items("d", 1))
    await t.read(lambda st: st.dataset_items("none"))
    await t.write(
        lambda st: st.import_datasets(
            iter([{"name": "e", "version": 4, "level": "turn", "created_at": T0, "items": []}])
        )
    )
    await t.write(lambda st: st.import_datasets([{"name": "e"}]))
    await t.write(lambda st: st.delete_dataset("d", 1))
    await t.write(lambda st: st.delete_dataset("none"))
    await t.same_rows(lambda st: [(d, st.dataset_items(d.name, d.version)) for d in st.datasets()])


@recipe(
    "AsyncStore.queue",
    "AsyncStore.queues",
    "AsyncStore.queue_info",
    "AsyncStore.queue_units",
    "AsyncStore.next_unit",
    "AsyncStore.submit_label",
    "AsyncStore.release_unit",
    "AsyncStore.queue_progress",
    "AsyncStore.queue_labels",
    "AsyncStore.delete_queue",
    "AsyncStore.export_queue",
    "AsyncStore.import_queues",
)
async def _queues(t: Twins):
    await t.write(lambda st: st.queue("q", units=iter([("s", "a1"), ("t", "t2")]), rubric=["ok", "no"], per_unit=2))
    await t.write(lambda st: st.queue("q", units=[("s", "a1")], rubric=["ok"]))
    await t.write(lambda st: st.queue("r", units=[("s", "nope")], rubric=["ok"]))
    await t.read(lambda st: st.queues())
    await t.read(lambda st: st.queue_info("q"))
    await t.read(lambda st: st.queue_info("none"))
    await t.read(lambda st: st.queue_units("q"))
    await t.write(lambda st: st.next_unit("q", "ana"))
    await t.write(lambda st: st.next_unit("q", "bo", lease_seconds=60))
    await t.write(lambda st: st.submit_label("q", "ana", 0, "ok", note="fine"))
    await t.write(lambda st: st.submit_label("q", "ana", 0, "no"))
    await t.write(lambda st: st.release_unit("q", "bo", 0))
    await t.write(lambda st: st.release_unit("q", "bo", 0))
    await t.read(lambda st: st.queue_progress("q"))
    await t.read(lambda st: st.queue_labels("q"))
    await t.read(lambda st: st.export_queue("q"))
    exported = {**t.a.export_queue("q"), "name": "copied"}
    await t.write(lambda st: st.import_queues(iter([exported])))
    await t.write(lambda st: st.import_queues([{"name": "broken"}]))
    await t.write(lambda st: st.delete_queue("q"))
    await t.write(lambda st: st.delete_queue("q"))
    await t.same_rows(lambda st: st.queues())


@sk.scorers.scorer(name="apples")
def _apples(unit):
    """A code scorer: ``apples`` on a message that speaks of them."""
    return sk.Score("apples", rating=len(unit.messages)) if "apple" in unit.text else None


@recipe("AsyncStore.score")
async def _score(t: Twins):
    await t.write(lambda st: st.score(_apples, level="message", concurrency=1, progress=False))
    await t.write(lambda st: st.score(_apples, level="message", sessions=iter(["t"]), progress=False))
    await t.write(lambda st: st.score(_apples, level="path", where="depth > 2", concurrency=1, progress=False))
    await t.write(lambda st: st.score(_apples, level="word"))
    await t.same_rows(lambda st: st.labels(scorer="apples"))


@recipe("AsyncStore.import_runs", "AsyncStore.import_events", "AsyncStore.import_embeddings")
async def _import_facts(t: Twins):
    run = sk.RunRecord("imported-run", "c", "completed", None, T0, T0, {"in": 3}, "hi", {"variant": "v"})
    await t.write(lambda st: st.import_runs(iter([run])))
    await t.write(lambda st: st.import_runs([dataclasses.asdict(run)]))
    await t.write(lambda st: st.import_runs([{"run_id": "r", "session_id": "c", "status": "x", "started_at": "no"}]))
    await t.same_rows(lambda st: st.runs("c"))
    events = [{"session_id": "c", "seq": 40, "kind": "start", "ts": T0}, {"session_id": "c", "seq": 41, "kind": "end"}]
    await t.write(lambda st: st.import_events(iter(events)))
    await t.write(lambda st: st.import_events(events))
    await t.write(lambda st: st.import_events([{"session_id": "c", "seq": 40, "kind": "other"}]))
    await t.same_rows(lambda st: st.events("c", after_seq=39))
    vectors = [{"session_id": "c", "message_id": "c1", "model": "m", "vector": [0.5, 1.0]}]
    await t.write(lambda st: st.import_embeddings(iter(vectors)))
    await t.write(lambda st: st.import_embeddings(vectors))
    await t.write(lambda st: st.import_embeddings([dict(vectors[0], message_id="missing")]))
    await t.same_rows(lambda st: st.sql("SELECT session_id, message_id, model, vector FROM embeddings ORDER BY ALL"))


def _letters(texts):
    """A deterministic embedder: letter counts (a, e, i, o, u and the rest)."""
    return [[float(t.count(c)) for c in "aeiou"] + [float(len(t))] for t in texts]


@recipe("AsyncStore.embed", "AsyncStore.similar")
async def _embed_similar(t: Twins):
    seen = []
    await t.write(lambda st: st.embed(_letters, batch_size=2, progress=lambda d, n: seen.append((d, n))))
    await t.write(lambda st: st.embed(_letters))
    await t.write(lambda st: st.embed(42))
    await t.read(lambda st: st.similar("apple pie", embedder=_letters, k=3))
    await t.read(lambda st: st.similar("apple", embedder=_letters, session_ids=iter(["t"])))
    await t.read(lambda st: st.similar(("s", "nope")))
    await t.read(lambda st: st.similar(7, embedder=_letters))
    await t.same_rows(lambda st: st.sql("SELECT session_id, message_id, vector FROM embeddings ORDER BY ALL"))


@recipe("session_records.put")
async def _put_records(t: Twins):
    await t.write(lambda st: st.session_records.put("w", "k", iter([(1, {"x": 1}), (2, None)])))
    await t.write(lambda st: st.session_records.put("w", "k", [(1, "replaced")]))
    await t.write(lambda st: st.session_records.put("w", "k", [(True, 1)]))
    await t.same_rows(lambda st: st.session_records.get("w", "k"))


@recipe("AsyncStore.save")
async def _save(t: Twins):  # the SessionStore protocol: append_many() under the latest leaf
    batches = [[msg("v1"), msg("v2", role="assistant")], [msg("v3")]]

    def sync_side(st):
        return [(st.session("v").append_many(b), None)[1] for b in batches] + [st.session("v").get_history()]

    async def aio_side(st):
        return [await st.save("v", b) for b in batches] + [await st.session("v").get_history()]

    await t.write2(sync_side, aio_side, "save")


@recipe("AsyncStore.subscribe")
async def _subscribe(t: Twins):
    def sync_side(st):
        events: list = []
        unsubscribe = st.subscribe(events.append)
        s = st.session("f")
        s.append(msg("f1"))
        s.update(msg("f1", "changed"))
        s.append_many([msg("f2"), msg("f3")])
        unsubscribe()
        s.append(msg("f4"))
        return [type(unsubscribe), events, settle(lambda: st.subscribe(42))]

    async def aio_side(st):
        on_worker: list = []  # a sync subscriber: called on the worker thread
        on_loop: list = []  # an async one: a task on this loop
        all_in = asyncio.Event()

        async def on_change(event):
            on_loop.append(event)
            if len(on_loop) == 4:
                all_in.set()

        unsubscribe_loop = await st.subscribe(on_change)
        unsubscribe = await st.subscribe(on_worker.append)
        s = st.session("f")
        await s.append(msg("f1"))
        await s.update(msg("f1", "changed"))
        await s.append_many([msg("f2"), msg("f3")])
        await asyncio.wait_for(all_in.wait(), 60)
        unsubscribe_loop()
        unsubscribe()
        # A subscriber added now is called after any older one still subscribed: once it has run,
        # on_change would have seen f4 too.
        later = asyncio.Event()

        async def sentinel(event):
            later.set()

        stop_sentinel = await st.subscribe(sentinel)
        await s.append(msg("f4"))
        await asyncio.wait_for(later.wait(), 60)
        stop_sentinel()
        same(on_worker, on_loop, "events of the async subscriber")
        return [type(unsubscribe), on_worker, await asettle(lambda: st.subscribe(42))]

    await t.write2(sync_side, aio_side, "subscribe")


class Boom(Exception):
    pass


@recipe("AsyncStore.transaction", "transaction.__aenter__", "transaction.__aexit__")
async def _transaction(t: Twins):
    def sync_side(st):
        s = st.session("x")
        with st.transaction() as tx:
            results = [tx is st, s.append(msg("x1")), s.append(msg("x2"))]
            with st.transaction() as inner:  # nested: joins
                results += [inner is st, s.append(msg("x3"))]
        try:
            with st.transaction():
                s.append(msg("x4"))
                raise Boom("roll back")
        except Boom as exc:
            results.append(str(exc))
        return results + [s.get_history()]

    async def aio_side(st):
        s = st.session("x")
        async with st.transaction() as tx:
            results = [tx is st, await s.append(msg("x1")), await s.append(msg("x2"))]
            async with st.transaction() as inner:
                results += [inner is st, await s.append(msg("x3"))]
        try:
            async with st.transaction():
                await s.append(msg("x4"))
                raise Boom("roll back")
        except Boom as exc:
            results.append(str(exc))
        return results + [await s.get_history()]

    got = await t.write2(sync_side, aio_side, "transaction")
    assert got.value[0] is True and [m["id"] for m in got.value[-1]] == ["x1", "x2", "x3"]


# -- closing (last) ---------------------------------------------------------------------------------


@recipe("AsyncStore.close", "AsyncStore.__aenter__", "AsyncStore.__aexit__", closing=True)
async def _close(t: Twins):
    def sync_side(st):
        s = st.session("s")
        with st as entered:
            out: list = [entered is st, st.closed]
        out += [st.closed, st.close(), st.closed]
        out += [
            settle(st.list_sessions),
            settle(lambda: st.session("s")),
            settle(s.get_history),
            settle(lambda: s.append(msg("late"))),
            settle(lambda: st.scan("nodes")),
            settle(st.stats),
            settle(s.history),
        ]
        try:
            with st.transaction():
                pass
        except sk.StoreClosed as exc:
            out.append(_raised(exc))
        with pytest.raises(sk.StoreClosed):
            with st:
                pass
        return out

    async def aio_side(st):
        s = st.session("s")
        async with st as entered:
            out: list = [entered is st, st.closed]
        out += [st.closed, await st.close(), st.closed]
        out += [
            await asettle(st.list_sessions),
            settle(lambda: st.session("s")),
            await asettle(s.get_history),
            await asettle(lambda: s.append(msg("late"))),
            settle(lambda: st.scan("nodes")),
            await asettle(st.stats),
            await asettle(s.history),
        ]
        try:
            async with st.transaction():
                pass
        except sk.StoreClosed as exc:
            out.append(_raised(exc))
        with pytest.raises(sk.StoreClosed):
            async with st:
                pass
        return out

    got = await t.write2(sync_side, aio_side, "closing")
    assert got.value[:5] == [True, False, True, None, True]


# ---------------------------------------------------------------------------
# enumeration and instrumentation


def members(obj: Any) -> set[str]:
    """Public names of ``obj`` (its instance attributes too) and the protocol methods its class defines."""
    cls = type(obj)
    public = {n for n in dir(obj) if not n.startswith("_")}
    protocol = {
        n
        for n in dir(cls)
        if n.startswith("__") and n.endswith("__") and not hasattr(object, n) and callable(getattr(cls, n))
    }
    return public | protocol


def twin_objects(store: AsyncStore, *, every: bool = False) -> dict[str, Any]:
    """One object of each async twin class, under the label its recipe keys use.

    ``store.coordination`` is None on an engine without coordination: ``every`` still lists
    its class's members (a detached object, never called), others leave it out."""
    objects = {
        "AsyncStore": store,
        "AsyncSession": store.session("s"),
        "transaction": store.transaction(),
        "run_log": store.run_log,
        "session_records": store.session_records,
        "settings": store.settings,
    }
    if store.coordination is not None:
        objects["coordination"] = store.coordination
    elif every:
        objects["coordination"] = object.__new__(sk.aio.AsyncCoordination)
    return objects


def member_keys(store: AsyncStore, *, every: bool = False) -> set[str]:
    return {f"{label}.{name}" for label, obj in twin_objects(store, every=every).items() for name in members(obj)}


def _recorded(fn: Callable, key: str, called: set[str]) -> Callable:
    @functools.wraps(fn)
    def call(*args, **kwargs):
        called.add(key)
        return fn(*args, **kwargs)

    return call


def instrument(monkeypatch, store: AsyncStore, called: set[str]) -> set[str]:
    """Make every class-level member of the twin classes record its key in ``called``; the keys."""
    keys = set()
    for label, obj in twin_objects(store).items():
        cls = type(obj)
        for name in members(obj):
            try:
                static = inspect.getattr_static(cls, name)
            except AttributeError:  # an instance attribute (session_id): its recipe reads it
                continue
            key = f"{label}.{name}"
            if isinstance(static, property):
                fset = static.fset and _recorded(static.fset, key, called)
                monkeypatch.setattr(cls, name, property(_recorded(static.fget, key, called), fset, doc=static.__doc__))
            elif isinstance(static, types.FunctionType):
                monkeypatch.setattr(cls, name, _recorded(static, key, called))
            else:
                raise AssertionError(f"{key}: a {type(static).__name__}; teach instrument() about it")
            keys.add(key)
    return keys


async def run_recipes(t: Twins, monkeypatch) -> list[str]:
    """Run every recipe once (closing ones last); the failures, one line (or traceback) each."""
    failures = [f"{key}: no recipe" for key in sorted(member_keys(t.b) - RECIPES.keys())]
    called: set[str] = set()
    instrumented = instrument(monkeypatch, t.b, called)
    groups: dict[Callable, list[str]] = {}
    for key, fn in RECIPES.items():
        groups.setdefault(fn, []).append(key)

    async def attempt(fn, keys):
        called.clear()
        try:
            await fn(t)
        except Exception:
            failures.append(f"{', '.join(keys)}:\n{traceback.format_exc()}")
            return
        for key in keys:
            if key in instrumented and key not in called:
                failures.append(f"{key}: its recipe {fn.__name__} does not call it")

    for fn, keys in groups.items():
        if fn not in CLOSING:
            await attempt(fn, keys)
    try:
        same(rows(t.a), rows(t.b.sync), "the rows of the two stores")
    except AssertionError as exc:
        failures.append(f"after the writes: {exc}")
    for fn, keys in groups.items():
        if fn in CLOSING:
            await attempt(fn, keys)
    return failures


# ---------------------------------------------------------------------------
# the tests


def test_every_async_member_has_a_recipe():
    """Found by introspection: a member added to an async class fails here until it has a recipe."""

    async def keys():
        async with sk.aio.open_store(":memory:") as store:
            return member_keys(store, every=True)

    found = asyncio.run(keys())
    assert not found - RECIPES.keys(), f"members without a recipe: {sorted(found - RECIPES.keys())}"
    assert not RECIPES.keys() - found, f"recipes of no member: {sorted(RECIPES.keys() - found)}"
    # the sync API's members all have twins (test_aio.py checks their names and arguments)
    for sync_cls, label in ((sk.Store, "AsyncStore"), (sk.Session, "AsyncSession")):
        assert {f"{label}.{n}" for n in dir(sync_cls) if not n.startswith("_")} <= found


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
def test_every_member_gives_what_the_sync_api_gives(new_target, monkeypatch):  # noqa: F811
    stamps = Stamps()
    monkeypatch.setattr(sk_messages, "now_iso", stamps.now_iso)
    monkeypatch.setattr(session_module, "uuid", types.SimpleNamespace(uuid4=stamps.uuid4))
    monkeypatch.setattr(labels_module, "uuid", types.SimpleNamespace(uuid4=stamps.uuid4))
    a_target, b_target = new_target(), new_target()
    a = sk.open_store(a_target, **OPTIONS)
    b = sk.aio.open_store(b_target, **OPTIONS)
    try:
        monkeypatch.setattr(
            Paths, "names", tuple(sorted({str(p) for p in (a.path, b.sync.path) if p}, key=len, reverse=True))
        )
        for store in (a, b.sync):
            stamps.start(0)
            populate(store)
        same(rows(a), rows(b.sync), "the rows both stores start from")
        failures = asyncio.run(run_recipes(Twins(a, b, stamps, b_target), monkeypatch))
    finally:
        a.close()
        asyncio.run(b.close())
    assert not failures, f"{len(failures)} failures:\n\n" + "\n\n".join(failures)
