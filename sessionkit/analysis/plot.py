"""Plots of what people compare across conversations, drawn with matplotlib (``sk.plot``).

Every function takes a session or a store (``tokens_along_path`` a session), draws
on ``ax`` when given (else on a new figure) and returns the matplotlib ``Axes``,
so plots compose with the rest of a notebook::

    sk.plot.tokens_along_path(session)          # per-message tokens + running total
    sk.plot.branch_fanout(store)                # how many messages have 1, 2, 3... children
    sk.plot.tool_calls(store, top=10)           # the most called tools
    sk.plot.cost_per_run(session)               # USD per agent run

Needs matplotlib (the ``analysis`` extra); a missing one raises
:class:`sessionkit.MissingDependency`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..errors import missing
from ._tables import StoreData

__all__ = ["tokens_along_path", "branch_fanout", "tool_calls", "cost_per_run"]

_ROLE_COLORS = {
    "system": "#7f7f7f",
    "user": "#1f77b4",
    "assistant": "#ff7f0e",
    "tool": "#2ca02c",
}
_OTHER = "#9467bd"


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing("analysis", "matplotlib", exc) from exc
    return plt


def _axes(ax):
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4))
    return ax


def _scope(source) -> StoreData:
    from ..store import Session, Store

    if isinstance(source, Session):
        return StoreData(source.store, [source.session_id])
    if isinstance(source, Store):
        return StoreData(source)
    raise TypeError(f"expected a sessionkit Store or Session, got {type(source).__name__}")


def tokens_along_path(
    session, *, leaf_id: str | None = None, compacted: bool = True, cumulative: bool = True, ax: Any = None
):
    """Tokens of each message on a path (bars coloured by role), with the running total.

    The path runs from the root to ``leaf_id`` (default: the latest leaf), as the
    model sees it (``compacted=True``: a compaction shows as one bar with its
    summary's tokens) or in full. With ``cumulative`` the running total is drawn
    as a line on a second y axis (``ax.figure.axes[1]``). Returns the bars' Axes.
    """
    from ..store import CompactionSpan, Session

    if not isinstance(session, Session):
        raise TypeError(f"tokens_along_path needs a Session, got {type(session).__name__}")
    _pyplot()
    from matplotlib.patches import Patch

    path = session.path(leaf_id)
    roles, tokens = [], []
    for item in path.model_view() if compacted else path.nodes:
        if isinstance(item, CompactionSpan):  # a summary in place of its range
            tokens.append(item.tokens_model)
            roles.append("compaction")
        else:
            tokens.append(item.tokens)
            roles.append(item.role)
    ax = _axes(ax)
    colors = [_ROLE_COLORS.get(r, "#bcbd22" if r == "compaction" else _OTHER) for r in roles]
    ax.bar(range(len(tokens)), tokens, color=colors)
    ax.set_xlabel("message on the path (root = 0)")
    ax.set_ylabel("tokens")
    where = f" to {leaf_id}" if leaf_id else ""
    ax.set_title(f"tokens along the path{where} of session {session.session_id!r}")
    seen = list(dict.fromkeys(roles))
    if seen:
        ax.legend(
            handles=[
                Patch(color=_ROLE_COLORS.get(r, "#bcbd22" if r == "compaction" else _OTHER), label=r) for r in seen
            ],
            loc="upper left",
            fontsize="small",
        )
    if cumulative and tokens:
        total = []
        running = 0
        for t in tokens:
            running += t
            total.append(running)
        twin = ax.twinx()
        twin.plot(range(len(total)), total, color="black", linewidth=1.5, label="running total")
        twin.set_ylabel("running total (tokens)")
        twin.set_ylim(bottom=0)
    return ax


def branch_fanout(source, *, ax: Any = None):
    """How many messages have 1, 2, 3... children (2 or more: a branch point), as bars.

    ``source`` is a session or a whole store. Bar ``k`` (x = k) counts the messages
    with exactly ``k`` children; leaves are left out. Returns the Axes.
    """
    data = _scope(source)
    counts: Counter = Counter()
    for sid in data.session_ids:
        counts.update(data.facts(sid).kids.values())
    ax = _axes(ax)
    top = max(counts, default=0)
    xs = list(range(1, top + 1))
    ax.bar(xs, [counts.get(k, 0) for k in xs], color=["#1f77b4" if k == 1 else "#d62728" for k in xs])
    ax.set_xticks(xs)
    ax.set_xlabel("children per message")
    ax.set_ylabel("messages")
    points = sum(v for k, v in counts.items() if k > 1)
    ax.set_title(f"branch fan-out: {points} branch points")
    return ax


def tool_calls(source, *, top: int = 20, ax: Any = None):
    """The most called tools (one count per tool part), as horizontal bars, most called on top.

    ``source`` is a session or a store; ``top`` limits the number of tools shown.
    Returns the Axes.
    """
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ValueError(f"top must be a positive int, got {top!r}")
    _pyplot()
    data = _scope(source)
    counts: Counter = Counter()
    for names in data.messages()["tool_names"]:
        counts.update(names)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    ax = _axes(ax)
    names = [name for name, _ in ranked][::-1]  # barh draws bottom-up: most called on top
    values = [n for _, n in ranked][::-1]
    ax.barh(range(len(names)), values, color="#2ca02c")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.set_xlabel("calls")
    ax.set_title(f"tool calls: {sum(counts.values())} calls to {len(counts)} tools")
    return ax


def cost_per_run(source, *, ax: Any = None):
    """Cost in USD of each agent run, in start order (one bar per run).

    ``source`` is a session or a store. A run whose model is not priced
    (``cost_usd`` unknown) gets no bar (its height is NaN) but a marker and an
    "unknown" label just above the axis; unknown is never drawn as zero. Failed
    and interrupted runs are red, bars and markers alike. Returns the Axes.
    """
    _pyplot()
    data = _scope(source)
    runs = sorted(
        (r for sid in data.session_ids for r in data.run_list(sid)),
        key=lambda r: (r.started_at, r.run_id),
    )
    costs = []
    for r in runs:
        usage = r.usage if isinstance(r.usage, dict) else {}
        value = usage.get("cost_usd")
        costs.append(float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan)
    ax = _axes(ax)
    xs = list(range(len(runs)))
    colors = ["#ff7f0e" if r.status == "completed" else "#d62728" for r in runs]
    ax.bar(xs, costs, color=colors)
    ax.set_xticks(xs)
    ax.set_xticklabels([r.run_id for r in runs], rotation=45, ha="right", fontsize="small")
    # x in data units, y as a fraction of the axes: the marker and its label sit just above
    # the axis line whatever the scale, instead of on it.
    above_axis = ax.get_xaxis_transform()
    for x, c, color in zip(xs, costs, colors):
        if math.isnan(c):
            ax.plot([x], [0.04], marker="X", markersize=9, color=color, linestyle="none", transform=above_axis)
            ax.annotate(
                "unknown",
                (x, 0.09),
                xycoords=above_axis,
                ha="center",
                va="bottom",
                fontsize="small",
                rotation=90,
                color=color,
            )
    if runs:  # what the two colours mean
        from matplotlib.patches import Patch

        handles = [Patch(color="#ff7f0e", label="completed")]
        if any(r.status != "completed" for r in runs):
            handles.append(Patch(color="#d62728", label="failed or interrupted"))
        ax.legend(handles=handles, fontsize="small", loc="best")
    ax.set_ylabel("cost (USD)")
    known = [c for c in costs if not math.isnan(c)]
    unknown = len(costs) - len(known)
    ax.set_title(
        f"cost per run: {len(runs)} run{'' if len(runs) == 1 else 's'}, ${sum(known):.4f}"
        + (f" + {unknown} unknown" if unknown else "")
    )
    if not runs:
        ax.text(0.5, 0.5, "no runs", ha="center", va="center", transform=ax.transAxes)
    return ax
