"""Scorers: ``store.score`` runs a function over units of the store and keeps what it
answers as labels with their provenance (docs/judging.md).

A *unit* is a message, a turn, a path or a session: a row of the ``messages``,
``turns``, ``paths`` or ``sessions`` view of ``store.sql`` (a ``where`` condition
over that view picks them), with the messages it spans read from the store. A
*scorer* is a callable taking one :class:`Unit` and answering a tag (``str``), a
:class:`Score` or ``None`` (no label); it has a name and a version (the
:func:`scorer` decorator, or ``name`` / ``version`` attributes), and each label it
makes names it as ``"name@version"``.

Scoring is incremental: each label keeps the fingerprint of the unit's content
(its level and the messages it spans), so a unit that a scorer of the same name and
version labelled already, and that has not changed since, is not asked again; a
unit whose messages changed is, and its old labels of that scorer are replaced.
The answers are stored as they arrive, in batches (a transaction per 500 answers or per
second, whichever comes first), so a run cut short keeps what it had finished; the units
of a session are read together (its tree, then the messages their paths pass).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from . import _conveniences
from ._labels import Label, checked
from ._values import ChangeEvent

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["Score", "Unit", "LEVELS", "scorer", "scorer_id", "score"]

#: The units a scorer can run over, and the view each is a row of.
LEVELS: dict[str, str] = {"message": "messages", "turn": "turns", "path": "paths", "session": "sessions"}

_NAME = re.compile(r"^[A-Za-z0-9_.:/-]{1,100}$")
_VERSION = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


@dataclass(frozen=True)
class Score:
    """What a scorer answers for a unit: a tag, an optional rating and the reason.

    ``usage`` and ``prompt`` are for scorers that ask a model (``sk.scorers.llm_judge``):
    the model call's usage (a dict with the keys of a run's usage: ``model``, ``in``,
    ``out``, ``cost_usd``...) and the text sent; ``store.score`` then records the call
    as a run of the unit's session (the ``runs`` view: model, tokens, cost, times).
    """

    tag: str
    rating: float | None = None
    rationale: str | None = None
    usage: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    prompt: str | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Unit:
    """One unit handed to a scorer.

    ``level`` is ``"message"``, ``"turn"``, ``"path"`` or ``"session"``; the label goes
    on ``message_id`` of ``session_id`` with ``target`` ``"message"`` (a message, a
    turn: its final reply, or its user message when it has none) or ``"branch"`` (a
    path: its leaf; a session: its latest leaf). ``messages`` are the messages the unit
    spans (root first: the message; the turn's user message down to its reply; the
    whole path), ``history`` the messages above them on their path, ``row`` the unit's
    row of its view (``messages``, ``turns``, ``paths``, ``sessions``) as a dict.
    """

    level: str
    session_id: str
    message_id: str
    target: str
    messages: tuple[dict[str, Any], ...]
    history: tuple[dict[str, Any], ...] = ()
    row: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    fingerprint: str = ""

    @property
    def reply(self) -> dict[str, Any] | None:
        """The last assistant message the unit spans (None when it has none)."""
        return next((m for m in reversed(self.messages) if m.get("role") == "assistant"), None)

    @property
    def text(self) -> str:
        """The unit's messages as plain text, one ``role: text`` block each."""
        return "\n\n".join(f"{m.get('role')}: {_msg.message_text(m)}" for m in self.messages)


def scorer(
    fn: Callable[..., Any] | None = None, *, name: str | None = None, version: Any = 1, source: str = "code"
) -> Callable[..., Any]:
    """Give a scorer its name and version (``@sk.scorers.scorer(name="short", version=2)``).

    The name defaults to the function's; ``source`` is ``"code"`` (the default) or
    ``"llm"`` (a scorer that asks a model). The function is returned with ``name``,
    ``version`` and ``source`` attributes set; used bare (``@scorer``) it takes the
    defaults.
    """

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(f):
            raise TypeError(f"a scorer must be callable, got {type(f).__name__}")
        f.name = _check_name(name if name is not None else getattr(f, "__name__", None))  # type: ignore[attr-defined]
        f.version = _check_version(version)  # type: ignore[attr-defined]
        f.source = _check_source(source)  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"a scorer's name is 1 to 100 letters, digits or _ . : / - (give it one with"
            f" @sk.scorers.scorer(name=...)), got {name!r}"
        )
    return name


def _check_version(version: Any) -> str:
    if isinstance(version, bool) or not isinstance(version, (int, str)) or not _VERSION.match(str(version)):
        raise ValueError(f"a scorer's version is an int or a short str of letters, digits or _ . -, got {version!r}")
    return str(version)


def _check_source(source: Any) -> str:
    if source not in ("code", "llm"):
        raise ValueError(f"a scorer's source is 'code' or 'llm', got {source!r}")
    return str(source)


def scorer_id(fn: Any) -> tuple[str, str]:
    """``("name@version", source)`` of a scorer (its attributes, or its function name and version 1)."""
    if not callable(fn):
        raise TypeError(f"a scorer must be callable (taking one sk.scorers.Unit), got {type(fn).__name__}")
    name = getattr(fn, "name", None)
    if name is None:
        name = getattr(fn, "__name__", None)
    return f"{_check_name(name)}@{_check_version(getattr(fn, 'version', 1))}", _check_source(
        getattr(fn, "source", "code")
    )


# ---------------------------------------------------------------------------
# Units


def _encoded(message: dict[str, Any]) -> bytes:
    """A message as the fingerprint reads it (canonical JSON)."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")


def fingerprint(level: str, messages: Iterable[dict[str, Any] | bytes]) -> str:
    """What a unit's content is, in 40 hex digits after its level (its messages, whole;
    each a dict, or its :func:`_encoded` bytes)."""
    digest = hashlib.sha256(level.encode())
    for message in messages:
        digest.update(b"\0" + (message if isinstance(message, bytes) else _encoded(message)))
    return f"{level}:{digest.hexdigest()[:40]}"


def _rows(store: Store, level: str, where: str | None, sessions: list[str] | None) -> list[dict[str, Any]]:
    view = LEVELS[level]
    cond = f" WHERE ({where})" if where else ""
    if view == "sessions":
        cond = f"{cond} AND message_count > 0" if cond else " WHERE message_count > 0"
    order = {"messages": "session_id, seq", "turns": "session_id, user_id", "paths": "session_id, leaf_id"}
    query = f"SELECT * FROM {view}{cond} ORDER BY {order.get(view, 'session_id')}"
    return store.sql_arrow(query, session_ids=sessions).to_pylist()


def _anchor(level: str, row: dict[str, Any]) -> tuple[str, str, str]:
    """``(the message whose path the unit is read from, the labelled message, target)``."""
    if level == "message":
        return row["id"], row["id"], "message"
    if level == "turn":
        end = row["reply_id"] or row["user_id"]
        return end, end, "message"
    if level == "path":
        return row["leaf_id"], row["leaf_id"], "branch"
    return row["latest_leaf"], row["latest_leaf"], "branch"


def _unit(
    level: str, row: dict[str, Any], path: list[dict[str, Any]], labelled: str, target: str, encoded: list[bytes]
) -> Unit:
    """The unit of a view row whose path (root first, down to the unit's last message) is
    ``path``, ``encoded`` the path's messages as the fingerprint reads them."""
    start = len(path) - 1
    if level == "turn":
        start = next((i for i, m in enumerate(path) if m.get("id") == row["user_id"]), start)
    elif level in ("path", "session"):
        start = 0
    spans = tuple(path[start:])
    return Unit(
        level=level,
        session_id=row["session_id"],
        message_id=labelled,
        target=target,
        messages=spans,
        history=tuple(path[:start]),
        row=row,
        fingerprint=fingerprint(level, encoded[start:]),
    )


def session_units(store: Store, level: str, sid: str, rows: list[dict[str, Any]]) -> Iterator[Unit | None]:
    """The units of ``rows`` (view rows of session ``sid``), in order, the messages their
    paths pass read once, in one state of the store: the session's nodes, then the
    contents of those messages in batches (a few queries for the session, where reading
    each unit's path on its own took three or more a unit). None for a unit whose
    messages went since the view was queried.

    The units of a session share its message dicts (a scorer reads them); each message's
    canonical JSON is taken once, when it is read, so the fingerprints are of the
    messages as stored whatever a scorer does with its unit."""
    eng = store._check()
    anchors = [_anchor(level, row) for row in rows]
    messages: dict[str, tuple[dict[str, Any], bytes]] = {}
    with eng.snapshot():
        nodes = {n.id: n for n in eng.nodes(sid)}
        # the messages on the units' paths, each once: walk up from each leaf until a
        # message marked already (so a long session is walked once, not once per unit)
        wanted: dict[str, int] = {}
        for leaf, _, _ in anchors:
            node = nodes.get(leaf) if leaf is not None else None
            while node is not None and node.id not in wanted:
                wanted[node.id] = node.seq
                node = nodes.get(node.parent_id) if node.parent_id is not None else None
        seqs = list(wanted.values())
        for mid, seq, raw in zip(wanted, seqs, eng.contents(seqs)):
            message = store._restore(seq, raw)
            if message is not None:
                messages[mid] = (message, _encoded(message))
    for row, (leaf, labelled, target) in zip(rows, anchors):
        path: list[tuple[dict[str, Any], bytes]] = []
        node = nodes.get(leaf) if leaf is not None else None
        while node is not None and node.id in messages:
            path.append(messages[node.id])
            node = nodes.get(node.parent_id) if node.parent_id is not None else None
        if node is not None or not path:  # a message of its path went since the query
            yield None
            continue
        path.reverse()
        yield _unit(level, row, [m for m, _ in path], labelled, target, [e for _, e in path])


def units(store: Store, level: str, rows: list[dict[str, Any]]) -> Iterator[Unit | None]:
    """The units of view rows (ordered by session), read a session at a time (see :func:`session_units`)."""
    start = 0
    while start < len(rows):
        sid = rows[start]["session_id"]
        end = start + 1
        while end < len(rows) and rows[end]["session_id"] == sid:
            end += 1
        yield from session_units(store, level, sid, rows[start:end])
        start = end


# ---------------------------------------------------------------------------
# store.score


def _answer(result: Any, name: str, unit: Unit) -> Score | None:
    if result is None or isinstance(result, Score):
        return result
    if isinstance(result, str):
        return Score(result)
    raise TypeError(
        f"scorer {name} answered {type(result).__name__} for {unit.level} {unit.message_id!r} of session"
        f" {unit.session_id!r}: a scorer answers a tag (str), an sk.Score or None"
    )


def _check_args(level: Any, where: Any, sessions: Any, concurrency: Any) -> list[str] | None:
    if level not in LEVELS:
        raise ValueError(f"level is one of {', '.join(map(repr, LEVELS))}, got {level!r}")
    if where is not None and (not isinstance(where, str) or not where.strip()):
        raise ValueError(f"where is a SQL condition over the {LEVELS[level]} view (a str), got {where!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency is an int of at least 1, got {concurrency!r}")
    if sessions is None:
        return None
    ids = [sessions] if isinstance(sessions, str) else list(sessions)
    for sid in ids:
        if not isinstance(sid, str):
            raise TypeError(f"sessions holds session ids (str), got {type(sid).__name__}")
    return ids


def score(
    store: Store,
    fn: Any,
    *,
    sessions: Any = None,
    where: str | None = None,
    level: str = "turn",
    concurrency: int = 4,
    progress: Any = True,
) -> dict[str, int]:
    """``Store.score``: run ``fn`` over the units not scored yet; counts of what happened."""
    ident, source = scorer_id(fn)
    ids = _check_args(level, where, sessions, concurrency)
    if progress is not None and progress is not False and progress is not True and not callable(progress):
        raise TypeError("progress must be None, True, False or a callable fn(done, total)")
    # what this scorer (this version) labelled already: unit -> its labels and fingerprints
    done: dict[tuple[str, str, str], list[Label]] = {}
    for label in store.labels(scorer=ident):
        level_of = (label.fingerprint or "").partition(":")[0]
        if level_of == level:
            done.setdefault((label.session_id, label.message_id, label.target), []).append(label)
    rows = _rows(store, level, where, ids)
    counts = {"units": 0, "skipped": 0, "scored": 0, "labelled": 0, "replaced": 0}
    bar = _conveniences.progress(progress, total=len(rows), desc=f"score {ident}", unit=level)

    def todo() -> Iterator[tuple[Unit, list[Label]]]:
        """The units to ask about, read from the store as the scorer needs them (those
        scored already, unchanged, are passed over and counted)."""
        for unit in units(store, level, rows):
            if unit is None:  # its messages went since the query
                bar.update(1)
                continue
            counts["units"] += 1
            before = done.get((unit.session_id, unit.message_id, unit.target), [])
            if any(x.fingerprint == unit.fingerprint for x in before):
                counts["skipped"] += 1
                bar.update(1)
                continue
            yield unit, before

    try:
        _ask_all(store, fn, ident, source, todo(), concurrency, bar, counts)
    finally:
        bar.close()
    return counts


def _ask_one(fn: Any, unit: Unit, ident: str, source: str) -> tuple[Score | None, Label | None, str, str]:
    """Ask the scorer (on a worker thread): its answer, the label it makes (checked), the times."""
    started = _msg.now_iso()
    try:
        answer = _answer(fn(unit), ident, unit)
        label = None
        if answer is not None:
            label = checked(
                Label(
                    "",
                    unit.session_id,
                    unit.message_id,
                    answer.tag,
                    target=unit.target,
                    rating=answer.rating,
                    source=source,
                    scorer=ident,
                    rationale=answer.rationale,
                    fingerprint=unit.fingerprint,
                )
            )
    except BaseException as exc:
        exc.add_note(f"(scorer {ident} on the {unit.level} at {unit.message_id!r} of session {unit.session_id!r})")
        raise
    return answer, label, started, _msg.now_iso()


#: Answers stored per transaction at most, and the longest an answer waits to be stored:
#: a transaction per answer costs a commit each (milliseconds on DuckDB, more than a code
#: scorer's own work), so the answers that are ready are stored together, and a slow
#: scorer's (a model's) still land within a second of their arrival.
_BATCH = 500
_FLUSH_SECONDS = 1.0


def _ask_all(
    store: Store,
    fn: Any,
    ident: str,
    source: str,
    todo: Iterator[tuple[Unit, list[Label]]],
    concurrency: int,
    bar: Any,
    counts: dict[str, int],
) -> None:
    """Ask the scorer about each unit, at most ``concurrency`` at a time, storing the
    answers in batches as they come (a run cut short keeps those it had: an error or an
    interrupt stores the answers ready before it is raised)."""
    pending = todo
    running: dict[cf.Future[Any], tuple[Unit, list[Label]]] = {}
    ready: list[Any] = []
    error: BaseException | None = None
    flushed = time.monotonic()

    def flush() -> None:
        nonlocal flushed
        if ready:
            _store_answers(store, ident, ready, counts)
            bar.update(len(ready))
            ready.clear()
        flushed = time.monotonic()

    with cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="sessionkit-score") as pool:
        try:
            while True:
                while error is None and len(running) < concurrency:
                    item = next(pending, None)
                    if item is None:
                        break
                    running[pool.submit(_ask_one, fn, item[0], ident, source)] = item
                if not running:
                    break
                # answers waiting are stored within _FLUSH_SECONDS even while the scorer hangs
                wait = max(0.0, flushed + _FLUSH_SECONDS - time.monotonic()) if ready else None
                finished, _ = cf.wait(running, timeout=wait, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    unit, before = running.pop(future)
                    try:
                        ready.append((unit, before, *future.result()))
                    except BaseException as exc:  # kept; the others finish and are stored
                        error = error or exc
                if len(ready) >= _BATCH or time.monotonic() - flushed >= _FLUSH_SECONDS:
                    flush()
            flush()
        except BaseException:
            for future in running:
                future.cancel()
            if ready:
                with contextlib.suppress(Exception):  # the exception raised below is the one to report
                    flush()
            raise
    if error is not None:
        raise error


def _store_answers(store: Store, ident: str, answers: list[Any], counts: dict[str, int]) -> None:
    """One transaction: the units' old labels of this scorer out, the new ones in, the
    model calls as runs."""
    eng = store._check()
    with store.transaction():
        for unit, before, answer, label, started, ended in answers:
            for old in before:
                if eng.w_remove_label(old.id, unit.session_id) is not None:
                    counts["replaced"] += 1
            if answer is not None and answer.usage is not None:
                meta = {"scorer": ident, "level": unit.level, "unit": unit.message_id}
                if label is not None:
                    meta["label"] = label.id
                run_id = "score-" + uuid.uuid4().hex
                eng.w_run_begin(unit.session_id, run_id, answer.prompt, started, _msg.dumps(meta))
                eng.w_run_end(run_id, "completed", None, answer.usage, ended)
        labels = [label for *_, label, _, _ in answers if label is not None]
        eng.w_add_labels(labels)
    counts["scored"] += len(answers)
    counts["labelled"] += len(labels)
    for unit, *_ in answers:
        store._emit(ChangeEvent("label", unit.session_id, (unit.message_id,)))
