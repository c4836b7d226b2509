"""The data of an annotation queue's page (docs/annotation.md): the same for the store
viewer's ``#/q/NAME`` (``sessionkit view --write``) and the notebook's ``QueueView``.

Both run ``static/queue_view.js``, which asks for the queue (``state``), the next unit of
its annotator (``next``) and sends a label (``submit``); :func:`answer` answers each from
the store's public API. Agreement is ``sk.analysis.agreement`` between each pair of the
queue's annotators, over the units of the queue both labelled.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

from ..analysis import agreement as _agreement
from ..errors import InvalidQueue, SessionKitError
from ..messages import message_text
from ._payloads import (
    QueueHandler,
    QueueNextRequest,
    QueuePageState,
    QueueReleaseRequest,
    QueueReply,
    QueueStateRequest,
    QueueSubmitRequest,
    UnitView,
)

if TYPE_CHECKING:
    from ..store import QueueInfo, QueueUnit, Store

__all__ = ["queue_state", "unit_view", "queues_list", "answer", "HANDLERS", "MAX_UNIT_MESSAGES"]

#: The messages of a unit shown at most (its last ones: the unit itself and what came just before).
MAX_UNIT_MESSAGES = 200


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _pairs(store: Store, info: QueueInfo, done: dict[str, int]) -> list[dict[str, object]]:
    """Agreement between every two annotators who labelled a unit of the queue both."""
    units = store.queue_units(info.name)
    ids = sorted({mid for _, _, mid in units})
    sessions = {sid for _, sid, _ in units}
    out = []
    people = sorted(who for who, count in done.items() if count)
    for a, b in itertools.combinations(people, 2):

        def side(who: str) -> dict[str, object]:
            sel: dict[str, object] = {"author": who, "source": "human", "target": info.target, "message_id": ids}
            if len(sessions) == 1:
                sel["session_id"] = next(iter(sessions))
            sel["tag"] = list(info.rubric.tags)
            return sel

        row: dict[str, object] = {"a": a, "b": b}
        kinds = ["tag"] + (["rating"] if info.rubric.rating is not None else [])
        for kind in kinds:
            try:
                got = _agreement(store, side(a), side(b), tag_or_rating=kind)
            except ValueError:  # no unit labelled by both
                continue
            prefix = "" if kind == "tag" else "rating_"
            row[prefix + "n"] = got.n
            row[prefix + "observed"] = _number(got.observed)
            row[prefix + "kappa"] = _number(got.kappa)
        if "n" in row:
            out.append(row)
    return out


def queue_state(store: Store, name: str, annotator: str | None = None) -> QueuePageState:
    """The queue's definition, its progress, the agreement between its annotators and who asks."""
    info = store.queue_info(name)
    progress = store.queue_progress(name)
    return {
        "queue": info.to_dict(),
        "progress": progress.to_dict(),
        "agreement": _pairs(store, info, progress.done),
        "annotator": annotator,
    }


def unit_view(store: Store, unit: QueueUnit | None) -> UnitView | None:
    """A claimed unit with its messages as text (root first; the labelled message last)."""
    if unit is None:
        return None
    path = store.session(unit.session_id).get_history(leaf_id=unit.message_id)
    shown = path[-MAX_UNIT_MESSAGES:]
    return {
        "queue": unit.queue,
        "n": unit.n,
        "session_id": unit.session_id,
        "message_id": unit.message_id,
        "level": unit.level,
        "target": unit.target,
        "annotator": unit.annotator,
        "expires_at": unit.expires_at,
        "hidden": len(path) - len(shown),
        "messages": [{"id": m.get("id"), "role": m.get("role"), "text": message_text(m)} for m in shown],
    }


def queues_list(store: Store) -> list[dict[str, object]]:
    """Every queue with its progress (the viewer's ``#/q/`` list)."""
    return [{**q.to_dict(), "progress": store.queue_progress(q.name).to_dict()} for q in store.queues()]


def _state(store: Store, name: str, annotator: str | None, msg: QueueStateRequest) -> QueueReply:
    return {"type": "state", "req": msg.get("req"), **queue_state(store, name, annotator)}


def _next(store: Store, name: str, annotator: str, msg: QueueNextRequest) -> QueueReply:
    return {"type": "unit", "req": msg.get("req"), "unit": unit_view(store, store.next_unit(name, annotator))}


def _submit(store: Store, name: str, annotator: str, msg: QueueSubmitRequest) -> QueueReply:
    # the values as the page sent them: submit_label checks each (InvalidQueue naming the problem)
    label = store.submit_label(
        name,
        annotator,
        msg.get("n"),
        msg.get("tag"),
        rating=msg.get("rating"),
        note=msg.get("note") or None,
    )
    return {"type": "submitted", "req": msg.get("req"), "label": label.to_dict()}


def _release(store: Store, name: str, annotator: str, msg: QueueReleaseRequest) -> QueueReply:
    released = store.release_unit(name, annotator, msg.get("n"))
    return {"type": "released", "req": msg.get("req"), "released": released}


#: The handler of each request of an annotation queue's page, by its ``type`` (the requests are
#: the TypedDicts of ``_payloads.QUEUE_REQUESTS``); every one but ``state`` needs an annotator.
HANDLERS: dict[str, QueueHandler] = {"state": _state, "next": _next, "submit": _submit, "release": _release}


def answer(store: Store, name: str, annotator: str | None, msg: object, *, catch: bool = True) -> QueueReply:
    """The reply to one message of ``queue_view.js`` (``state``, ``next``, ``submit``,
    ``release``); a refusal is an ``error`` reply (raised instead when not ``catch``)."""
    if not isinstance(msg, dict):
        raise InvalidQueue(f"a queue request is a JSON object, got {type(msg).__name__}")
    kind = msg.get("type")
    try:
        if kind != "state" and annotator is None:
            raise InvalidQueue("say who you are: the annotator's name")
        handler = HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise InvalidQueue(f"unknown request {kind!r}")
        return handler(store, name, annotator, msg)
    except SessionKitError as exc:
        if not catch:
            raise
        return {"type": "error", "req": msg.get("req"), "error": str(exc)}
