"""How well two sources of labels agree: Cohen's kappa, raw agreement and the confusion
table over the units both labelled (docs/judging.md#agreement).

Written by hand rather than taken from scikit-learn (not a dependency of sessionkit):
the statistic is a few sums over a confusion table, which is built here anyway.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Agreement", "agreement"]


@dataclass(frozen=True)
class Agreement:
    """The agreement of two label sources ``a`` and ``b`` on the units both labelled.

    ``kappa`` is Cohen's kappa, ``(observed - expected) / (1 - expected)``; NaN when
    ``expected`` is 1 (both sources gave one and the same value to every unit: chance
    alone explains their agreement). ``observed`` is the share of units given the same
    value, ``expected`` the share expected by chance from each source's own
    frequencies, ``n`` the number of units. ``confusion`` is a DataFrame counting the
    units by ``a``'s value (rows) and ``b``'s value (columns), over every value either
    gave; ``units`` a DataFrame with one row per unit (``session_id``, ``message_id``,
    ``target``, ``a``, ``b``).
    """

    kappa: float
    observed: float
    expected: float
    n: int
    confusion: Any
    units: Any


def _labels_call_filters() -> set[str]:
    from ..store import Store

    return {name for name in inspect.signature(Store.labels).parameters if name != "self"}


def _side(store: Any, filters: Any, name: str, what: str) -> dict[tuple[str, str, str], Any]:
    """The value each unit has from one source: ``{(session, message, target): value}``
    (of a unit's labels matching ``filters``, the one added last)."""
    if not isinstance(filters, dict) or not filters:
        raise ValueError(
            f"{name} selects labels: a dict of store.labels filters such as {{'source': 'human'}}, got {filters!r}"
        )
    allowed = _labels_call_filters()
    unknown = sorted(set(filters) - allowed)
    if unknown:
        raise ValueError(f"{name} has no label filter {unknown[0]!r}; the filters are {', '.join(sorted(allowed))}")
    out: dict[tuple[str, str, str], Any] = {}
    for label in store.labels(**filters):
        value = label.tag if what == "tag" else label.rating
        if value is not None:
            out[(label.session_id, label.message_id, label.target)] = value
    return out


def agreement(store: Any, a: dict, b: dict, *, tag_or_rating: str = "tag") -> Agreement:
    """Cohen's kappa, raw agreement and the confusion table between two label sources.

    ``a`` and ``b`` select labels with the filters of ``store.labels`` (``{"source":
    "human"}``, ``{"scorer": "judge@1"}``, ``{"author": "ana", "tag": [...]}``). A unit
    is a message, or the branch ending at it (a label's session, message and target);
    where a source put several labels on one unit, the one added last counts. Only the
    units both sources labelled are compared, on their ``tag`` or, with
    ``tag_or_rating="rating"``, their rating (labels without one are left out). No
    unit labelled by both raises ``ValueError``.
    """
    if tag_or_rating not in ("tag", "rating"):
        raise ValueError(f"tag_or_rating is 'tag' or 'rating', got {tag_or_rating!r}")
    from . import _pandas

    pd = _pandas()
    left = _side(store, a, "a", tag_or_rating)
    right = _side(store, b, "b", tag_or_rating)
    both = [key for key in left if key in right]
    if not both:
        raise ValueError(f"no unit carries a label of both sources (a: {len(left)} units, b: {len(right)} units)")
    n = len(both)
    values = sorted({left[k] for k in both} | {right[k] for k in both}, key=lambda v: (str(type(v)), v))
    index = {v: i for i, v in enumerate(values)}
    table = [[0] * len(values) for _ in values]
    for key in both:
        table[index[left[key]]][index[right[key]]] += 1
    observed = sum(table[i][i] for i in range(len(values))) / n
    rows = [sum(r) / n for r in table]
    cols = [sum(table[i][j] for i in range(len(values))) / n for j in range(len(values))]
    expected = sum(r * c for r, c in zip(rows, cols))
    kappa = math.nan if math.isclose(expected, 1.0) else (observed - expected) / (1 - expected)
    confusion = pd.DataFrame(table, index=pd.Index(values, name="a"), columns=pd.Index(values, name="b"))
    units = pd.DataFrame(
        [(sid, mid, target, left[(sid, mid, target)], right[(sid, mid, target)]) for sid, mid, target in both],
        columns=["session_id", "message_id", "target", "a", "b"],
    )
    return Agreement(kappa=kappa, observed=observed, expected=expected, n=n, confusion=confusion, units=units)
