"""Runs, run events and vectors stored as they are: ``Store.import_runs``, ``import_events``
and ``import_embeddings`` (exports read back, copies between stores).

Each call checks every item first (a clear ``TypeError``/``ValueError`` naming it, before
anything is written), then writes them in one transaction through the engine's
``w_import_*`` (``_sql.py``), keeping ids, times and seqs. An item already stored is
skipped, so importing twice adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from ._args import _INT64, _json_arg, _str_arg
from ._embeddings import _vector_text
from ._values import RunRecord

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["import_runs", "import_events", "import_embeddings", "checked_run"]

_RUN_FIELDS = ("run_id", "session_id", "status", "error", "started_at", "ended_at", "usage", "input", "meta")


def _opt_str(value: Any, name: str) -> str | None:
    return None if value is None else _str_arg(value, name)


def _time(value: Any, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    try:
        return _msg.to_iso(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {exc}") from None


def _json(value: Any, name: str) -> str:
    try:
        return _json_arg(value, name)
    except TypeError as exc:
        why = str(exc).removeprefix("message is not JSON-encodable: ")
        raise TypeError(f"{name} is not JSON-encodable: {why}") from None


def _json_object(value: Any, name: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict (a JSON object) or None, got {type(value).__name__}")
    _json(value, name)
    return value


def checked_run(item: RunRecord | dict[str, Any]) -> RunRecord:
    """A run record ready to store, from a :class:`RunRecord` or a dict of its fields."""
    if isinstance(item, RunRecord):
        fields = {name: getattr(item, name) for name in _RUN_FIELDS}
    elif isinstance(item, dict):
        unknown = sorted(set(item) - set(_RUN_FIELDS))
        if unknown:
            raise ValueError(f"a run has no field {unknown[0]!r}; its fields are {', '.join(_RUN_FIELDS)}")
        fields = {name: item.get(name) for name in _RUN_FIELDS}
    else:
        raise TypeError(f"a run is a sessionkit.RunRecord or a dict, got {type(item).__name__}")
    run_id = _str_arg(fields["run_id"], "run_id")
    what = f"run {run_id!r}"
    return RunRecord(
        run_id=run_id,
        session_id=_str_arg(fields["session_id"], f"{what}: session_id"),
        status=_str_arg(fields["status"], f"{what}: status"),
        error=_opt_str(fields["error"], f"{what}: error"),
        started_at=_time(fields["started_at"], f"{what}: started_at") or "",
        ended_at=_time(fields["ended_at"], f"{what}: ended_at", optional=True),
        usage=_json_object(fields["usage"], f"{what}: usage"),
        input=_opt_str(fields["input"], f"{what}: input"),
        meta=_json_object(fields["meta"], f"{what}: meta"),
    )


def import_runs(store: Store, runs: Iterable[RunRecord | dict[str, Any]]) -> int:
    items = [checked_run(r) for r in runs]
    eng = store._check()
    with store.transaction():
        return len(eng.w_import_runs(items))


def _checked_event(ev: Any) -> dict[str, Any]:
    if not isinstance(ev, dict):
        raise TypeError(f"an event must be a dict, got {type(ev).__name__}")
    sid = _str_arg(ev.get("session_id"), "an event's session_id")
    seq = ev.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq <= _INT64[1]:
        raise ValueError(f"an event of session {sid!r} needs its seq (an int from 0 to 2**63 - 1), got {seq!r}")
    run_id = ev.get("run_id")
    if run_id is not None:
        _str_arg(run_id, f"event {seq} of session {sid!r}: run_id")
    _json(ev, f"event {seq} of session {sid!r}")
    return dict(ev)


def import_events(store: Store, events: Iterable[dict[str, Any]]) -> int:
    by_session: dict[str, list[dict[str, Any]]] = {}
    for ev in events:
        ev = _checked_event(ev)
        by_session.setdefault(ev["session_id"], []).append(ev)
    eng = store._check()
    added = 0
    with store.transaction():
        for sid, items in by_session.items():
            added += len(eng.w_import_events(sid, items))
    return added


def import_embeddings(store: Store, vectors: Iterable[dict[str, Any]]) -> int:
    rows = []
    dims: dict[str, int] = {}
    for item in vectors:
        if not isinstance(item, dict):
            raise TypeError(f"a vector is a dict (session_id, message_id, model, vector), got {type(item).__name__}")
        sid = _str_arg(item.get("session_id"), "a vector's session_id")
        mid = _str_arg(item.get("message_id"), "a vector's message_id")
        model = _str_arg(item.get("model"), "a vector's model")
        if not model.strip():
            raise ValueError(f"the vector of message {mid!r} of session {sid!r} has an empty model name")
        dim, text = _vector_text(item.get("vector"), f"the {model!r} vector of message {mid!r} of session {sid!r}")
        given = item.get("dim")
        if given is not None and given != dim:
            raise ValueError(
                f"the {model!r} vector of message {mid!r} of session {sid!r} says dim {given}, holds {dim}"
            )
        if dims.setdefault(model, dim) != dim:
            raise ValueError(f"vectors of model {model!r} of {dims[model]} and of {dim} values")
        rows.append((sid, mid, model, dim, text))
    eng = store._check()
    with store.transaction():
        return eng.w_import_embeddings(rows)
