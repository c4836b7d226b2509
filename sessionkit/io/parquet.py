"""Parquet export and import: every view of ``store.sql``, one file each, for pandas,
Polars, DuckDB or Spark, and a folder of them read back into a store.

The export holds what a store needs to be restored from it (``messages.parquet`` carries
each message whole, as JSON, with its parent, creation time and write order;
``events.parquet`` each event's JSON; ``runs.parquet`` each run's usage and meta), so
:func:`import_parquet` rebuilds the trees, compactions, labels, runs, run events,
vectors and datasets of the exported store.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from .. import messages as _msg
from ..errors import InvalidDataset, InvalidLabel, MalformedInput, MessageNotFound, MessageTooLarge, UsageError, missing
from ..store import Compaction, Session, Store
from ._common import SessionList, sessions_result
from ._progress import Progress, check_progress
from ._reading import PathMissing, as_path

__all__ = ["export_parquet", "import_parquet", "PARQUET_FILES"]

#: The files of an export: the views of ``store.sql``, in the order an import reads them
#: (``sessions``, ``paths``, ``turns``, ``tool_calls`` and ``experiments`` are computed from the others).
PARQUET_FILES = (
    "messages",
    "sessions",
    "compactions",
    "runs",
    "events",
    "labels",
    "paths",
    "turns",
    "tool_calls",
    "embeddings",
    "datasets",
    "dataset_items",
    "experiments",
)

#: The views read through ``store.sql`` (the others through the Python API), with their row order.
_SQL_VIEWS = {
    "labels": "seq",
    "paths": "session_id, leaf_id",
    "turns": "session_id, user_id, reply_id",
    "tool_calls": "session_id, call_message_id, tool_call_id",
    "embeddings": "session_id, message_id, model",
    "datasets": "name, version",
    "dataset_items": "name, version, n",
    "experiments": "experiment, item, variant, scorer",
}

_BATCH = 256  # rows per write (one transaction each)

#: The files of the datasets (docs/judging.md), read back by :func:`_import_datasets`.
_DATASET_FILES = ("datasets", "dataset_items")


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise missing("analysis", "pyarrow", exc) from exc
    return pq


def export_parquet(store, folder: Any, *, session_ids=None) -> dict[str, Path]:
    """Write every view of ``store.sql`` as a Parquet file: ``messages``, ``sessions``,
    ``compactions``, ``runs``, ``events``, ``labels``, ``paths``, ``turns``, ``tool_calls``,
    ``embeddings``, ``datasets`` and ``dataset_items`` (these two empty in an export
    limited by ``session_ids``: a dataset belongs to no session) and ``experiments``.

    ``folder`` is created when missing; existing files of those names are replaced.
    ``messages.parquet`` holds the columns of the ``messages`` view (docs/analysis.md) plus ``seq`` (write order),
    ``metadata`` and ``message`` (the whole message as JSON text, so the export
    loses nothing); the other files have the columns of the ``store.sql`` views
    (see :mod:`sessionkit.analysis`). :func:`import_parquet` reads such a folder back into
    a store. ``session_ids`` limits the export to those sessions. Returns ``{table name:
    path}``. Needs pyarrow and DuckDB (the ``analysis`` extra).
    """
    pq = _pyarrow_parquet()
    from ..analysis import TABLES, StoreData, arrow_table

    folder = as_path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{str(folder)!r} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    data = StoreData(store, session_ids)
    sids = None if session_ids is None else data.session_ids  # (the ids given, checked)
    out = {}
    for name in PARQUET_FILES:
        if name in _DATASET_FILES and sids is not None:  # (a dataset is no session's: in whole exports only)
            table = store.sql_arrow(f"SELECT * FROM {name} WHERE false")
        elif name in _SQL_VIEWS:
            table = store.sql_arrow(f"SELECT * FROM {name} ORDER BY {_SQL_VIEWS[name]}", session_ids=sids)
            if name == "labels":
                table = _with_fingerprints(store, table, sids)
        elif name == "messages":
            table = arrow_table(data, name, full_json=True)
        else:
            assert name in TABLES
            table = arrow_table(data, name)
        target = folder / f"{name}.parquet"
        pq.write_table(table, target)
        out[name] = target
    return out


def _with_fingerprints(store, table: Any, sids: list[str] | None) -> Any:
    """The ``labels`` view's table with a ``fingerprint`` column added: the content
    fingerprint of the unit a scorer labelled, which ``store.score`` compares to skip a unit
    scored already (kept by the store but no column of the view), so that an import loses
    nothing a JSONL export keeps."""
    import pyarrow as pa

    labels = store.labels() if sids is None else [x for sid in sids for x in store.labels(session_id=sid)]
    prints = {label.id: label.fingerprint for label in labels}
    column = pa.array([prints.get(i) for i in table.column("id").to_pylist()], type=pa.string())
    return table.append_column("fingerprint", column)


# ---------------------------------------------------------------------------
# The import


#: The columns an import reads from each file (the others are computed by the store).
_NEEDS = {
    "messages": ("session_id", "id", "parent_id", "created_at", "message"),
    "compactions": ("session_id", "id", "from_id", "to_id", "summary", "created_at", "tokens_before", "tokens_after"),
    "labels": ("session_id", "id", "message_id", "target", "tag", "rating", "note", "author", "created_at"),
    "runs": ("session_id", "run_id", "status", "error", "input", "started_at", "ended_at", "usage", "meta"),
    "events": ("session_id", "seq", "data"),
    "embeddings": ("session_id", "message_id", "model", "vector"),
}
#: Columns read when the file has them (a label's provenance and the fingerprint of the unit
#: a scorer labelled: files of older exports lack them, their labels then a person's).
_OPTIONAL = {"labels": ("source", "scorer", "rationale", "fingerprint")}


def is_parquet_export(path: Path) -> bool:
    """Whether ``path`` is a folder holding a Parquet export (its ``messages.parquet``)."""
    return path.is_dir() and (path / "messages.parquet").is_file()


class _Reader:
    """The rows of one file of the export, a batch at a time, each with where it is."""

    def __init__(self, pq: Any, folder: Path, name: str):
        self.path = folder / f"{name}.parquet"
        self.source = str(self.path)
        self.name = name
        try:
            self.file = pq.ParquetFile(self.path)
        except Exception as exc:  # pyarrow's errors of a file that is no Parquet (ArrowInvalid, OSError)
            raise MalformedInput(self.source, None, f"not a Parquet file: {exc}") from None
        have = set(self.file.schema_arrow.names)
        self.columns = [*_NEEDS[name], *(c for c in _OPTIONAL.get(name, ()) if c in have)]
        lacking = [c for c in _NEEDS[name] if c not in have]
        if lacking:
            raise MalformedInput(
                self.source, None, f"no column {lacking[0]!r}: not a {name} table of a sessionkit Parquet export"
            )

    @property
    def rows(self) -> int:
        return self.file.metadata.num_rows

    def batches(self) -> Iterator[tuple[int, list[dict]]]:
        """``(number of the first row, rows)`` of each batch, in file order."""
        start = 1
        try:
            for batch in self.file.iter_batches(batch_size=_BATCH, columns=self.columns):
                rows = batch.to_pylist()
                yield start, rows
                start += len(rows)
        except MalformedInput:
            raise
        except Exception as exc:  # a damaged file (pyarrow's ArrowInvalid, OSError)
            raise MalformedInput(self.source, f"row {start}", f"cannot read the file: {exc}") from None


def _where(first: int, count: int) -> str:
    return f"row {first}" if count == 1 else f"rows {first} to {first + count - 1}"


def _text(row: dict, key: str, source: str, where: str, *, optional: bool = False) -> Any:
    value = row.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedInput(source, where, f"{key!r} must be a string")
    return value


def _time(row: dict, key: str, source: str, where: str, *, optional: bool = False) -> str | None:
    value = row.get(key)
    if value is None:
        if optional:
            return None
        raise MalformedInput(source, where, f"{key!r} is missing")
    try:
        return _msg.to_iso(value)
    except (TypeError, ValueError) as exc:
        raise MalformedInput(source, where, f"bad {key!r}: {exc}") from None


def _json(row: dict, key: str, source: str, where: str, *, optional: bool = False) -> Any:
    text = _text(row, key, source, where, optional=optional)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedInput(source, where, f"{key!r} is not JSON: {exc}") from None


def _message_items(reader: _Reader, first: int, rows: list[dict]) -> Iterator[tuple[str, int, list]]:
    """``(session id, first row, items for import_many)`` of consecutive rows of one session."""
    block: list = []
    block_sid: str | None = None
    block_first = first
    for i, row in enumerate(rows):
        where = f"row {first + i}"
        sid = _text(row, "session_id", reader.source, where)
        message = _json(row, "message", reader.source, where)
        if not isinstance(message, dict) or message.get("id") != row.get("id"):
            raise MalformedInput(reader.source, where, "'message' is not the JSON of the message of that row's id")
        parent = _text(row, "parent_id", reader.source, where, optional=True)
        created = _time(row, "created_at", reader.source, where)
        if sid != block_sid and block:
            yield block_sid or "", block_first, block
            block = []
        if not block:
            block_sid, block_first = sid, first + i
        block.append((message, parent, created))
    if block:
        yield block_sid or "", block_first, block


def _stored(reader: _Reader, where: str, write: Callable[[], Any]) -> Any:
    """``write()``, the store's refusal of what a row holds turned into MalformedInput naming the row."""
    try:
        return write()
    except MessageTooLarge as exc:
        raise MalformedInput(reader.source, where, str(exc)) from None
    except (MessageNotFound, InvalidLabel) as exc:
        raise MalformedInput(reader.source, where, str(exc)) from None
    except (ValueError, TypeError) as exc:
        raise MalformedInput(reader.source, where, f"invalid {reader.name} row: {exc}") from None


def _side_rows(reader: _Reader, first: int, rows: list[dict]) -> list:
    """The rows of a file other than messages, as the store's import methods take them."""
    src = reader.source
    out: list = []
    for i, row in enumerate(rows):
        where = f"row {first + i}"
        sid = _text(row, "session_id", src, where)
        if reader.name == "compactions":
            for key in ("tokens_before", "tokens_after"):
                if not isinstance(row.get(key), int):
                    raise MalformedInput(src, where, f"{key!r} must be an integer")
            comp = Compaction(
                id=_text(row, "id", src, where),
                from_id=_text(row, "from_id", src, where),
                to_id=_text(row, "to_id", src, where),
                summary=_text(row, "summary", src, where),
                created_at=_time(row, "created_at", src, where) or "",
                tokens_before=row["tokens_before"],
                tokens_after=row["tokens_after"],
            )
            out.append((sid, comp))
        elif reader.name == "labels":
            label = {k: row.get(k) for k in _NEEDS["labels"]}
            label.update({k: row[k] for k in _OPTIONAL["labels"] if row.get(k) is not None})
            label["created_at"] = _time(row, "created_at", src, where)
            out.append(label)
        elif reader.name == "runs":
            run = {k: row.get(k) for k in _NEEDS["runs"]}
            run["started_at"] = _time(row, "started_at", src, where)
            run["ended_at"] = _time(row, "ended_at", src, where, optional=True)
            run["usage"] = _json(row, "usage", src, where, optional=True)
            run["meta"] = _json(row, "meta", src, where, optional=True)
            out.append(run)
        elif reader.name == "events":
            event = _json(row, "data", src, where)
            if not isinstance(event, dict):
                raise MalformedInput(src, where, "'data' is not a JSON object")
            out.append(dict(event, session_id=sid, seq=row.get("seq")))
        else:
            out.append({k: row.get(k) for k in _NEEDS["embeddings"]})
    return out


def import_parquet(store, folder: Any, *, progress: Any = None) -> Sequence[Session]:
    """Import a folder written by :func:`export_parquet` into ``store``; returns the sessions
    it holds, in the order of ``messages.parquet`` (a ``list``; past 10,000 sessions a
    :class:`~sessionkit.io.SessionList`).

    Restores the messages (their trees, write order within each session, creation times
    and payloads, from ``messages.parquet``'s ``message`` column), compactions, labels,
    runs (ids, status, times, input, error, usage, meta), run events (their seqs and
    payloads) and vectors; ``sessions``, ``paths``, ``turns``, ``tool_calls`` and
    ``experiments`` are computed by the store from those, so they are not read. A file of an older export
    that is absent (``embeddings.parquet``) is skipped. Files are read 256 rows at a
    time, each batch written in one transaction (messages: the consecutive rows of one
    session), so memory stays bounded.

    Idempotent as :func:`import_jsonl`: what is stored already is skipped. A folder
    without ``messages.parquet`` -> :class:`sessionkit.UsageError`; a file that is not
    Parquet, lacks a column, or holds a value the store refuses ->
    :class:`MalformedInput` naming the file and the rows of the batch at fault: each batch
    is stored whole or not at all, and the batches before it are stored (importing the
    corrected folder again completes the import).
    Needs pyarrow (the ``analysis`` extra).
    """
    if not isinstance(store, Store):
        raise TypeError(f"expected a sessionkit Store, got {type(store).__name__}")
    check_progress(progress)
    folder = as_path(folder)
    if not folder.exists():
        raise PathMissing(f"{str(folder)!r} does not exist")
    if not folder.is_dir():
        raise UsageError(f"{str(folder)!r} is a file: a Parquet export is a folder (of messages.parquet...)")
    if not is_parquet_export(folder):
        raise PathMissing(f"{str(folder)!r} is not a folder holding a Parquet export (messages.parquet)")
    pq = _pyarrow_parquet()
    readers = [
        _Reader(pq, folder, name) for name in _NEEDS if (folder / f"{name}.parquet").exists() or name == "messages"
    ]
    total = sum(r.rows for r in readers)
    with (
        SessionList(store) as sessions,
        Progress(progress, total=total, desc=f"importing {folder.name}", unit="rows") as bar,
    ):
        for reader in readers:
            for first, rows in reader.batches():
                _import_rows(store, reader, first, rows, sessions)
                bar.update(len(rows))
        if all((folder / f"{name}.parquet").exists() for name in _DATASET_FILES):
            _import_datasets(store, pq, folder)
    return sessions_result(sessions)


def _import_datasets(store: Store, pq: Any, folder: Path) -> None:
    """The datasets of an export, each version stored whole (as ``store.import_datasets``
    takes them). A dataset is read whole: its items are frozen together."""
    sources = {name: str(folder / f"{name}.parquet") for name in _DATASET_FILES}
    need = {
        "datasets": ["name", "version", "level", "created_at", "query"],
        "dataset_items": ["name", "version", "n", "session_id", "message_id", "history", "reference", "tags"],
    }
    tables = {}
    for name, cols in need.items():
        try:
            tables[name] = pq.read_table(sources[name], columns=cols).to_pylist()
        except Exception as exc:  # pyarrow's errors of a damaged file or a missing column
            raise MalformedInput(
                sources[name], None, f"not a {name} table of a sessionkit Parquet export: {exc}"
            ) from None
    items: dict[tuple[Any, Any], list[dict]] = {}
    for i, row in enumerate(tables["dataset_items"]):
        where, src = f"row {i + 1}", sources["dataset_items"]
        items.setdefault((row["name"], row["version"]), []).append(
            {
                "n": row["n"],
                "session_id": _text(row, "session_id", src, where),
                "message_id": _text(row, "message_id", src, where),
                "history": _json(row, "history", src, where),
                "reference": _json(row, "reference", src, where, optional=True),
                "tags": row["tags"] or [],
            }
        )
    for i, row in enumerate(tables["datasets"]):
        where, src = f"row {i + 1}", sources["datasets"]
        its = sorted(items.get((row["name"], row["version"]), []), key=lambda it: it["n"])
        dataset = {
            "name": row["name"],
            "version": row["version"],
            "level": row["level"],
            "created_at": _time(row, "created_at", src, where),
            "query": row["query"],
            "items": [{k: v for k, v in it.items() if k != "n"} for it in its],
        }
        try:
            store.import_datasets([dataset])
        except (InvalidDataset, TypeError) as exc:
            raise MalformedInput(src, where, f"invalid dataset: {exc}") from None


def _import_rows(store: Store, reader: _Reader, first: int, rows: list[dict], sessions: SessionList) -> None:
    if reader.name == "messages":
        for sid, start, items in _message_items(reader, first, rows):
            sessions.append_new(sid)
            session = store.session(sid)
            _stored(reader, _where(start, len(items)), partial(session.import_many, items))
        return
    items = _side_rows(reader, first, rows)
    where = _where(first, len(rows))
    if reader.name == "compactions":
        with store.transaction():
            for sid, comp in items:
                session = store.session(sid)
                _stored(reader, where, partial(session.import_compaction, comp))
        return
    method = {"labels": "import_labels", "runs": "import_runs", "events": "import_events"}.get(
        reader.name, "import_embeddings"
    )
    for item in items:
        sessions.append_new(item["session_id"])
    _stored(reader, where, partial(getattr(store, method), items))
