"""Checks of the arguments the store's public methods take (a clear error naming the argument)."""

from __future__ import annotations

from typing import Any

from .. import messages as _msg
from ._values import LATEST

_BATCH = 256


#: Above this many ids, Engine.nodes_by_id reads the session's nodes once instead of each id.
_MANY_IDS = 64


#: Messages whose content one read of a scan fetches at most.
_SCAN_READ = 1_000


#: The largest count handed to an engine (a row limit, a batch): any int a caller
#: passes is clamped to it, so no driver sees an int its SQL type cannot hold.
_MAX_COUNT = 2**31 - 1


_INT64 = (-(2**63), 2**63 - 1)


def _str_arg(value: Any, name: str) -> str:
    """``value`` when it is a str of valid Unicode; else TypeError or ValueError naming ``name``.

    Ids and names are checked here, before any engine sees them: a lone surrogate
    cannot be encoded for any driver (docs/messages.md, docs/errors.md).
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        value = str(value)
    if not value.isascii():  # O(1); only other strings can hold a surrogate
        _msg.check_text(value, name)
    return value


def _sql_text(value: str, name: str) -> None:
    """A query's text or parameter: a lone surrogate -> ValueError (DuckDB would raise a TypeError)."""
    if not value.isascii():
        _msg.check_text(value, name)


def _sql_params(value: Any, name: str) -> None:
    """Every str of a query's parameters (in lists, tuples and dicts) is valid Unicode."""
    if isinstance(value, str):
        _sql_text(value, f"store.sql: {name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _sql_params(item, f"{name}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                _sql_text(key, f"store.sql: a key of {name}")
            _sql_params(item, f"{name}[{key!r}]")


def _parent_arg(parent_id: Any) -> Any:
    """A ``parent_id`` as written: LATEST, None or a str of valid Unicode."""
    if parent_id is LATEST or parent_id is None:
        return parent_id
    if not isinstance(parent_id, str):
        raise TypeError("parent_id must be a str, None or sessionkit.LATEST")
    return _str_arg(parent_id, "parent_id")


def _count_arg(value: Any, name: str, minimum: int = 0) -> int:
    """A non-negative (or at least ``minimum``) int, clamped to :data:`_MAX_COUNT`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a non-negative int" if minimum == 0 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return min(int(value), _MAX_COUNT)


def _json_arg(value: Any, name: str) -> str:
    """``value`` as canonical JSON, refusing what no engine can store (TypeError / ValueError)."""
    return _msg.dumps_valid(value, name)


def _check_parent(parent_id: Any) -> None:
    _parent_arg(parent_id)


def _require_str(what: str, value: Any) -> None:
    _str_arg(value, what)


def _created_from(prep: _msg.Prepared) -> str:
    """The creation time to store for a prepared message (its createdAt, else now)."""
    return _msg.normalize_created(prep.created_at) or _msg.now_iso()
