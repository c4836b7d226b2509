"""What a store keeps for the components built on it: run logs, session records, coordination, settings.

``store.run_log`` records agent runs and their events, ``store.session_records`` keeps
small JSON values beside a session, ``store.coordination`` (``None`` on engines
served by one process) lets several processes share the store, and ``store.settings``
names the engine and holds how a search ranks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from ._args import _INT64, _count_arg, _json_arg, _require_str, _str_arg

if TYPE_CHECKING:
    from ._store import Store
    from ._values import RunRecord


def _time_arg(value: Any, name: str) -> str:
    """A run's time as stored (ISO 8601 UTC, milliseconds); not a time -> the error naming ``name``."""
    try:
        return _msg.to_iso(value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{name}: {str(exc).removeprefix('created_at: ')}") from None


class StoreRunLog:
    """Where a store records agent runs and their events (``store.run_log``; docs/agents.md).

    A :class:`sessionkit.agent.events.RunLog`: the agent records a store session's
    runs here. :meth:`runs` and :meth:`events` read them back, as
    ``store.runs()`` and ``store.events()`` do.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"<sessionkit.StoreRunLog of {self._store!r}>"

    def begin(
        self,
        session_id: str,
        run_id: str,
        input: str | None,
        *,
        meta: dict[str, Any] | None = None,
        started_at: datetime | int | float | str | None = None,
    ) -> None:
        """Record that run ``run_id`` of a session started (status ``"running"``) with ``input``.

        The agent calls this before a run's first event; ``store.runs()`` lists the
        run from then on. Run ids are unique in a store. ``meta`` is what the run
        was, a JSON object kept as :attr:`RunRecord.meta` (the agent records ``at``,
        where the run started, and a variant's or a replay's labels: docs/agents.md);
        not a dict -> ``TypeError``, not JSON-encodable -> ``TypeError`` naming
        ``meta``. ``started_at`` (a datetime, epoch milliseconds or ISO 8601 time;
        default now) records a run that started earlier, as an imported trace did.
        """
        eng = self._store._check()
        session_id = _str_arg(session_id, "session_id")
        run_id = _str_arg(run_id, "run_id")
        if input is not None:
            input = _str_arg(input, "input")
        stored_meta = None
        if meta is not None:
            if not isinstance(meta, dict):
                raise TypeError(f"meta must be a dict (a JSON object) or None, got {type(meta).__name__}")
            try:
                stored_meta = _json_arg(meta, "meta")
            except TypeError as exc:
                why = str(exc).removeprefix("message is not JSON-encodable: ")
                raise TypeError(f"meta of run {run_id!r} is not JSON-encodable: {why}") from None
        began = _msg.now_iso() if started_at is None else _time_arg(started_at, "started_at")
        with eng.write():
            eng.w_run_begin(session_id, run_id, input, began, stored_meta)

    def end(
        self,
        run_id: str,
        *,
        status: str,
        error: str | None = None,
        usage: dict[str, Any] | None = None,
        ended_at: datetime | int | float | str | None = None,
    ) -> None:
        """Record how run ``run_id`` ended: ``status`` (``"completed"``, ``"failed"``,
        ``"interrupted"``), the error text of a failure and the run's summed ``usage``;
        ``ended_at`` as ``started_at`` of :meth:`begin` (default now)."""
        eng = self._store._check()
        run_id = _str_arg(run_id, "run_id")
        status = _str_arg(status, "status")
        if error is not None:
            error = _str_arg(error, "error")
        if usage is not None:
            _json_arg(usage, "usage")
        ended = _msg.now_iso() if ended_at is None else _time_arg(ended_at, "ended_at")
        with eng.write():
            eng.w_run_end(run_id, status, error, usage, ended)

    def reopen(self, run_id: str) -> None:
        """Record that run ``run_id`` runs again: status ``"running"``, its error, usage and end cleared.

        For a run started again under its own id after the process driving it
        stopped (the HTTP server retries the runs a crash cut short). Its start time
        and its events stay; the new attempt's events follow them. An unknown run id
        changes nothing.
        """
        eng = self._store._check()
        run_id = _str_arg(run_id, "run_id")
        with eng.write():
            eng.w_run_end(run_id, "running", None, None, None)

    def append_events(self, session_id: str, events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """Store run events of a session (docs/agents.md) in one transaction; returns them as stored.

        Each event is a JSON object; the store sets ``session_id`` and the next ``seq``
        of the session (from 0, across all its runs), and adds ``v`` (1) and ``ts``
        (now) when missing. Events are kept until the session is deleted.
        """
        eng = self._store._check()
        session_id = _str_arg(session_id, "session_id")
        out = []
        for ev in events:
            if not isinstance(ev, dict):
                raise TypeError(f"an event must be a dict, got {type(ev).__name__}")
            ev = dict(ev)
            ev.setdefault("v", 1)
            ev.setdefault("ts", _msg.now_iso())
            ev["session_id"] = session_id
            _json_arg(ev, f"event {ev.get('kind')!r}")
            out.append(ev)
        with eng.write():
            stored = eng.w_append_events(session_id, out)
        return stored

    def runs(self, session_id: str) -> list[RunRecord]:
        """Recorded agent runs of a session, oldest first (``store.runs()``)."""
        return self._store.runs(session_id)

    def events(self, session_id: str, after_seq: int | None = None) -> list[dict[str, Any]]:
        """Stored run events of a session in ``seq`` order (``store.events()``)."""
        return self._store.events(session_id, after_seq)


class SessionRecords:
    """Small JSON values that a component built on the store keeps beside a session (``store.session_records``).

    Records are numbered ``n`` within their ``kind`` (the HTTP server keeps its
    session table and the messages callers sent as ``server.*`` kinds; importers
    keep what a transcript says beyond its messages). They belong to the session:
    ``store.delete_session()`` removes them with it.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"<sessionkit.SessionRecords of {self._store!r}>"

    def get(self, session_id: str, kind: str) -> list[tuple[int, Any]]:
        """``(n, value)`` of a session's records of ``kind``, by ``n``."""
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        return [(n, json.loads(data)) for n, data in self._store._check().records(session_id, kind)]

    def put(self, session_id: str, kind: str, items: Iterable[tuple[int, Any]]) -> None:
        """Insert or replace records ``(n, value)`` of ``kind`` in one transaction (see :meth:`get`)."""
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        rows = []
        for n, value in items:
            if not isinstance(n, int) or isinstance(n, bool):
                raise TypeError(f"record numbers are ints, got {type(n).__name__}")
            if not _INT64[0] <= n <= _INT64[1]:
                raise ValueError(f"record number {n} does not fit in 64 bits")
            rows.append((int(n), _json_arg(value, f"record {kind!r} {n}")))
        eng = self._store._check()
        with eng.write():
            eng.w_put_records(session_id, kind, rows)


class Coordination:
    """Holds and signals between the processes that share one store (``store.coordination``).

    Only engines that several processes may serve at once have it (PostgreSQL);
    on the others ``store.coordination`` is ``None``. The HTTP server's workers
    use it to share sessions.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"<sessionkit.Coordination of {self._store!r}>"

    def try_hold(self, name: str) -> bool:
        """Take the store-wide hold ``name`` unless some process (this one included) has it.

        True means this process now holds ``name`` until :meth:`release_hold` or
        until it ends (a process that dies gives its holds back). Holds are not
        re-entrant.
        """
        _require_str("name", name)
        return self._store._check().try_hold(name)

    def hold_taken(self, name: str) -> bool:
        """Whether any process holds ``name`` now (nothing is taken); see :meth:`try_hold`."""
        _require_str("name", name)
        return self._store._check().hold_taken(name)

    def release_hold(self, name: str) -> None:
        """Give back the hold ``name`` taken with :meth:`try_hold` (nothing when not held or closed)."""
        _require_str("name", name)
        if self._store.closed:
            return
        self._store._check().release_hold(name)

    def signal(self, session_id: str, kind: str, data: Any = None) -> None:
        """Tell the other processes on this store ``(session_id, kind, data)``; ``data`` is JSON.

        Their :meth:`on_signal` handlers receive it; this process's do not. Best
        effort: a signal that cannot be sent is logged. Nothing when closed.
        """
        _require_str("session_id", session_id)
        _require_str("kind", kind)
        if self._store.closed:
            return
        self._store._check().signal(session_id, kind, data)

    def on_signal(self, handler: Callable[[str, str, Any], Any]) -> None:
        """Call ``handler(session_id, kind, data)`` from a listener thread for other processes' signals.

        Besides what :meth:`signal` sends, the store signals ``"events"`` (data: the
        last ``seq``) whenever another process appends run events to a session.
        Starts the change feed's listener too (see ``store.subscribe()``).
        """
        if not callable(handler):
            raise TypeError("handler must be callable")
        eng = self._store._check()
        eng.on_signal(handler)
        eng.start_listener(self._store._deliver)


class StoreSettings:
    """The engine a store runs on and how it searches (``store.settings``).

    ``engine`` is the engine's name; ``search_candidates`` may be set while the
    store is open and holds for every later ``store.search()`` of this store object.
    """

    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"<sessionkit.StoreSettings engine={self.engine!r} search_candidates={self.search_candidates}>"

    @property
    def engine(self) -> str:
        """The engine's name: ``"sqlite"``, ``"duckdb"`` or ``"postgresql"``."""
        return self._store._engine.kind

    @property
    def search_candidates(self) -> int:
        """How many of the newest matches a search ranks at most (see :meth:`Store.search`; 2,000 by default).

        Any positive int may be set; above 2**31 - 1 it counts as that. Anything else
        (not an int, or below 1) -> ``ValueError`` naming ``search_candidates``.
        """
        return self._store._engine.search_candidates

    @search_candidates.setter
    def search_candidates(self, value: int) -> None:
        self._store._engine.search_candidates = _count_arg(value, "search_candidates", 1)
