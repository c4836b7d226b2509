"""Datasets: turns or paths of the store frozen under a name and version (docs/judging.md).

``store.dataset(name, query=... | units=...)`` picks turns or paths (a SQL query over the
``turns`` / ``paths`` views of ``store.sql`` answering ``(session_id, message_id)``, or the
pairs themselves, or :class:`~sessionkit.store._scoring.Unit` objects) and writes, for each,
the history the model saw before the unit's message, that message when it is a reply (the
reference answer), and the tags of the labels on it, as JSON: an item never changes after,
whatever happens to its session. Rows of ``sessionkit_datasets`` (one per name and version)
and ``sessionkit_dataset_items`` (schema version 13).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from .. import messages as _msg
from ..errors import DatasetNotFound, InvalidDataset, MessageNotFound, SessionKitError

if TYPE_CHECKING:
    from ._sql import SQLEngine
    from ._store import Store

__all__ = ["DatasetInfo", "DatasetItem", "DATASET_LEVELS"]

#: What a dataset's items are: turns (an item per reply) or paths (an item per leaf).
DATASET_LEVELS = ("turn", "path")

MAX_NAME_CHARS = 200

DATASET_COLUMNS = ("name", "version", "level", "created_at", "query", "item_count")
ITEM_COLUMNS = ("name", "version", "n", "session_id", "message_id", "history", "reference", "tags")


@dataclass(frozen=True)
class DatasetInfo:
    """One version of a dataset: its name, version, level, when it was frozen, the query
    that chose its items (None when they were given) and how many it holds."""

    name: str
    version: int
    level: str
    created_at: str
    query: str | None
    item_count: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DatasetItem:
    """One frozen turn or path: the session and message it was taken at, the messages
    before that message (``history``, root first, UIMessage dicts), the message itself
    when it is an assistant reply (``reference``; None otherwise, and then ``history``
    ends with the message) and the tags of the labels on it when it was frozen."""

    name: str
    version: int
    n: int
    session_id: str
    message_id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    reference: dict[str, Any] | None = None
    tags: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------------------
# The ``datasets`` and ``dataset_items`` views of store.sql (see sql.views)

DATASET_VIEW_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "datasets": (
        ("name", "text"),
        ("version", "int"),
        ("level", "text"),
        ("created_at", "time"),
        ("item_count", "int"),
        ("query", "text"),
    ),
    "dataset_items": (
        ("name", "text"),
        ("version", "int"),
        ("n", "int"),
        ("session_id", "text"),
        ("message_id", "text"),
        ("history", "text"),
        ("reference", "text"),
        ("tags", "texts"),
    ),
}


def dataset_view_sql(tables: dict[str, str]) -> dict[str, str]:
    """The two views as DuckDB SQL over ``tables`` (the store's tables or their copies)."""
    return {
        "datasets": f"""SELECT name, version::BIGINT AS version, level,
               TRY_CAST(created_at AS TIMESTAMPTZ) AS created_at, item_count::BIGINT AS item_count, query
        FROM {tables["datasets"]}""",
        "dataset_items": f"""SELECT name, version::BIGINT AS version, n::BIGINT AS n, session_id, message_id,
               history, reference, CAST(tags AS VARCHAR[]) AS tags
        FROM {tables["dataset_items"]}""",
    }


# ---------------------------------------------------------------------------
# Checks


def check_name(name: Any) -> str:
    if not isinstance(name, str):
        raise InvalidDataset(f"a dataset's name must be a str, got {type(name).__name__}")
    if not name.strip() or name != name.strip() or not name.isprintable():
        raise InvalidDataset(
            f"a dataset's name must not be blank, start or end with white space or hold a control character,"
            f" got {name!r}"
        )
    if len(name) > MAX_NAME_CHARS:
        raise InvalidDataset(f"a dataset's name is {len(name)} characters long; at most {MAX_NAME_CHARS} are allowed")
    return name


def check_version(version: Any, *, optional: bool = True) -> int | None:
    if version is None and optional:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 2**31:
        raise InvalidDataset(f"a dataset's version is an int from 1, got {version!r}")
    return version


def check_level(level: Any) -> str:
    if level not in DATASET_LEVELS:
        raise InvalidDataset(f"a dataset's level is 'turn' or 'path', got {level!r}")
    return str(level)


def _pairs_from_units(units: Any) -> list[tuple[str, str]]:
    if isinstance(units, (str, bytes)) or not isinstance(units, Iterable):
        raise InvalidDataset(
            f"units is a list of (session_id, message_id) pairs or sk.scorers.Unit, got {type(units).__name__}"
        )
    pairs = []
    for i, unit in enumerate(units):
        sid = getattr(unit, "session_id", None)
        mid = getattr(unit, "message_id", None)
        if sid is None and isinstance(unit, (tuple, list)) and len(unit) == 2:
            sid, mid = unit
        if not isinstance(sid, str) or not isinstance(mid, str):
            raise InvalidDataset(
                f"units[{i}] is not a (session_id, message_id) pair of str or an sk.scorers.Unit: {unit!r}"
            )
        pairs.append((sid, mid))
    return pairs


def _pairs_from_query(store: Store, query: Any) -> list[tuple[str, str]]:
    if not isinstance(query, str) or not query.strip():
        raise InvalidDataset(f"query is a SQL query over the turns or paths view (a str), got {query!r}")
    table = store.sql_arrow(query)
    names = list(table.column_names)
    if "session_id" not in names or "message_id" not in names:
        raise InvalidDataset(
            f"the dataset's query must answer the columns session_id and message_id (for a turn:"
            f" 'SELECT session_id, reply_id AS message_id FROM turns ...'), it answered {names}"
        )
    sids = table.column("session_id").to_pylist()
    mids = table.column("message_id").to_pylist()
    pairs = []
    for i, (sid, mid) in enumerate(zip(sids, mids)):
        if not isinstance(sid, str) or not isinstance(mid, str):
            raise InvalidDataset(
                f"row {i} of the dataset's query has session_id {sid!r} and message_id {mid!r}: both must be text"
                " (a turn without a reply has no reply_id: leave such turns out, or take their user_id)"
            )
        pairs.append((sid, mid))
    return pairs


# ---------------------------------------------------------------------------
# Freezing, listing, reading, deleting


def _item(store: Store, name: str, version: int, n: int, sid: str, mid: str) -> list[Any]:
    """The stored row of one item: the path read from the store up to ``mid`` (as the model
    saw it: compactions applied), split at the reply."""
    try:
        path = store.session(sid).get_history(leaf_id=mid)
    except MessageNotFound:
        path = []
    if not path:
        raise MessageNotFound(f"the dataset's item {n}: message {mid!r} is not in session {sid!r}")
    reference = path[-1] if path[-1].get("role") == "assistant" else None
    history = path[:-1] if reference is not None else path
    tags = sorted({label.tag for label in store.labels(session_id=sid, message_id=mid)})
    return [
        name,
        version,
        n,
        sid,
        mid,
        _msg.dumps(history),
        None if reference is None else _msg.dumps(reference),
        _msg.dumps(tags),
    ]


def sql_engine(store: Store) -> SQLEngine:
    """The store's engine: every engine is a SQL engine, and datasets (and annotation queues,
    :mod:`._queues`) are its tables."""
    return cast("SQLEngine", store._check())


def statement(eng: Any, key: str, template: str) -> str:
    """The engine's statement ``key``, compiled from ``template`` the first time it is asked for."""
    sql = eng.sql.get(key)
    if sql is None:
        sql = eng.sql[key] = eng.compile(template)
    return str(sql)


def freeze(
    store: Store, name: Any, *, query: Any = None, units: Any = None, level: Any = "turn", version: Any = None
) -> DatasetInfo:
    """``Store.dataset``: freeze the chosen turns or paths as the next version of ``name``."""
    name = check_name(name)
    level = check_level(level)
    version = check_version(version)
    if (query is None) == (units is None):
        raise InvalidDataset("a dataset is chosen by a query or by units: give one of them")
    pairs = _pairs_from_query(store, query) if query is not None else _pairs_from_units(units)
    pairs = list(dict.fromkeys(pairs))  # each unit once, in the order chosen
    if not pairs:
        raise InvalidDataset(f"the dataset {name!r} would be empty: the {'query' if query else 'units'} chose nothing")
    eng = sql_engine(store)
    with store.transaction():
        top = eng.fetch_one(statement(eng, "ds_top", "SELECT max(version) FROM {datasets} WHERE name = ?"), (name,))[0]
        if version is None:
            version = (top or 0) + 1
        elif eng.fetch_one(
            statement(eng, "ds_have", "SELECT 1 FROM {datasets} WHERE name = ? AND version = ?"), (name, version)
        ):
            raise InvalidDataset(f"dataset {name!r} version {version} is stored already")
        rows: list[Sequence[Any]] = [_item(store, name, version, n, sid, mid) for n, (sid, mid) in enumerate(pairs)]
        info = DatasetInfo(name, version, level, _msg.now_iso(), query, len(rows))
        put = f"INSERT INTO {{datasets}} ({', '.join(DATASET_COLUMNS)}) VALUES ({', '.join('?' * 6)})"
        eng.execute(statement(eng, "ds_put", put), tuple(getattr(info, c) for c in DATASET_COLUMNS))
        put_items = f"INSERT INTO {{dataset_items}} ({', '.join(ITEM_COLUMNS)}) VALUES ({', '.join('?' * 8)})"
        eng.execute_many(statement(eng, "ds_items_put", put_items), rows)
        eng.log_change("", "datasets")
    return info


def listing(store: Store) -> list[DatasetInfo]:
    """``Store.datasets``: every version of every dataset, by name then version."""
    eng = sql_engine(store)
    sql = statement(eng, "ds_list", f"SELECT {', '.join(DATASET_COLUMNS)} FROM {{datasets}} ORDER BY name, version")
    return [DatasetInfo(r[0], int(r[1]), r[2], r[3], r[4], int(r[5])) for r in eng.fetch(sql)]


def _resolve(store: Store, name: Any, version: Any) -> tuple[str, int]:
    name = check_name(name)
    version = check_version(version)
    eng = sql_engine(store)
    if version is None:
        top = eng.fetch_one(statement(eng, "ds_top", "SELECT max(version) FROM {datasets} WHERE name = ?"), (name,))[0]
        if top is None:
            raise DatasetNotFound(f"no dataset named {name!r} is stored")
        return name, int(top)
    if not eng.fetch_one(
        statement(eng, "ds_have", "SELECT 1 FROM {datasets} WHERE name = ? AND version = ?"), (name, version)
    ):
        raise DatasetNotFound(f"dataset {name!r} has no version {version}")
    return name, version


def items(store: Store, name: Any, version: Any = None) -> list[DatasetItem]:
    """``Store.dataset_items``: the items of one version (the latest by default), in order."""
    eng = sql_engine(store)
    with eng.snapshot():
        name, version = _resolve(store, name, version)
        sql = statement(
            eng,
            "ds_items",
            f"SELECT {', '.join(ITEM_COLUMNS)} FROM {{dataset_items}} WHERE name = ? AND version = ? ORDER BY n",
        )
        rows = eng.fetch(sql, (name, version))
    return [
        DatasetItem(
            r[0],
            int(r[1]),
            int(r[2]),
            r[3],
            r[4],
            json.loads(r[5]),
            None if r[6] is None else json.loads(r[6]),
            json.loads(r[7]),
        )
        for r in rows
    ]


def delete(store: Store, name: Any, version: Any = None) -> int:
    """``Store.delete_dataset``: one version, or every version when ``version`` is None; how many went."""
    name = check_name(name)
    version = check_version(version)
    eng = sql_engine(store)
    with store.transaction():
        if version is not None:
            name, version = _resolve(store, name, version)
            where, params = "name = ? AND version = ?", [name, version]
        else:
            _resolve(store, name, None)
            where, params = "name = ?", [name]
        count = eng.fetch_one(
            statement(eng, "ds_count:" + where, f"SELECT count(*) FROM {{datasets}} WHERE {where}"), params
        )[0]
        eng.execute(statement(eng, "ds_drop_items:" + where, f"DELETE FROM {{dataset_items}} WHERE {where}"), params)
        eng.execute(statement(eng, "ds_drop:" + where, f"DELETE FROM {{datasets}} WHERE {where}"), params)
        eng.log_change("", "datasets")
    return int(count)


def import_datasets(store: Store, datasets: Iterable[tuple[DatasetInfo, list[DatasetItem]]]) -> int:
    """Store datasets as they are (their versions, times and items kept); a version stored
    already is left alone. How many versions were added."""
    eng = sql_engine(store)
    added = 0
    with store.transaction():
        for info, its in datasets:
            check_name(info.name)
            check_version(info.version, optional=False)
            check_level(info.level)
            have = eng.fetch_one(
                statement(eng, "ds_have", "SELECT 1 FROM {datasets} WHERE name = ? AND version = ?"),
                (info.name, info.version),
            )
            if have:
                continue
            put = f"INSERT INTO {{datasets}} ({', '.join(DATASET_COLUMNS)}) VALUES ({', '.join('?' * 6)})"
            row = tuple(getattr(info, c) for c in DATASET_COLUMNS[:-1]) + (len(its),)
            eng.execute(statement(eng, "ds_put", put), row)
            put_items = f"INSERT INTO {{dataset_items}} ({', '.join(ITEM_COLUMNS)}) VALUES ({', '.join('?' * 8)})"
            eng.execute_many(
                statement(eng, "ds_items_put", put_items),
                [
                    (
                        info.name,
                        info.version,
                        n,
                        it.session_id,
                        it.message_id,
                        _msg.dumps(it.history),
                        None if it.reference is None else _msg.dumps(it.reference),
                        _msg.dumps(list(it.tags)),
                    )
                    for n, it in enumerate(its)
                ],
            )
            added += 1
        if added:
            eng.log_change("", "datasets")
    return added


def from_dict(data: Any) -> tuple[DatasetInfo, list[DatasetItem]]:
    """A dataset from :func:`to_dict`'s output (checked: :class:`InvalidDataset` names what is wrong)."""
    try:
        info = DatasetInfo(
            name=check_name(data["name"]),
            version=int(check_version(data["version"], optional=False) or 0),
            level=check_level(data["level"]),
            created_at=str(data["created_at"]),
            query=data.get("query"),
            item_count=len(data["items"]),
        )
        its = [
            DatasetItem(
                info.name,
                info.version,
                n,
                str(it["session_id"]),
                str(it["message_id"]),
                list(it["history"]),
                it.get("reference"),
                [str(t) for t in it.get("tags", [])],
            )
            for n, it in enumerate(data["items"])
        ]
    except SessionKitError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InvalidDataset(f"a stored dataset does not have the expected fields: {exc!r}") from None
    return info, its


def to_dict(info: DatasetInfo, its: list[DatasetItem]) -> dict[str, Any]:
    """A dataset as one JSON object (its fields and its items, without the repeated name and version)."""
    out = {k: v for k, v in info.to_dict().items() if k != "item_count"}
    out["items"] = [
        {
            "session_id": it.session_id,
            "message_id": it.message_id,
            "history": it.history,
            "reference": it.reference,
            "tags": it.tags,
        }
        for it in its
    ]
    return out
