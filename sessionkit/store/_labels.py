"""Labels: what a reader marks on a message, or on the branch that ends at it (docs/labels.md).

A label is a tag (a short string), an optional rating (a finite number) and note (text),
its author and the time it was made, on one message of a session (``target="message"``)
or on the branch from a root down to that message (``target="branch"``), and where it
came from: a person (``source="human"``) or a scorer, code or a model judge
(``"code"``, ``"llm"``), named with its version (``scorer="tool_error@1"``), with the
scorer's rationale and the fingerprint of the unit it scored (``store.score``,
docs/judging.md). Labels are rows of ``sessionkit_labels`` (schema version 9; the
provenance columns since version 12) and go with their message: deleting a message,
clearing its session or deleting the session removes them.

This module holds the value type, the checks of every argument (a refused label raises
:class:`~sessionkit.errors.InvalidLabel` before anything is written), the SQL of the
table (:class:`LabelSQL`, part of every engine) and the calls behind
``Session.add_label`` / ``Store.labels`` and their siblings.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .. import messages as _msg
from ..errors import InvalidLabel, MessageNotFound
from ._values import ChangeEvent

if TYPE_CHECKING:
    from ._session import Session
    from ._store import Store

__all__ = ["Label", "LABEL_TARGETS", "LABEL_SOURCES", "MAX_TAG_CHARS", "LabelFilter", "LabelSQL"]

#: What a label is on: the message itself, or the branch from a root down to it.
LABEL_TARGETS = ("message", "branch")

#: Who made a label: a person, a scorer written as code, or a model asked to judge.
LABEL_SOURCES = ("human", "code", "llm")

#: The longest tag, author and note (characters).
MAX_TAG_CHARS = 100
MAX_AUTHOR_CHARS = 200
MAX_NOTE_CHARS = 20_000
MAX_SCORER_CHARS = 200

#: The stored columns of a label, in :class:`Label` field order.
LABEL_COLUMNS = (
    "id",
    "session_id",
    "message_id",
    "tag",
    "target",
    "rating",
    "note",
    "author",
    "created_at",
    "source",
    "scorer",
    "rationale",
    "fingerprint",
)


@dataclass(frozen=True)
class Label:
    """A label on a message (``target="message"``) or on the branch ending at it (``"branch"``)."""

    id: str
    session_id: str
    message_id: str
    tag: str
    target: str = "message"
    rating: float | None = None
    note: str | None = None
    author: str | None = None
    created_at: str = ""
    #: ``"human"`` (a person), ``"code"`` or ``"llm"`` (a scorer: ``store.score``).
    source: str = "human"
    #: The scorer's name and version (``"tool_error@1"``); None for a person's label.
    scorer: str | None = None
    #: Why the scorer chose this tag (a judge's explanation); None when not given.
    rationale: str | None = None
    #: The content fingerprint of the unit a scorer labelled (what ``store.score``
    #: compares to tell a changed unit); None for a person's label.
    fingerprint: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The label as a plain JSON object (its fields by name)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Label:
        """A label from :meth:`to_dict`'s output (checked: :class:`InvalidLabel` names what is wrong)."""
        if not isinstance(data, dict):
            raise InvalidLabel(f"a label must be a dict, got {type(data).__name__}")
        unknown = set(data) - set(LABEL_COLUMNS)
        if unknown:
            raise InvalidLabel(f"a label has no field {sorted(unknown)[0]!r}")
        for name in ("id", "session_id", "message_id", "tag"):
            if name not in data:
                raise InvalidLabel(f"a label needs {name!r}")
        return checked(
            cls(**{k: data[k] for k in LABEL_COLUMNS if k in data}),
            keep_id=True,
        )


# ---------------------------------------------------------------------------
# Checks (every one raises InvalidLabel naming the argument and the value)


def _text_field(value: Any, name: str, *, limit: int, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidLabel(f"the label's {name} must be a str, got {type(value).__name__}")
    value = str(value)
    try:
        _msg.check_text(value, f"the label's {name}")
    except ValueError as exc:
        raise InvalidLabel(str(exc)) from None
    if "\x00" in value:
        # PostgreSQL text cannot hold NUL: refused on every engine, so a label any store
        # holds copies to any other
        raise InvalidLabel(f"the label's {name} holds the NUL character (\\x00) at index {value.index(chr(0))}")
    if len(value) > limit:
        raise InvalidLabel(f"the label's {name} is {len(value)} characters long; at most {limit} are allowed")
    return value


def check_tag(tag: Any) -> str:
    """A tag: a non-empty str of at most :data:`MAX_TAG_CHARS` characters, without line
    breaks or surrounding spaces (a tag is matched exactly, so ``"bug "`` is refused)."""
    value = _text_field(tag, "tag", limit=MAX_TAG_CHARS)
    assert value is not None
    if not value.strip():
        raise InvalidLabel(f"the label's tag must not be empty or blank, got {tag!r}")
    if value != value.strip():
        raise InvalidLabel(f"the label's tag {tag!r} starts or ends with white space")
    if any(ch in value for ch in "\r\n\t") or not value.isprintable():
        raise InvalidLabel(f"the label's tag {tag!r} holds a line break or a control character")
    return value


def check_rating(rating: Any, name: str = "rating") -> float | None:
    """A rating: None, or a finite int or float (bools are refused)."""
    if rating is None:
        return None
    if isinstance(rating, bool) or not isinstance(rating, (int, float)):
        raise InvalidLabel(f"the label's {name} must be a number, got {type(rating).__name__}")
    try:
        value = float(rating)
    except OverflowError:
        raise InvalidLabel(f"the label's {name} {rating!r} is too large for a float") from None
    if not math.isfinite(value):
        raise InvalidLabel(f"the label's {name} must be a finite number, got {rating!r}")
    return value


def check_target(target: Any) -> str:
    if target not in LABEL_TARGETS:
        raise InvalidLabel(f"a label's target is 'message' or 'branch', got {target!r}")
    return str(target)


def check_source(source: Any) -> str:
    if source not in LABEL_SOURCES:
        raise InvalidLabel(f"a label's source is 'human', 'code' or 'llm', got {source!r}")
    return str(source)


def check_scorer(scorer: Any) -> str | None:
    """A scorer's name and version (``"name@version"``), or None."""
    if scorer is None:
        return None
    value = _text_field(scorer, "scorer", limit=MAX_SCORER_CHARS)
    assert value is not None
    if not value.strip() or value != value.strip() or not value.isprintable():
        raise InvalidLabel(
            f"the label's scorer {scorer!r} is blank, starts or ends with white space or holds a control character"
        )
    return value


def _provenance(source: Any, scorer: Any) -> tuple[str, str | None]:
    source, scorer = check_source(source), check_scorer(scorer)
    if source == "human" and scorer is not None:
        raise InvalidLabel(f"a person's label (source 'human') names no scorer, got scorer {scorer!r}")
    if source != "human" and scorer is None:
        raise InvalidLabel(f"a label with source {source!r} names its scorer (name@version)")
    return source, scorer


def checked(label: Label, *, keep_id: bool = False) -> Label:
    """``label`` with every field checked (and a new id unless ``keep_id``)."""
    ident = _text_field(label.id, "id", limit=MAX_AUTHOR_CHARS) if keep_id else uuid.uuid4().hex
    assert ident is not None
    if keep_id and not ident:
        raise InvalidLabel("the label's id must not be empty")
    source, scorer = _provenance(label.source, label.scorer)
    created = label.created_at
    if keep_id and created:
        created = str(_text_field(created, "created_at", limit=64))
        if _msg.normalize_created(created) != created:
            raise InvalidLabel(f"the label's created_at {created!r} is not a UTC ISO 8601 time")
    return Label(
        id=ident,
        session_id=str(_text_field(label.session_id, "session_id", limit=1 << 20)),
        message_id=str(_text_field(label.message_id, "message_id", limit=1 << 20)),
        tag=check_tag(label.tag),
        target=check_target(label.target),
        rating=check_rating(label.rating),
        note=_text_field(label.note, "note", limit=MAX_NOTE_CHARS, optional=True),
        author=_text_field(label.author, "author", limit=MAX_AUTHOR_CHARS, optional=True),
        created_at=str(created or _msg.now_iso()),
        source=source,
        scorer=scorer,
        rationale=_text_field(label.rationale, "rationale", limit=MAX_NOTE_CHARS, optional=True),
        fingerprint=_text_field(label.fingerprint, "fingerprint", limit=MAX_SCORER_CHARS, optional=True),
    )


def _tags(tag: Any) -> list[str] | None:
    """The ``tag`` filter: None, one tag or several (an empty list matches nothing)."""
    if tag is None:
        return None
    if isinstance(tag, str):
        return [check_tag(tag)]
    if not isinstance(tag, Iterable):
        raise InvalidLabel(f"tag must be a str or a list of str, got {type(tag).__name__}")
    return [check_tag(t) for t in tag]


class LabelFilter(NamedTuple):
    """The checked filters of a label listing; None leaves a filter out."""

    session_id: str | None
    message_ids: list[str] | None
    tags: list[str] | None
    author: str | None
    min_rating: float | None
    max_rating: float | None
    target: str | None
    source: str | None = None
    #: ``"name@version"`` (that version) or ``"name"`` (every version of it).
    scorer: str | None = None


def query(
    *,
    session_id: Any = None,
    message_id: Any = None,
    tag: Any = None,
    author: Any = None,
    min_rating: Any = None,
    max_rating: Any = None,
    target: Any = None,
    source: Any = None,
    scorer: Any = None,
) -> LabelFilter:
    """The checked filters of a label listing (see :meth:`LabelSQL.labels`)."""
    ids = None
    if message_id is not None:
        ids = [message_id] if isinstance(message_id, str) else list(message_id)
        ids = [str(_text_field(m, "message_id", limit=1 << 20)) for m in ids]
    return LabelFilter(
        session_id=None if session_id is None else _text_field(session_id, "session_id", limit=1 << 20),
        message_ids=ids,
        tags=_tags(tag),
        author=_text_field(author, "author", limit=MAX_AUTHOR_CHARS, optional=True),
        min_rating=check_rating(min_rating, "min_rating"),
        max_rating=check_rating(max_rating, "max_rating"),
        target=None if target is None else check_target(target),
        source=None if source is None else check_source(source),
        scorer=check_scorer(scorer),
    )


# ---------------------------------------------------------------------------
# The calls behind Session and Store


def add(session: Session, message_id: Any, tag: Any, **fields: Any) -> Label:
    """``Session.add_label``: check, then store under the message (which must exist)."""
    label = checked(Label("", session.session_id, message_id, tag, **fields))
    eng = session._eng()
    with eng.write():
        if eng.node(label.session_id, label.message_id) is None:
            raise MessageNotFound(f"message {label.message_id!r} is not in session {label.session_id!r}")
        eng.w_add_labels([label])
    session.store._emit(ChangeEvent("label", label.session_id, (label.message_id,)))
    return label


def import_labels(store: Store, labels: Iterable[Any]) -> int:
    """``Store.import_labels``: labels with their ids, in one transaction; those already
    stored (by id) are left alone. Every message must exist; how many were added."""
    items = [checked(x, keep_id=True) if isinstance(x, Label) else Label.from_dict(x) for x in labels]
    eng = store._check()
    with store.transaction():
        for label in items:
            if eng.node(label.session_id, label.message_id) is None:
                raise MessageNotFound(
                    f"label {label.id!r}: message {label.message_id!r} is not in session {label.session_id!r}"
                )
        added = eng.w_add_labels(items)
        for label in added:
            store._emit(ChangeEvent("label", label.session_id, (label.message_id,)))
    return len(added)


def remove(store: Store, label_id: Any, session_id: str | None = None) -> bool:
    """``remove_label``: whether a label of that id (in that session, when given) was removed."""
    ident = str(_text_field(label_id, "id", limit=1 << 20))
    eng = store._check()
    with eng.write():
        gone = eng.w_remove_label(ident, session_id)
    if gone is None:
        return False
    store._emit(ChangeEvent("label", gone[0], (gone[1],)))
    return True


def listing(store: Store, **filters: Any) -> list[Label]:
    return store._check().labels(query(**filters))


# ---------------------------------------------------------------------------
# The SQL (mixed into every engine: see _sql.SQLEngine)


def _batches(items: list[Any], size: int = 1000) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class _Rows(Protocol):
    """What :class:`LabelSQL` uses of its engine (``sessionkit.store._sql.SQLEngine``)."""

    sql: Any

    def compile(self, template: str) -> str: ...
    def listed(self, values: Iterable[Any]) -> Any: ...
    def fetch(self, sql: str, params: Any = ()) -> list[Any]: ...
    def fetch_one(self, sql: str, params: Any = ()) -> Any: ...
    def execute(self, sql: str, params: Any = ()) -> None: ...
    def execute_many(self, sql: str, rows: list[Any]) -> None: ...
    def insert_columns(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...
    def lock_session(self, sid: str) -> None: ...
    def log_change(self, sid: str, kind: str, seq: int | None = None) -> None: ...
    def _label_sql(self, key: str, template: str) -> str: ...


class LabelSQL:
    """The labels table's statements, mixed into every engine (``_sql.SQLEngine``)."""

    def _label_sql(self: _Rows, key: str, template: str) -> str:
        sql = self.sql.get(key)
        if sql is None:
            sql = self.sql[key] = self.compile(template)
        return sql

    def w_add_labels(self: _Rows, labels: list[Label]) -> list[Label]:
        """Insert the labels whose id is not stored yet (the first of repeated ids); those inserted."""
        fresh = list({label.id: label for label in reversed(labels)}.values())[::-1]
        have: set[str] = set()
        for part in _batches([label.id for label in fresh]):
            sql = self._label_sql("labels_have", "SELECT id FROM {labels} WHERE id {in_ids}")
            have.update(r[0] for r in self.fetch(sql, (self.listed(part),)))
        fresh = [label for label in fresh if label.id not in have]
        for sid in sorted({label.session_id for label in fresh}):
            self.lock_session(sid)
        self.insert_columns("labels", LABEL_COLUMNS, [tuple(getattr(x, c) for c in LABEL_COLUMNS) for x in fresh])
        for sid in sorted({label.session_id for label in fresh}):
            self.log_change(sid, "labels")
        return fresh

    def w_remove_label(self: _Rows, label_id: str, session_id: str | None) -> tuple[str, str] | None:
        """Delete one label; ``(session_id, message_id)`` it was on, or None when there was none."""
        sql = self._label_sql("labels_find", "SELECT session_id, message_id FROM {labels} WHERE id = ?")
        row = self.fetch_one(sql, (label_id,))
        if row is None or (session_id is not None and row[0] != session_id):
            return None
        self.lock_session(row[0])
        self.execute(self._label_sql("labels_drop", "DELETE FROM {labels} WHERE id = ?"), (label_id,))
        self.log_change(row[0], "labels")
        return row[0], row[1]

    def labels(self: _Rows, filters: LabelFilter) -> list[Label]:
        """The labels matching every filter given, in the order they were added."""
        session_id, message_ids, tags, author, min_rating, max_rating, target, source, scorer = filters
        if message_ids == [] or tags == []:
            return []
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("session_id", session_id), ("author", author), ("target", target), ("source", source)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if scorer is not None and "@" in scorer:
            where.append("scorer = ?")
            params.append(scorer)
        elif scorer is not None:  # a name: every version of it (substr: a name may hold LIKE's wildcards)
            where.append("substr(scorer, 1, ?) = ?")
            params.extend((len(scorer) + 1, scorer + "@"))
        if message_ids is not None:
            where.append("message_id {in_ids}")
            params.append(self.listed(message_ids))
        if tags is not None:
            where.append("tag {in_ids}")
            params.append(self.listed(tags))
        if min_rating is not None:
            where.append("rating >= ?")
            params.append(min_rating)
        if max_rating is not None:
            where.append("rating <= ?")
            params.append(max_rating)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        template = f"SELECT {', '.join(LABEL_COLUMNS)} FROM {{labels}}{clause} ORDER BY seq"
        rows = self.fetch(self._label_sql("labels:" + clause, template), tuple(params))
        return [Label(*row) for row in rows]


def labelled_messages(store: Store, tag: Any, session_id: str | None) -> set[tuple[str, str]]:
    """``(session_id, message_id)`` of every message carrying a label of ``tag`` (one
    or several), or lying on a branch labelled so (from the labelled message up to its root)."""
    eng = store._check()
    out: set[tuple[str, str]] = set()
    branches: dict[str, list[str]] = {}
    for label in eng.labels(query(session_id=session_id, tag=tag)):
        if label.target == "message":
            out.add((label.session_id, label.message_id))
        else:
            branches.setdefault(label.session_id, []).append(label.message_id)
    for sid, ends in branches.items():
        # One read of the session's tree (no content), then each branch walked up in it,
        # stopping where an earlier branch already went: the walks together visit each
        # message at most once, however many branches are labelled.
        parents = {n.id: n.parent_id for n in eng.nodes(sid)}
        on: set[str] = set()
        for end in ends:
            mid: str | None = end if end in parents else None
            while mid is not None and mid not in on:
                on.add(mid)
                mid = parents.get(mid)
        out.update((sid, mid) for mid in on)
    return out


# ---------------------------------------------------------------------------
# The ``labels`` view of store.sql (see _analysis: VIEWS, view_sql and the Cache)

#: The columns of the ``labels`` view, with their kinds (as ``_analysis.VIEW_COLUMNS``).
LABEL_VIEW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session_id", "text"),
    ("id", "text"),
    ("message_id", "text"),
    ("target", "text"),
    ("tag", "text"),
    ("rating", "float"),
    ("note", "text"),
    ("author", "text"),
    ("created_at", "time"),
    ("seq", "int"),
    ("source", "text"),
    ("scorer", "text"),
    ("rationale", "text"),
)


def label_view_sql(table: str) -> str:
    """The ``labels`` view as DuckDB SQL over ``table`` (the store's labels table or its copy)."""
    return f"""SELECT session_id, id, message_id, target, tag, rating::DOUBLE AS rating, note, author,
           TRY_CAST(created_at AS TIMESTAMPTZ) AS created_at, seq::BIGINT AS seq,
           source, scorer, rationale
    FROM {table}"""
