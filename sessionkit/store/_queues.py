"""Annotation queues: units of the store handed to people to label (docs/annotation.md).

``store.queue(name, units=... | query=... | dataset=..., rubric=..., annotators=...,
per_unit=1)`` fixes a list of turns, paths or sessions (the units of ``store.score`` and of
datasets) with a :class:`Rubric`: the tags an annotator may give, an optional rating scale
and instructions. ``store.next_unit(name, annotator)`` hands an annotator the first unit
that still needs labels, that this annotator has not labelled and that is not taken by as
many others as it needs: a *claim*, held for ``lease_seconds``; asked again before it ends,
the same unit comes back (a reloaded page goes on where it was). A claim whose lease has
ended counts for nothing, so a unit left by a closed browser goes to the next annotator
who asks. ``store.submit_label(name, annotator, n, tag, ...)`` checks the answer against
the rubric and, in one transaction, stores the label (the annotator as its author, source
``"human"``) and marks the claim done. Every claim and submission runs under a lock of the
queue (one writer at a time on every engine, across processes on PostgreSQL), so two
annotators asking or submitting at once never take the same place of a unit twice, and
a unit is never labelled more than ``per_unit`` times through the queue.

Rows of ``sessionkit_queues``, ``sessionkit_queue_units`` and ``sessionkit_queue_claims``
(schema version 14).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from ..errors import DatasetNotFound, InvalidDataset, InvalidLabel, InvalidQueue, QueueNotFound
from . import _datasets, _labels
from ._datasets import sql_engine as _engine
from ._datasets import statement as _stmt
from ._labels import Label
from ._values import ChangeEvent

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["Rubric", "QueueInfo", "QueueUnit", "QueueProgress", "QUEUE_LEVELS"]

#: What a queue's units are: turns (a label on the reply), paths or sessions (a label on the branch).
QUEUE_LEVELS = ("turn", "path", "session")
#: How long a claim holds its unit, unless the queue or the call says otherwise (seconds).
DEFAULT_LEASE = 900.0
MAX_NAME_CHARS = 200
MAX_INSTRUCTIONS_CHARS = 20_000
MAX_ANNOTATORS = 1000

QUEUE_COLUMNS = (
    "name",
    "level",
    "rubric",
    "annotators",
    "per_unit",
    "lease_seconds",
    "created_at",
    "source",
    "unit_count",
)


@dataclass(frozen=True)
class Rubric:
    """What an annotator answers for each unit: one of ``tags`` (the allowed tags, at least
    one), a rating on the ``rating`` scale when there is one (``(low, high)``, both ends
    included; None: no rating asked) and the ``instructions`` shown beside the unit."""

    tags: tuple[str, ...]
    rating: tuple[float, float] | None = None
    instructions: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "tags": list(self.tags),
            "rating": None if self.rating is None else list(self.rating),
            "instructions": self.instructions,
        }


@dataclass(frozen=True)
class QueueInfo:
    """A queue: its name, the level of its units, its rubric, the annotators allowed (None:
    anyone), how many labels each unit needs (``per_unit``, from different annotators), how
    long a claim holds a unit (``lease_seconds``), when it was made, where its units came
    from (the query, ``"dataset:NAME@VERSION"``, or None when they were given) and how many
    units it holds."""

    name: str
    level: str
    rubric: Rubric
    annotators: tuple[str, ...] | None
    per_unit: int
    lease_seconds: float
    created_at: str
    source: str | None
    unit_count: int

    @property
    def target(self) -> str:
        """Where the labels go: ``"message"`` (a turn's reply) or ``"branch"`` (a path, a session)."""
        return "message" if self.level == "turn" else "branch"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rubric"] = self.rubric.to_dict()
        out["annotators"] = None if self.annotators is None else list(self.annotators)
        out["target"] = self.target
        return out


@dataclass(frozen=True)
class QueueUnit:
    """A unit handed to an annotator: its place ``n`` in the queue, the message the label
    goes on (``session_id``, ``message_id``, with ``target``), the unit's level, who holds
    it and until when (``expires_at``, UTC ISO 8601)."""

    queue: str
    n: int
    session_id: str
    message_id: str
    level: str
    target: str
    annotator: str
    #: (left out of ``==``: the same claim compares equal whenever its lease ends)
    expires_at: str = field(compare=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueueProgress:
    """How far a queue is: its ``units``, the labels each needs (``per_unit``), the units
    labelled that many times (``complete``), the submissions made (``submitted``), the
    submissions of each annotator (``done``, by name), the claims held now (``claimed``)
    and the labels still missing (``remaining``)."""

    name: str
    units: int
    per_unit: int
    complete: int
    submitted: int
    done: dict[str, int] = field(default_factory=dict)
    claimed: int = 0

    @property
    def remaining(self) -> int:
        return self.units * self.per_unit - self.submitted

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["remaining"] = self.remaining
        return out


# ---------------------------------------------------------------------------
# Checks


def _queue_text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidQueue(f"{what} must be a str, got {type(value).__name__}")
    if not value.strip() or value != value.strip() or not value.isprintable():
        raise InvalidQueue(
            f"{what} must not be blank, start or end with white space or hold a control character, got {value!r}"
        )
    if len(value) > limit:
        raise InvalidQueue(f"{what} is {len(value)} characters long; at most {limit} are allowed")
    return value


def check_name(name: Any) -> str:
    return _queue_text(name, "a queue's name", MAX_NAME_CHARS)


def check_annotator(annotator: Any) -> str:
    return _queue_text(annotator, "an annotator's name", _labels.MAX_AUTHOR_CHARS)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidQueue(f"{what} must be a finite number, got {value!r}")
    return float(value)


def check_lease(value: Any) -> float:
    lease = _number(value, "lease_seconds")
    if not 0 < lease <= 7 * 86400:
        raise InvalidQueue(f"lease_seconds is more than 0 and at most a week (604800), got {value!r}")
    return lease


def check_rubric(rubric: Any) -> Rubric:
    """A :class:`Rubric` from itself, a dict (``tags``, ``rating``, ``instructions``) or a
    list of tags."""
    tags: Any
    rating: Any
    instructions: Any
    if isinstance(rubric, Rubric):
        tags, rating, instructions = rubric.tags, rubric.rating, rubric.instructions
    elif isinstance(rubric, Mapping):
        unknown = sorted(set(rubric) - {"tags", "rating", "instructions"})
        if unknown:
            raise InvalidQueue(f"a rubric has tags, rating and instructions; not {unknown[0]!r}")
        tags, rating, instructions = rubric.get("tags"), rubric.get("rating"), rubric.get("instructions") or ""
    elif isinstance(rubric, (list, tuple)):
        tags, rating, instructions = rubric, None, ""
    else:
        raise InvalidQueue(
            "rubric is a dict {'tags': [...], 'rating': (low, high) or None, 'instructions': '...'}, "
            f"an sk.Rubric or a list of tags, got {type(rubric).__name__}"
        )
    if isinstance(tags, str) or not isinstance(tags, Iterable):
        raise InvalidQueue(f"a rubric's tags are a list of str, got {tags!r}")
    checked_tags: list[str] = []
    for tag in tags:
        try:
            checked_tags.append(_labels.check_tag(tag))
        except InvalidLabel as exc:
            raise InvalidQueue(f"a rubric's tag is refused: {exc}") from None
    if not checked_tags:
        raise InvalidQueue("a rubric allows at least one tag")
    if len(set(checked_tags)) != len(checked_tags):
        raise InvalidQueue(f"a rubric's tags are given twice: {checked_tags}")
    scale: tuple[float, float] | None = None
    if rating is not None:
        if isinstance(rating, (str, bytes)) or not isinstance(rating, Iterable) or len(list(rating)) != 2:
            raise InvalidQueue(f"a rubric's rating scale is (low, high), got {rating!r}")
        low, high = (_number(v, "a rubric's rating scale end") for v in rating)
        if not low < high:
            raise InvalidQueue(f"a rubric's rating scale goes from low to high (low < high), got {rating!r}")
        scale = (low, high)
    if not isinstance(instructions, str):
        raise InvalidQueue(f"a rubric's instructions are a str, got {type(instructions).__name__}")
    if len(instructions) > MAX_INSTRUCTIONS_CHARS:
        raise InvalidQueue(
            f"a rubric's instructions are {len(instructions)} characters long; at most {MAX_INSTRUCTIONS_CHARS}"
        )
    return Rubric(tuple(checked_tags), scale, instructions)


def _check_annotators(annotators: Any) -> tuple[str, ...] | None:
    if annotators is None:
        return None
    if isinstance(annotators, str) or not isinstance(annotators, Iterable):
        raise InvalidQueue(f"annotators is a list of names (or None: anyone), got {type(annotators).__name__}")
    names = [check_annotator(a) for a in annotators]
    if not names or len(names) > MAX_ANNOTATORS:
        raise InvalidQueue(f"annotators names from 1 to {MAX_ANNOTATORS} people (or None: anyone), got {len(names)}")
    if len(set(names)) != len(names):
        raise InvalidQueue(f"annotators names someone twice: {names}")
    return tuple(names)


def _check_per_unit(per_unit: Any, annotators: tuple[str, ...] | None) -> int:
    if isinstance(per_unit, bool) or not isinstance(per_unit, int) or not 1 <= per_unit <= 100:
        raise InvalidQueue(
            f"per_unit (labels each unit needs, from different annotators) is 1 to 100, got {per_unit!r}"
        )
    if annotators is not None and per_unit > len(annotators):
        raise InvalidQueue(
            f"per_unit is {per_unit} but the queue names {len(annotators)} annotator(s): each label of a unit"
            " comes from another annotator"
        )
    return per_unit


# ---------------------------------------------------------------------------
# Units


def _units(
    store: Store, level: str, units: Any, query: Any, dataset: Any
) -> tuple[list[tuple[str, str]], str | None, str]:
    """The ``(session_id, message_id)`` of each unit, where they came from and the level."""
    if sum(x is not None for x in (units, query, dataset)) != 1:
        raise InvalidQueue("a queue's units are given by one of units=, query= or dataset=")
    if dataset is not None:
        name, version = (dataset, None) if isinstance(dataset, str) else tuple(dataset)
        try:
            items = store.dataset_items(name, version)
            info = next(d for d in store.datasets() if d.name == name and d.version == items[0].version)
        except (DatasetNotFound, InvalidDataset) as exc:
            raise InvalidQueue(f"dataset={dataset!r}: {exc}") from None
        except (IndexError, StopIteration):
            raise InvalidQueue(f"dataset {dataset!r} holds no items") from None
        return [(it.session_id, it.message_id) for it in items], f"dataset:{info.name}@{info.version}", info.level
    if query is not None:
        try:
            return _datasets._pairs_from_query(store, query), str(query), level
        except InvalidDataset as exc:
            raise InvalidQueue(str(exc).replace("the dataset's query", "the queue's query")) from None
    if level == "session" and not isinstance(units, (str, bytes)) and isinstance(units, Iterable):
        # a session is labelled on the branch of its latest leaf: a bare session id names it
        given = list(units)
        units = [_latest(store, u) if isinstance(u, str) else u for u in given]
    try:
        return _datasets._pairs_from_units(units), None, level
    except InvalidDataset as exc:
        raise InvalidQueue(str(exc).replace("sk.scorers.Unit", "sk.scorers.Unit (or a session id)")) from None


def _latest(store: Store, sid: str) -> tuple[str, str]:
    leaf = store.session(sid).latest_leaf()
    if leaf is None:
        raise InvalidQueue(f"units names session {sid!r}, which holds no message (or is not stored)")
    return sid, str(leaf["id"])


# ---------------------------------------------------------------------------
# Defining, listing, deleting


def create(
    store: Store,
    name: Any,
    *,
    units: Any = None,
    query: Any = None,
    dataset: Any = None,
    level: Any = "turn",
    rubric: Any = None,
    annotators: Any = None,
    per_unit: Any = 1,
    lease_seconds: Any = DEFAULT_LEASE,
) -> QueueInfo:
    """``Store.queue``: check everything, then store the queue and its units in one transaction."""
    name = check_name(name)
    if level not in QUEUE_LEVELS:
        raise InvalidQueue(f"a queue's level is 'turn', 'path' or 'session', got {level!r}")
    if rubric is None:
        raise InvalidQueue("a queue needs a rubric: rubric={'tags': [...], 'rating': (1, 5), 'instructions': '...'}")
    checked_rubric = check_rubric(rubric)
    names = _check_annotators(annotators)
    per_unit = _check_per_unit(per_unit, names)
    lease = check_lease(lease_seconds)
    pairs, source, level = _units(store, str(level), units, query, dataset)
    pairs = list(dict.fromkeys(pairs))  # each unit once, in the order given
    if not pairs:
        raise InvalidQueue(f"the queue {name!r} would be empty: nothing was chosen")
    eng = _engine(store)
    with store.transaction():
        for i, (sid, mid) in enumerate(pairs):
            if eng.node(sid, mid) is None:
                raise InvalidQueue(f"unit {i}: message {mid!r} is not in session {sid!r}")
        if eng.fetch_one(_stmt(eng, "q_have", "SELECT 1 FROM {queues} WHERE name = ?"), (name,)):
            raise InvalidQueue(f"a queue named {name!r} is stored already (store.delete_queue removes it)")
        info = QueueInfo(name, level, checked_rubric, names, per_unit, lease, _msg.now_iso(), source, len(pairs))
        row = (
            name,
            level,
            json.dumps(checked_rubric.to_dict()),
            None if names is None else json.dumps(list(names)),
            per_unit,
            lease,
            info.created_at,
            source,
            len(pairs),
        )
        put = f"INSERT INTO {{queues}} ({', '.join(QUEUE_COLUMNS)}) VALUES ({', '.join('?' * len(QUEUE_COLUMNS))})"
        eng.execute(_stmt(eng, "q_put", put), row)
        eng.execute_many(
            _stmt(
                eng, "q_units_put", "INSERT INTO {queue_units} (name, n, session_id, message_id) VALUES (?, ?, ?, ?)"
            ),
            [(name, n, sid, mid) for n, (sid, mid) in enumerate(pairs)],
        )
    return info


def _info(row: Any) -> QueueInfo:
    rubric = json.loads(row[2])
    return QueueInfo(
        name=row[0],
        level=row[1],
        rubric=Rubric(
            tuple(rubric["tags"]),
            None if rubric["rating"] is None else (float(rubric["rating"][0]), float(rubric["rating"][1])),
            rubric["instructions"],
        ),
        annotators=None if row[3] is None else tuple(json.loads(row[3])),
        per_unit=int(row[4]),
        lease_seconds=float(row[5]),
        created_at=row[6],
        source=row[7],
        unit_count=int(row[8]),
    )


def listing(store: Store) -> list[QueueInfo]:
    """``Store.queues``: every queue, by name."""
    eng = _engine(store)
    sql = _stmt(eng, "q_list", f"SELECT {', '.join(QUEUE_COLUMNS)} FROM {{queues}} ORDER BY name")
    return [_info(r) for r in eng.fetch(sql)]


def get(store: Store, name: Any) -> QueueInfo:
    """``Store.queue_info``: one queue (:class:`QueueNotFound` when there is none)."""
    name = check_name(name)
    eng = _engine(store)
    row = eng.fetch_one(
        _stmt(eng, "q_get", f"SELECT {', '.join(QUEUE_COLUMNS)} FROM {{queues}} WHERE name = ?"), (name,)
    )
    if row is None:
        raise QueueNotFound(f"no annotation queue named {name!r} is stored")
    return _info(row)


def delete(store: Store, name: Any) -> bool:
    """``Store.delete_queue``: the queue, its units and claims (the labels made stay); whether it was there."""
    name = check_name(name)
    eng = _engine(store)
    with store.transaction():
        if not eng.fetch_one(_stmt(eng, "q_have", "SELECT 1 FROM {queues} WHERE name = ?"), (name,)):
            return False
        for table in ("queue_claims", "queue_units", "queues"):
            eng.execute(_stmt(eng, f"q_drop_{table}", f"DELETE FROM {{{table}}} WHERE name = ?"), (name,))
    return True


# ---------------------------------------------------------------------------
# Claims and submissions


def _stamp(at: float) -> str:
    """UTC ISO 8601 with microseconds: claims compare their times as text, in this one format."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at * 1_000_000) % 1_000_000:06d}Z"


def _lock(store: Store, eng: Any, name: str) -> None:
    """Serialize this queue's claims and submissions until the transaction ends (the session
    lock's mechanism, under a key no session id starts with on its own: a clash would only
    make two writers wait for each other)."""
    eng.lock_session("\x1fsessionkit-queue\x1f" + name)


def _allowed(info: QueueInfo, annotator: Any) -> str:
    who = check_annotator(annotator)
    if info.annotators is not None and who not in info.annotators:
        raise InvalidQueue(
            f"{who!r} is not an annotator of queue {info.name!r} (its annotators: {list(info.annotators)})"
        )
    return who


def _unit(info: QueueInfo, row: Any, annotator: str, expires: str) -> QueueUnit:
    return QueueUnit(info.name, int(row[0]), row[1], row[2], info.level, info.target, annotator, expires)


def next_unit(store: Store, name: Any, annotator: Any, lease_seconds: Any = None) -> QueueUnit | None:
    """``Store.next_unit``: the annotator's claim still held, or a new one on the first unit
    that needs it; None when nothing is left for this annotator."""
    info = get(store, name)
    who = _allowed(info, annotator)
    lease = info.lease_seconds if lease_seconds is None else check_lease(lease_seconds)
    eng = _engine(store)
    with store.transaction():
        _lock(store, eng, info.name)
        now = time.time()
        stamp = _stamp(now)
        held = eng.fetch_one(
            _stmt(
                eng,
                "q_held",
                "SELECT c.n, u.session_id, u.message_id, c.expires_at FROM {queue_claims} c"
                " JOIN {queue_units} u ON u.name = c.name AND u.n = c.n"
                " WHERE c.name = ? AND c.annotator = ? AND c.done_at IS NULL AND c.expires_at > ?"
                " ORDER BY c.n LIMIT 1",
            ),
            (info.name, who, stamp),
        )
        if held is not None:
            return _unit(info, held, who, held[3])
        # the annotator's own lapsed claims go: those units are open to everyone again
        eng.execute(
            _stmt(
                eng,
                "q_drop_lapsed",
                "DELETE FROM {queue_claims} WHERE name = ? AND annotator = ? AND done_at IS NULL AND expires_at <= ?",
            ),
            (info.name, who, stamp),
        )
        row = eng.fetch_one(
            _stmt(
                eng,
                "q_pick",
                "SELECT u.n, u.session_id, u.message_id FROM {queue_units} u WHERE u.name = ?"
                " AND NOT EXISTS (SELECT 1 FROM {queue_claims} c WHERE c.name = u.name AND c.n = u.n"
                " AND c.annotator = ?)"
                " AND (SELECT count(*) FROM {queue_claims} c WHERE c.name = u.name AND c.n = u.n"
                " AND (c.done_at IS NOT NULL OR c.expires_at > ?)) < ?"
                " ORDER BY u.n LIMIT 1",
            ),
            (info.name, who, stamp, info.per_unit),
        )
        if row is None:
            return None
        expires = _stamp(now + lease)
        eng.execute(
            _stmt(
                eng,
                "q_claim",
                "INSERT INTO {queue_claims} (name, n, annotator, claimed_at, expires_at, label_id, done_at)"
                " VALUES (?, ?, ?, ?, ?, NULL, NULL)",
            ),
            (info.name, int(row[0]), who, stamp, expires),
        )
    return _unit(info, row, who, expires)


def release(store: Store, name: Any, annotator: Any, n: Any) -> bool:
    """``Store.release_unit``: give back a claim not yet submitted; whether there was one."""
    info = get(store, name)
    who = _allowed(info, annotator)
    eng = _engine(store)
    with store.transaction():
        _lock(store, eng, info.name)
        have = eng.fetch_one(
            _stmt(
                eng,
                "q_mine",
                "SELECT done_at FROM {queue_claims} WHERE name = ? AND n = ? AND annotator = ?",
            ),
            (info.name, _n(n), who),
        )
        if have is None or have[0] is not None:
            return False
        eng.execute(
            _stmt(eng, "q_release", "DELETE FROM {queue_claims} WHERE name = ? AND n = ? AND annotator = ?"),
            (info.name, _n(n), who),
        )
    return True


def _n(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidQueue(f"a unit's place n is an int from 0, got {n!r}")
    return n


def submit(store: Store, name: Any, annotator: Any, n: Any, tag: Any, *, rating: Any = None, note: Any = None) -> Label:
    """``Store.submit_label``: check the answer against the rubric, then store the label and
    mark the claim done, in one transaction."""
    info = get(store, name)
    who = _allowed(info, annotator)
    n = _n(n)
    if tag not in info.rubric.tags:
        raise InvalidQueue(f"tag {tag!r} is not one of the rubric's tags {list(info.rubric.tags)}")
    if info.rubric.rating is not None:
        low, high = info.rubric.rating
        if rating is None:
            raise InvalidQueue(f"the rubric asks for a rating from {low:g} to {high:g}")
        value = _number(rating, "rating")
        if not low <= value <= high:
            raise InvalidQueue(f"rating {rating!r} is outside the rubric's scale {low:g} to {high:g}")
    elif rating is not None:
        raise InvalidQueue("the rubric asks for no rating")
    eng = _engine(store)
    with store.transaction():
        _lock(store, eng, info.name)
        unit = eng.fetch_one(
            _stmt(eng, "q_unit", "SELECT session_id, message_id FROM {queue_units} WHERE name = ? AND n = ?"),
            (info.name, n),
        )
        if unit is None:
            raise InvalidQueue(f"queue {info.name!r} has no unit {n} (its units are 0 to {info.unit_count - 1})")
        mine = eng.fetch_one(
            _stmt(
                eng,
                "q_mine_at",
                "SELECT done_at, expires_at FROM {queue_claims} WHERE name = ? AND n = ? AND annotator = ?",
            ),
            (info.name, n, who),
        )
        if mine is not None and mine[0] is not None:
            raise InvalidQueue(f"{who!r} has labelled unit {n} of queue {info.name!r} already")
        stamp = _stamp(time.time())
        if mine is None or mine[1] <= stamp:
            # no claim, or one that lapsed: the label is still wanted while the unit lacks
            # labels and claims of others (nothing done is thrown away), never beyond per_unit
            taken = eng.fetch_one(
                _stmt(
                    eng,
                    "q_taken",
                    "SELECT count(*) FROM {queue_claims} WHERE name = ? AND n = ? AND annotator <> ?"
                    " AND (done_at IS NOT NULL OR expires_at > ?)",
                ),
                (info.name, n, who, stamp),
            )[0]
            if int(taken) >= info.per_unit:
                raise InvalidQueue(
                    f"unit {n} of queue {info.name!r} is not open to {who!r}: it has all the labels and claims it"
                    " needs (ask store.next_unit for a unit)"
                )
        label = _labels.checked(
            Label("", unit[0], unit[1], tag, target=info.target, rating=rating, note=note, author=who, source="human")
        )
        if eng.node(label.session_id, label.message_id) is None:
            raise InvalidQueue(f"unit {n}: message {label.message_id!r} is no longer in session {label.session_id!r}")
        eng.w_add_labels([label])
        done = label.created_at
        if mine is None:
            eng.execute(
                _stmt(
                    eng,
                    "q_claim",
                    "INSERT INTO {queue_claims} (name, n, annotator, claimed_at, expires_at, label_id, done_at)"
                    " VALUES (?, ?, ?, ?, ?, NULL, NULL)",
                ),
                (info.name, n, who, done, done),
            )
        eng.execute(
            _stmt(
                eng,
                "q_done",
                "UPDATE {queue_claims} SET label_id = ?, done_at = ? WHERE name = ? AND n = ? AND annotator = ?",
            ),
            (label.id, done, info.name, n, who),
        )
        store._emit(ChangeEvent("label", label.session_id, (label.message_id,)))
    return label


def progress(store: Store, name: Any) -> QueueProgress:
    """``Store.queue_progress``: the counts of one queue, read in one snapshot."""
    info = get(store, name)
    eng = _engine(store)
    stamp = _stamp(time.time())
    with eng.snapshot():
        done = {
            str(r[0]): int(r[1])
            for r in eng.fetch(
                _stmt(
                    eng,
                    "q_done_by",
                    "SELECT annotator, count(*) FROM {queue_claims} WHERE name = ? AND done_at IS NOT NULL"
                    " GROUP BY annotator ORDER BY annotator",
                ),
                (info.name,),
            )
        }
        complete = eng.fetch_one(
            _stmt(
                eng,
                "q_complete",
                "SELECT count(*) FROM (SELECT n FROM {queue_claims} WHERE name = ? AND done_at IS NOT NULL"
                " GROUP BY n HAVING count(*) >= ?) AS full_units",
            ),
            (info.name, info.per_unit),
        )[0]
        claimed = eng.fetch_one(
            _stmt(
                eng,
                "q_claimed",
                "SELECT count(*) FROM {queue_claims} WHERE name = ? AND done_at IS NULL AND expires_at > ?",
            ),
            (info.name, stamp),
        )[0]
    for who in info.annotators or ():
        done.setdefault(who, 0)
    return QueueProgress(
        name=info.name,
        units=info.unit_count,
        per_unit=info.per_unit,
        complete=int(complete),
        submitted=sum(done.values()),
        done=dict(sorted(done.items())),
        claimed=int(claimed),
    )


def units(store: Store, name: Any) -> list[tuple[int, str, str]]:
    """``Store.queue_units``: ``(n, session_id, message_id)`` of every unit, in order."""
    info = get(store, name)
    eng = _engine(store)
    sql = _stmt(eng, "q_units", "SELECT n, session_id, message_id FROM {queue_units} WHERE name = ? ORDER BY n")
    return [(int(r[0]), r[1], r[2]) for r in eng.fetch(sql, (info.name,))]


def labels(store: Store, name: Any) -> list[Label]:
    """``Store.queue_labels``: the labels submitted through the queue (those still stored), in order."""
    info = get(store, name)
    eng = _engine(store)
    rows = eng.fetch(
        _stmt(
            eng,
            "q_label_ids",
            "SELECT c.label_id, u.message_id FROM {queue_claims} c JOIN {queue_units} u ON u.name = c.name"
            " AND u.n = c.n WHERE c.name = ? AND c.label_id IS NOT NULL",
        ),
        (info.name,),
    )
    wanted = {r[0] for r in rows}
    # the labels of the units' messages (one filtered read), kept when the queue made them
    return [x for x in store.labels(source="human", message_id=sorted({r[1] for r in rows})) if x.id in wanted]


# ---------------------------------------------------------------------------
# A queue as it is: exports and copies


def export(store: Store, name: Any) -> dict[str, Any]:
    """``Store.export_queue``: the queue, its units and its submissions as one JSON object
    (claims still running are leases, not facts: they are left out)."""
    info = get(store, name)
    eng = _engine(store)
    with eng.snapshot():
        pairs = eng.fetch(
            _stmt(eng, "q_units", "SELECT n, session_id, message_id FROM {queue_units} WHERE name = ? ORDER BY n"),
            (info.name,),
        )
        done = eng.fetch(
            _stmt(
                eng,
                "q_submissions",
                "SELECT n, annotator, label_id, done_at FROM {queue_claims} WHERE name = ? AND done_at IS NOT NULL"
                " ORDER BY n, annotator",
            ),
            (info.name,),
        )
    out = {k: v for k, v in info.to_dict().items() if k not in ("target", "unit_count")}
    out["units"] = [[r[1], r[2]] for r in pairs]
    out["submissions"] = [{"n": int(r[0]), "annotator": r[1], "label_id": r[2], "done_at": r[3]} for r in done]
    return out


def _imported(data: Any) -> tuple[list[Any], list[Sequence[Any]], list[Sequence[Any]]]:
    """The rows of one exported queue, checked (:class:`InvalidQueue` names what is wrong)."""
    if not isinstance(data, Mapping):
        raise InvalidQueue(f"a queue to import is a dict as store.export_queue gives, got {type(data).__name__}")
    try:
        name = check_name(data["name"])
        if data["level"] not in QUEUE_LEVELS:
            raise InvalidQueue(f"queue {name!r}: its level is 'turn', 'path' or 'session', got {data['level']!r}")
        rubric = check_rubric(data["rubric"])
        names = _check_annotators(data.get("annotators"))
        per_unit = _check_per_unit(data["per_unit"], names)
        lease = check_lease(data["lease_seconds"])
        created = _queue_text(data["created_at"], "a queue's created_at", 64)
        source = data.get("source")
        if source is not None and not isinstance(source, str):
            raise InvalidQueue(f"queue {name!r}: its source is a str or None, got {type(source).__name__}")
        pairs = _datasets._pairs_from_units(data["units"])
        if not pairs:
            raise InvalidQueue(f"queue {name!r} holds no unit")
        subs: list[Sequence[Any]] = []
        for s in data.get("submissions", []):
            n = _n(s["n"])
            if n >= len(pairs):
                raise InvalidQueue(f"queue {name!r}: a submission names unit {n}, of {len(pairs)}")
            done = _queue_text(s["done_at"], "a submission's done_at", 64)
            label_id = _queue_text(s["label_id"], "a submission's label_id", _labels.MAX_AUTHOR_CHARS)
            subs.append((name, n, check_annotator(s["annotator"]), done, done, label_id, done))
    except InvalidDataset as exc:
        raise InvalidQueue(f"a queue's units: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise InvalidQueue(f"a queue to import does not have the expected fields: {exc!r}") from None
    row = [name, data["level"], json.dumps(rubric.to_dict()), None if names is None else json.dumps(list(names))]
    row += [per_unit, lease, created, source, len(pairs)]
    unit_rows: list[Sequence[Any]] = [(name, n, sid, mid) for n, (sid, mid) in enumerate(pairs)]
    return row, unit_rows, subs


def import_queues(store: Store, queues: Iterable[Any]) -> int:
    """``Store.import_queues``: queues as exported, in one transaction; a name stored already
    is left alone. How many were added."""
    checked_rows = [_imported(q) for q in queues]
    eng = _engine(store)
    added = 0
    with store.transaction():
        for row, unit_rows, subs in checked_rows:
            if eng.fetch_one(_stmt(eng, "q_have", "SELECT 1 FROM {queues} WHERE name = ?"), (row[0],)):
                continue
            put = f"INSERT INTO {{queues}} ({', '.join(QUEUE_COLUMNS)}) VALUES ({', '.join('?' * len(QUEUE_COLUMNS))})"
            eng.execute(_stmt(eng, "q_put", put), tuple(row))
            eng.execute_many(
                _stmt(
                    eng,
                    "q_units_put",
                    "INSERT INTO {queue_units} (name, n, session_id, message_id) VALUES (?, ?, ?, ?)",
                ),
                unit_rows,
            )
            if subs:
                eng.execute_many(
                    _stmt(
                        eng,
                        "q_subs_put",
                        "INSERT INTO {queue_claims} (name, n, annotator, claimed_at, expires_at, label_id, done_at)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    ),
                    subs,
                )
            added += 1
    return added
