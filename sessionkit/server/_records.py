"""The server's durable records: what it keeps in the store, under which keys, and why.

Everything the server must find again after a restart lives in the store, as
records beside each session (``store.session_records``), written through
the store's public API only. Per session, under its *stored key* (below):

=====================  ====  =========================================================
kind                   n     value
=====================  ====  =========================================================
``server.session``     0     ``{createdAt, eventBase}``: the session exists (its presence is
                             the test); ``eventBase`` is the id of its first event (0, or
                             after a deleted session of the same id, where that one's ended)
``server.digest``      0     ``{digest, lastSeq}``: the conversation's digest, changed in
                             the same transaction as the conversation
``server.message``     1..   ``{run, text, mode, queued, at, author?, node?, pending?, context?}``:
                             what callers sent, and the run it belongs to (``node``: the
                             message of the conversation it runs from); a message
                             accepted by a worker that does not drive the session is
                             ``pending`` (with its ``context``, if any) until the driving
                             worker takes it, which keeps both in memory only
``server.run``         n     ``{attempts, agentId, state}``: each run of the session;
                             ``state`` is ``queued``, ``running``, ``saved`` (its messages
                             are in the conversation) or ``done`` (its end is recorded)
``server.status``      0     shared stores only: the driving worker's view (active run,
                             whether it takes messages, the queue), for the other workers
``server.tombstone``   0     ``{runN, eventN, deletedAt}``: left by ``DELETE``, so a session
                             created again under the same id never reuses a run id nor an
                             event id (``eventN``: the id its first event gets)
=====================  ====  =========================================================

Two store-wide indexes live under reserved keys (a session id never starts with
``~``), one record per session, ``n`` a 63-bit hash of the session's key or id:

* ``~sessionkit/busy`` (``server.busy``): sessions with a run active or waiting
  (``{"key"}``, or ``null`` once idle). A server that starts reads it to retry
  what a stopped server left unfinished.
* ``~sessionkit/index/<principal hash>`` (``server.index``): a principal's sessions
  (``{sessionId, key, createdAt, updatedAt, firstRun, runN}``, ``null`` once
  deleted), for ``GET /sessions``.

One more reserved key holds the records' layout, the shape of everything above:

* ``~sessionkit/layout`` (``server.layout``): ``{"version": 1}``, record 0 only
  (:data:`LAYOUT_VERSION`; step 15 of the store's schema ledger notes it). The
  server reads it when it is created on a store, before it writes anything (the
  lease included): a store whose records are of a newer layout than this
  sessionkit knows is refused with :class:`~sessionkit.SchemaVersionError`
  naming both versions, and a malformed one with :class:`~sessionkit.StoreCorrupt`.
  Then, holding the lease, it stamps a store that has no version yet: a new store,
  or one whose records were written before the layout had a version, which are
  layout 1. A change to the table above is a new layout, whose server brings
  older records up to it when it stamps the store.

Stored keys (docs/server.md): the bearer token's sessions keep their ids; a session of an
``authenticate`` principal is stored as ``<16 hex characters>/<id>``, the hex being
the start of the SHA-256 of the principal id, so the principal itself is never
stored. A principal reaches no key but its own: nothing is looked up under any other
layout, so no principal id, whatever it looks like, names another principal's sessions.

Crash safety: every change of state is one transaction (see :mod:`._storeio`), and
the digest moves in the transaction that saves a run's messages, so a server killed
at any moment leaves records that say exactly what happened: :func:`plan_recovery`
reads them back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar, cast

from .. import messages as _msg
from ..errors import SchemaVersionError, StoreCorrupt
from ..store import RunRecord, Store
from ._state import FOLLOW_UP, MODES

__all__ = [
    "BUSY",
    "BUSY_KEY",
    "DIGEST",
    "INDEX",
    "LAYOUT",
    "LAYOUT_KEY",
    "LAYOUT_VERSION",
    "MAX_ATTEMPTS",
    "MESSAGE",
    "RUN",
    "SESSION",
    "STATUS",
    "TOMBSTONE",
    "BusyRecord",
    "DigestRecord",
    "IndexEntry",
    "MessageRecord",
    "RunState",
    "SessionRecord",
    "Snapshot",
    "StatusRecord",
    "TombstoneRecord",
    "chain_digest",
    "check_layout",
    "conversation_digest",
    "index_key",
    "principal_hash",
    "public_id_of",
    "read_snapshot",
    "slot",
    "stamp_layout",
    "stored_key",
    "stored_layout",
    "item_fields",
    "record_node",
]

SESSION = "server.session"
DIGEST = "server.digest"
MESSAGE = "server.message"
RUN = "server.run"
STATUS = "server.status"
TOMBSTONE = "server.tombstone"
BUSY = "server.busy"
INDEX = "server.index"

LAYOUT = "server.layout"

BUSY_KEY = "~sessionkit/busy"
INDEX_PREFIX = "~sessionkit/index/"
LAYOUT_KEY = "~sessionkit/layout"

#: The layout of the records this sessionkit reads and writes (the module's table); records
#: stored without a version are layout 1.
LAYOUT_VERSION = 1

#: A run is started at most this many times; a server stopped during its last attempt records it failed.
MAX_ATTEMPTS = 3


# ---------------------------------------------------------------------------
# the records' values (the table above). What is read back is checked key by key where it
# matters (a record another program wrote may lack a key), so every key is optional here.


class SessionRecord(TypedDict, total=False):
    """``server.session``: the session exists."""

    createdAt: str
    eventBase: int


class DigestRecord(TypedDict, total=False):
    """``server.digest``: the conversation's digest (None: none yet), and the last event's seq then."""

    digest: str | None
    lastSeq: int | None


class MessageRecord(TypedDict, total=False):
    """``server.message``: what a caller sent, and the run it belongs to."""

    run: int
    text: str
    mode: str
    queued: bool
    at: str
    author: str
    node: str
    pending: bool
    context: dict


class RunState(TypedDict, total=False):
    """``server.run``: a run's attempts, its agent, and ``queued``/``running``/``saved``/``done``."""

    attempts: int
    agentId: str
    state: str
    error: str


class StatusRecord(TypedDict, total=False):
    """``server.status``: the driving worker's view of the session (shared stores)."""

    runN: int
    active: int | None
    accepting: bool
    next: int | None
    queued: int
    input: str | None
    startedAt: str | None
    owner: str


class TombstoneRecord(TypedDict, total=False):
    """``server.tombstone``: what a deleted session used (run and event numbers go on after it)."""

    runN: int
    eventN: int
    deletedAt: str


class BusyRecord(TypedDict, total=False):
    """``server.busy``: a session with a run active or waiting, and its principal's index."""

    key: str
    index: str


class IndexEntry(TypedDict, total=False):
    """``server.index``: a session of a principal, for ``GET /sessions``."""

    sessionId: str
    key: str
    createdAt: str
    updatedAt: str
    firstRun: int
    runN: int


# ---------------------------------------------------------------------------
# keys


def principal_hash(principal: str) -> str:
    """The 16 hex characters that stand for a principal in stored keys (SHA-256 of its UTF-8)."""
    return hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def stored_key(principal: str, session_id: str) -> str:
    """The store's key of a principal's session (the id itself for the bearer token)."""
    if principal == "":
        return session_id
    return f"{principal_hash(principal)}/{session_id}"


def index_key(principal: str) -> str:
    """The reserved key of a principal's session index."""
    return INDEX_PREFIX + ("token" if principal == "" else principal_hash(principal))


def public_id_of(key: str) -> str:
    """The session id a stored key stands for (ids never contain ``/``)."""
    return key.rsplit("/", 1)[-1]


def slot(text: str) -> int:
    """A record number for ``text`` in an index: 63 bits of its SHA-256."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()[:8], "big") >> 1


def run_number(key: str, run_id: str) -> int | None:
    """``n`` of the stored run id ``<key>.<n>``, or None for a run id of another shape."""
    prefix = key + "."
    if run_id.startswith(prefix):
        rest = run_id[len(prefix) :]
        if rest.isascii() and rest.isdigit():
            return int(rest)
    return None


# ---------------------------------------------------------------------------
# the records' layout


def stored_layout(store) -> int | None:
    """The layout version stamped on the store's server records (None: no version stored)."""
    rows = store.session_records.get(LAYOUT_KEY, LAYOUT)
    if not rows:
        return None
    value = rows[0][1]
    version = value.get("version") if isinstance(value, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreCorrupt(
            f"the HTTP server's records in this store carry a malformed layout version"
            f" ({LAYOUT!r} under {LAYOUT_KEY!r}: {value!r}); nothing was written"
        )
    return version


def check_layout(store) -> int | None:
    """Refuse a store whose server records are of a newer layout than :data:`LAYOUT_VERSION`
    (:class:`~sessionkit.SchemaVersionError`); returns the stored version (None: none yet).
    Reads only."""
    version = stored_layout(store)
    if version is not None and version > LAYOUT_VERSION:
        raise SchemaVersionError(
            f"the HTTP server's records in this store are of layout {version}, written by a newer"
            f" sessionkit; this sessionkit's server reads and writes layout {LAYOUT_VERSION}:"
            " upgrade sessionkit to serve this store (nothing was written)"
        )
    return version


def stamp_layout(store) -> None:
    """Store :data:`LAYOUT_VERSION` on a store that has no layout version yet (see :func:`check_layout`).

    A store without one holds no server records, or records written before the
    version was stored: layout 1, the one this sessionkit writes, so nothing is
    brought up to date.
    """
    if check_layout(store) is None:
        store.session_records.put(LAYOUT_KEY, LAYOUT, [(0, {"version": LAYOUT_VERSION})])


# ---------------------------------------------------------------------------
# digests


_CHAIN_START = "c1:" + hashlib.sha256(b"sessionkit conversation").hexdigest()


def _canonical(message: dict) -> bytes:
    return json.dumps(message, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8", "surrogatepass"
    )


def chain_digest(previous: str | None, messages) -> str:
    """Extend a conversation digest by ``messages`` (the digest of a path is its messages chained).

    ``chain_digest(None, path)`` is the digest of a whole path, and
    ``chain_digest(chain_digest(None, a), b) == chain_digest(None, a + b)``, so a run
    that appends messages moves the digest on without reading the conversation again.
    """
    digest = previous or _CHAIN_START
    for message in messages:
        h = hashlib.sha256(digest.encode("ascii"))
        h.update(b"\n")
        h.update(_canonical(message))
        digest = "c1:" + h.hexdigest()
    return digest


def conversation_digest(messages) -> str:
    """The digest of a whole path (see :func:`chain_digest`)."""
    return chain_digest(None, messages)


def digest_matches(stored: str | None, path: list[dict]) -> bool:
    """Whether ``path`` is the conversation the stored digest describes (no digest: any)."""
    return stored is None or conversation_digest(path) == stored


# ---------------------------------------------------------------------------
# reading a session's records


@dataclass
class Snapshot:
    """A session's records as read at one moment."""

    key: str
    session: SessionRecord | None = None
    tombstone: TombstoneRecord | None = None
    digest: str | None = None
    last_seq: int | None = None
    messages: list[tuple[int, MessageRecord]] = field(default_factory=list)
    runs: dict[int, RunState] = field(default_factory=dict)
    run_records: list[RunRecord] = field(default_factory=list)
    status: StatusRecord | None = None

    @property
    def exists(self) -> bool:
        return self.session is not None

    @property
    def event_base(self) -> int:
        """The public id of the session's first event: its stored ``seq`` 0 (docs/server.md)."""
        base = (self.session or {}).get("eventBase")
        return base if isinstance(base, int) and base >= 0 else 0

    def next_event_base(self) -> int:
        """The ``eventN`` a session created now under this key starts at (its tombstone's)."""
        n = (self.tombstone or {}).get("eventN")
        return n if isinstance(n, int) and n >= 0 else 0

    def top_run(self) -> int:
        """The highest run number this key ever used (tombstone, messages, runs, status)."""
        top = 0
        if self.tombstone and isinstance(self.tombstone.get("runN"), int):
            top = self.tombstone["runN"]
        for _, value in self.messages:
            if isinstance(value.get("run"), int):
                top = max(top, value["run"])
        if self.runs:
            top = max(top, max(self.runs))
        for record in self.run_records:
            n = run_number(self.key, record.run_id)
            if n is not None:
                top = max(top, n)
        if self.status and isinstance(self.status.get("runN"), int):
            top = max(top, self.status["runN"])
        return top

    def next_message(self) -> int:
        return self.messages[-1][0] + 1 if self.messages else 1

    def record_of(self, n: int) -> RunRecord | None:
        run_id = f"{self.key}.{n}"
        for record in self.run_records:
            if record.run_id == run_id:
                return record
        return None


_T = TypeVar("_T")


def _first(rows: Sequence[tuple[int, _T]]) -> _T | None:
    return rows[0][1] if rows else None


def read_snapshot(store: Store, key: str, *, status: bool = False, runs: bool = True) -> Snapshot:
    """Read a session's records (a blocking call: run it off the event loop)."""
    snap = Snapshot(key)
    snap.session = _first(store.session_records.get(key, SESSION))
    snap.tombstone = _first(store.session_records.get(key, TOMBSTONE))
    if snap.session is None:
        return snap
    digest = _first(store.session_records.get(key, DIGEST))
    if isinstance(digest, dict):
        snap.digest = digest.get("digest")
        snap.last_seq = digest.get("lastSeq") if isinstance(digest.get("lastSeq"), int) else None
    # a JSON object read back stands for its record (the keys are checked where they are read)
    rows = store.session_records.get(key, MESSAGE)
    snap.messages = [(n, cast(MessageRecord, v)) for n, v in rows if isinstance(v, dict)]
    if runs:
        rows = store.session_records.get(key, RUN)
        snap.runs = {n: cast(RunState, v) for n, v in rows if isinstance(v, dict)}
        snap.run_records = store.runs(key)
    if status:
        value = _first(store.session_records.get(key, STATUS))
        snap.status = cast(StatusRecord, value) if isinstance(value, dict) else None
    return snap


def last_event_seq(store: Store, key: str, hint: int | None) -> int:
    """The seq of a session's last stored event (-1 when none), reading from ``hint`` on."""
    events = store.events(key, hint if isinstance(hint, int) and hint >= 0 else None)
    if events:
        return events[-1]["seq"]
    return hint if isinstance(hint, int) and hint >= 0 else -1


# ---------------------------------------------------------------------------
# checking the conversation, and what a stopped server left behind


STOPPED = "the server stopped during this run"
CHANGED = "the conversation was changed behind the server's back; the run is not started again"


@dataclass
class Verdict:
    """Whether the stored conversation is the one the server's digest describes."""

    ok: bool
    digest: str | None = None  # the digest to store now (none yet, or an unrecorded run's messages)
    saved_unrecorded: frozenset = frozenset()  # runs without a server.run record whose messages are stored
    path: list = field(default_factory=list, repr=False)


def verify(store: Store, snap: Snapshot) -> Verdict:
    """Compare the conversation with the stored digest (a blocking read of the whole path).

    A run recorded ``running`` without a ``server.run`` record (begun on the session
    by another program writing to the store; the server writes both in one
    transaction) that stopped after saving its messages left them at the end of the
    conversation: without them the conversation matches, and the run is counted as
    saved.
    """
    path = store.session(snap.key).get_history(compacted=False)
    stored = snap.digest
    if digest_matches(stored, path):
        return Verdict(True, conversation_digest(path) if stored is None else None, path=path)
    known = {f"{snap.key}.{n}" for n in snap.runs}
    stale = {r.run_id for r in snap.run_records if r.status == "running" and r.run_id not in known}
    tail = len(path)
    saved = set()
    while tail and (path[tail - 1].get("metadata") or {}).get("run_id") in stale:
        saved.add(path[tail - 1]["metadata"]["run_id"])
        tail -= 1
    if saved and digest_matches(stored, path[:tail]):
        return Verdict(True, conversation_digest(path), frozenset(saved), path=path)
    return Verdict(False, path=path)


@dataclass
class Retry:
    """A run to start (again): its number, how often it started, its messages in order."""

    n: int
    attempts: int
    recorded: bool  # the store has a run record for it (a retry reopens it)
    messages: list[tuple[int, MessageRecord]]


@dataclass
class Recovery:
    """What :func:`plan_recovery` found: runs to start, and the events it stored."""

    retries: list[Retry] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)


def plan_recovery(store: Store, snap: Snapshot, verdict: Verdict, *, agent_id: str) -> Recovery:
    """Close what a stopped server left half-done (call it inside one transaction).

    For each run not ``done``:

    * ``saved``: its messages are in the conversation (the digest moved with them):
      its end is recorded ``completed`` if the server stopped before recording it;
    * recorded ``completed`` or ``failed`` by the agent: nothing more to do;
    * otherwise it was queued, or running when the server stopped (a ``running``
      record is closed ``interrupted`` with a ``run.end`` event): it runs again with
      the messages accepted for it, unless it already started ``MAX_ATTEMPTS``
      times or the conversation changed behind the server's back, in which case it
      is recorded ``failed`` with the reason.

    Runs recorded ``running`` without a ``server.run`` record (see :func:`verify`) are
    closed: ``completed`` when :func:`verify` found their messages stored, else
    ``interrupted``.
    """
    out = Recovery()
    key = snap.key
    by_run: dict[int, list[tuple[int, MessageRecord]]] = {}
    for n, value in snap.messages:
        if isinstance(value.get("run"), int):
            by_run.setdefault(value["run"], []).append((n, value))
    run_updates: list[tuple[int, RunState]] = []
    message_updates: list[tuple[int, MessageRecord]] = []
    events: list[dict] = []

    def end(run_id: str, status: str, error: str | None, error_type: str | None = None) -> None:
        store.run_log.end(run_id, status=status, error=error)
        events.append(
            {
                "run_id": run_id,
                "kind": "run.end",
                "status": status,
                "error": error,
                "error_type": error_type,
                "usage": None,
            }
        )

    for n in sorted(snap.runs):
        run_state = snap.runs[n]
        state = run_state.get("state")
        if state == "done":
            continue
        run_id = f"{key}.{n}"
        record = snap.record_of(n)
        status = record.status if record is not None else None
        attempts_value = run_state.get("attempts")
        attempts: int = attempts_value if isinstance(attempts_value, int) else 0
        if state == "saved" or status in ("completed", "failed"):
            if status == "running":
                end(run_id, "completed", None)
            done = run_state.copy()
            done["state"] = "done"
            run_updates.append((n, done))
            continue
        if status == "running":  # cut short: closed now, started again below
            end(run_id, "interrupted", STOPPED, "ServerStopped")
        messages = by_run.get(n, [])
        reason = None
        if not verdict.ok:
            reason = CHANGED
        elif attempts >= MAX_ATTEMPTS:
            reason = f"{STOPPED} {attempts} times; it is not started again"
        elif not messages:
            reason = "no message was recorded for this run"
        if reason is None:
            out.retries.append(Retry(n, attempts, record is not None, messages))
            for rec_n, rec in messages:
                if rec.get("pending"):
                    message_updates.append((rec_n, taken(rec)))
            continue
        if record is None:
            store.run_log.begin(key, run_id, messages[0][1].get("text") if messages else None)
        end(run_id, "failed", reason, "ServerStopped")
        failed = run_state.copy()
        failed["state"] = "done"
        failed["error"] = reason
        run_updates.append((n, failed))
        out.failed.append(n)

    known = {f"{key}.{n}" for n in snap.runs}
    for record in snap.run_records:
        if record.status != "running" or record.run_id in known:
            continue
        unrecorded_n = run_number(key, record.run_id)
        if record.run_id in verdict.saved_unrecorded:
            end(record.run_id, "completed", None)
        else:
            end(record.run_id, "interrupted", STOPPED, "ServerStopped")
        if unrecorded_n is not None:
            run_updates.append((unrecorded_n, RunState(attempts=1, agentId=agent_id, state="done")))

    if verdict.digest is not None:
        store.session_records.put(key, DIGEST, [(0, {"digest": verdict.digest, "lastSeq": snap.last_seq})])
    if run_updates:
        store.session_records.put(key, RUN, run_updates)
    if message_updates:
        store.session_records.put(key, MESSAGE, message_updates)
    if events:
        out.events = store.run_log.append_events(key, events)
    return out


# ---------------------------------------------------------------------------
# small values


def now() -> str:
    return _msg.now_iso()


def message_value(
    run: int,
    text: str,
    mode: str,
    author: str | None,
    *,
    queued: bool,
    pending: bool = False,
    context: dict | None = None,
    node: str | None = None,
) -> MessageRecord:
    """A message's record; only a ``pending`` one carries its context (to the driving worker)."""
    value: MessageRecord = {"run": run, "text": text, "mode": mode, "queued": queued, "at": now()}
    if author is not None:
        value["author"] = author
    if node is not None:
        value["node"] = node
    if pending:
        value["pending"] = True
        if context is not None:
            value["context"] = context
    return value


def pending_context(value: MessageRecord) -> dict | None:
    """The context a pending message's record carries (None when it has none)."""
    context = value.get("context") if value.get("pending") else None
    return context if isinstance(context, dict) else None


def record_node(value: MessageRecord) -> str | None:
    """The message a recorded message runs from (None: the latest leaf)."""
    node = value.get("node")
    return node if isinstance(node, str) and node else None


def item_fields(value: MessageRecord) -> tuple[str, str, str | None, dict | None, str | None]:
    """``(text, mode, author, context, node)`` of a message's record, as an ``Item`` takes them."""
    given = value.get("mode")
    mode = given if isinstance(given, str) and given in MODES else FOLLOW_UP
    return str(value.get("text", "")), mode, value.get("author"), pending_context(value), record_node(value)


def taken(value: MessageRecord) -> MessageRecord:
    """A pending message's record once the driving worker has it: no ``pending``, no context."""
    out = value.copy()
    out.pop("pending", None)
    out.pop("context", None)
    return out
