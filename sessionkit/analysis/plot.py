"""Plots of what people compare across conversations, drawn with matplotlib (``sk.plot``).

Every function takes a session or a store (``tokens_along_path`` a session), draws
on ``ax`` when given (else on a new figure) and returns the matplotlib ``Axes``,
so plots compose with the rest of a notebook::

    sk.plot.tokens_along_path(session)          # per-message tokens + running total
    sk.plot.branch_fanout(store)                # how many messages have 1, 2, 3... children
    sk.plot.tool_calls(store, top=10)           # the most called tools
    sk.plot.cost_per_run(session)               # USD per agent run
    sk.plot.overview(store)                     # the viewer's overview page as one figure

The overview's plots (``messages_over_time``, ``tokens_by_model``, ``cost_by_model``,
``latency``, ``tool_errors``, ``label_distribution``, ``rating_distribution``, and
``overview`` with them all) draw the figures of
:func:`sessionkit.analysis.overview_data`, the same SQL as the viewer's ``#/overview``.

Needs matplotlib (the ``analysis`` extra); a missing one raises
:class:`sessionkit.MissingDependency`.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from ..errors import missing
from ._overview import overview_data
from ._tables import StoreData

__all__ = [
    "tokens_along_path",
    "branch_fanout",
    "tool_calls",
    "cost_per_run",
    "messages_over_time",
    "tokens_by_model",
    "cost_by_model",
    "latency",
    "tool_errors",
    "label_distribution",
    "rating_distribution",
    "overview",
]

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


# -- the overview (the viewer's #/overview page, from overview_data's SQL) -----------------


def _figures(source, data: dict | None) -> dict:
    """The overview's figures of a store or a session (given ``data`` is used as is)."""
    if data is not None:
        return data
    from ..store import Session, Store

    if isinstance(source, Session):
        return overview_data(source.store, [source.session_id])
    if isinstance(source, Store):
        return overview_data(source)
    raise TypeError(f"expected a sessionkit Store or Session, got {type(source).__name__}")


def _nothing(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def messages_over_time(source, *, ax: Any = None, data: dict | None = None):
    """Messages written each day (bars) and sessions begun each day (their first message; a
    line on a second y axis, ``ax.figure.axes[1]``). ``source`` is a store or a session;
    ``data``: figures :func:`~sessionkit.analysis.overview_data` already gave. Returns the Axes."""
    figures = _figures(source, data)
    ax = _axes(ax)
    days = sorted({r["day"] for r in figures["messages_by_day"]} | {r["day"] for r in figures["sessions_by_day"]})
    messages = {r["day"]: r["messages"] for r in figures["messages_by_day"]}
    sessions = {r["day"]: r["sessions"] for r in figures["sessions_by_day"]}
    xs = list(range(len(days)))
    ax.bar(xs, [messages.get(d, 0) for d in days], color="#1f77b4", label="messages")
    ax.set_xticks(xs)
    ax.set_xticklabels(days, rotation=45, ha="right", fontsize="small")
    ax.set_ylabel("messages")
    ax.set_title(f"messages and sessions by day: {sum(messages.values())} messages, {sum(sessions.values())} sessions")
    if days:
        twin = ax.twinx()
        twin.plot(xs, [sessions.get(d, 0) for d in days], color="#ff7f0e", marker="o", label="sessions")
        twin.set_ylabel("sessions begun")
        twin.set_ylim(bottom=0)
    else:
        _nothing(ax, "no messages")
    return ax


def _stacked_bars_end(ax, ys: list[int], names: list[str], xlabel: str, title: str, empty: str) -> None:
    """Name the bars of a stacked horizontal bar chart (``names`` at ``ys``), label its axis and
    title it; its legend, or ``empty`` said on the axes when there is no bar."""
    ax.set_yticks(ys)
    ax.set_yticklabels(names)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    if names:
        ax.legend(fontsize="small", loc="best")
    else:
        _nothing(ax, empty)


def _model_names(models: list[dict]) -> list[str]:
    return [r["model"] if r["model"] is not None else "(no model)" for r in models]


def tokens_by_model(source, *, ax: Any = None, data: dict | None = None):
    """Input and output tokens of the agent runs by model, as stacked horizontal bars (most runs
    on top). Returns the Axes."""
    figures = _figures(source, data)
    ax = _axes(ax)
    models = figures["models"][::-1]  # barh draws bottom-up
    ys = list(range(len(models)))
    tin = [r["tokens_in"] for r in models]
    ax.barh(ys, tin, color="#1f77b4", label="in")
    ax.barh(ys, [r["tokens_out"] for r in models], left=tin, color="#ff7f0e", label="out")
    _stacked_bars_end(
        ax, ys, _model_names(models), "tokens", f"tokens by model: {sum(r['runs'] for r in models)} runs", "no runs"
    )
    return ax


def cost_by_model(source, *, ax: Any = None, data: dict | None = None):
    """Cost in USD of the agent runs by model, as horizontal bars. A model none of whose runs is
    priced gets no bar but an "unknown" label: unknown is never drawn as zero. Returns the Axes."""
    figures = _figures(source, data)
    ax = _axes(ax)
    models = figures["models"][::-1]
    ys = list(range(len(models)))
    costs = [math.nan if r["cost_usd"] is None else float(r["cost_usd"]) for r in models]
    ax.barh(ys, costs, color="#2ca02c")
    ax.set_yticks(ys)
    ax.set_yticklabels(_model_names(models))
    at_axis = ax.get_yaxis_transform()  # x as a fraction of the axes, y in data units
    for y, c, r in zip(ys, costs, models):
        if math.isnan(c):
            ax.annotate("unknown", (0.01, y), xycoords=at_axis, va="center", fontsize="small", color="#d62728")
        elif r["unpriced"]:
            ax.annotate(f"+ {r['unpriced']} unpriced", (c, y), va="center", fontsize="small")
    ax.set_xlabel("cost (USD)")
    known = [c for c in costs if not math.isnan(c)]
    ax.set_title(f"cost by model: ${sum(known):.4f}")
    if not models:
        _nothing(ax, "no runs")
    return ax


def latency(source, *, ax: Any = None, data: dict | None = None):
    """p50 and p95 latency in seconds of turns (their run, from its start to its end) and of
    tool calls, as grouped bars; what has no recorded latency is left out. Returns the Axes."""
    figures = _figures(source, data)
    ax = _axes(ax)
    rows = [r for r in figures["latency"] if r["n"]]
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [r["p50"] for r in rows], width=0.4, color="#1f77b4", label="p50")
    ax.bar([x + 0.2 for x in xs], [r["p95"] for r in rows], width=0.4, color="#ff7f0e", label="p95")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['what']} ({r['n']})" for r in rows])
    ax.set_ylabel("seconds")
    ax.set_title("latency: p50 and p95")
    if rows:
        ax.legend(fontsize="small", loc="best")
    else:
        _nothing(ax, "no recorded latency")
    return ax


def tool_errors(source, *, top: int = 20, ax: Any = None, data: dict | None = None):
    """Each tool's error rate (errors among its calls that have a result) as horizontal bars,
    the ``top`` most called tools, most called on top. Returns the Axes."""
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ValueError(f"top must be a positive int, got {top!r}")
    figures = _figures(source, data)
    ax = _axes(ax)
    tools = figures["tools"][:top][::-1]
    ys = list(range(len(tools)))
    rates = [math.nan if r["error_rate"] is None else r["error_rate"] for r in tools]
    ax.barh(ys, rates, color="#d62728")
    ax.set_yticks(ys)
    ax.set_yticklabels([f"{r['tool_name']} ({r['errors']}/{r['answered']})" for r in tools])
    ax.set_xlim(0, 1)
    ax.set_xlabel("error rate")
    errors = sum(r["errors"] for r in figures["tools"])
    ax.set_title(f"tool errors: {errors} of {sum(r['answered'] for r in figures['tools'])} answered calls")
    if not tools:
        _nothing(ax, "no tool calls")
    return ax


def label_distribution(source, *, top: int = 20, ax: Any = None, data: dict | None = None):
    """Labels by tag (the ``top`` most used), stacked by who made them (``human``, ``code``,
    ``llm``), as horizontal bars. Returns the Axes."""
    if not isinstance(top, int) or isinstance(top, bool) or top < 1:
        raise ValueError(f"top must be a positive int, got {top!r}")
    figures = _figures(source, data)
    ax = _axes(ax)
    counts: dict[str, dict[str, int]] = {}
    for r in figures["tags"]:
        counts.setdefault(r["tag"], {})[r["source"]] = r["labels"]
    tags = sorted(counts, key=lambda t: (-sum(counts[t].values()), t))[:top][::-1]
    sources = sorted({s for c in counts.values() for s in c}, key=lambda s: (["human", "code", "llm", s].index(s), s))
    ys = list(range(len(tags)))
    left = [0] * len(tags)
    colors = {"human": "#1f77b4", "code": "#2ca02c", "llm": "#9467bd"}
    for source_name in sources:
        widths = [counts[t].get(source_name, 0) for t in tags]
        ax.barh(ys, widths, left=left, color=colors.get(source_name, _OTHER), label=source_name)
        left = [a + b for a, b in zip(left, widths)]
    title = f"labels by tag: {sum(r['labels'] for r in figures['tags'])} labels"
    _stacked_bars_end(ax, ys, tags, "labels", title, "no labels")
    return ax


def rating_distribution(source, *, ax: Any = None, data: dict | None = None):
    """How many labels carry each rating (score), as bars. Returns the Axes."""
    figures = _figures(source, data)
    ax = _axes(ax)
    rows = figures["ratings"]
    xs = list(range(len(rows)))
    ax.bar(xs, [r["labels"] for r in rows], color="#8c564b")
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['rating']:g}" for r in rows])
    ax.set_xlabel("rating")
    ax.set_ylabel("labels")
    ax.set_title(f"ratings: {sum(r['labels'] for r in rows)} rated labels")
    if not rows:
        _nothing(ax, "no rated labels")
    return ax


def overview(source):
    """The viewer's overview page as one matplotlib ``Figure``: every plot above on its own
    axes, from one :func:`~sessionkit.analysis.overview_data` (one query per figure)."""
    plt = _pyplot()
    data = _figures(source, None)
    fig, grid = plt.subplots(3, 3, figsize=(18, 13), layout="constrained")
    cells = list(grid.flat)
    messages_over_time(source, ax=cells[0], data=data)
    tokens_by_model(source, ax=cells[1], data=data)
    cost_by_model(source, ax=cells[2], data=data)
    latency(source, ax=cells[3], data=data)
    tool_errors(source, ax=cells[4], data=data)
    label_distribution(source, ax=cells[5], data=data)
    rating_distribution(source, ax=cells[6], data=data)
    for ax in cells[7:]:
        ax.set_axis_off()
    t = data["totals"]
    fig.suptitle(
        f"{t['sessions']} sessions, {t['messages']} messages, {t['runs']} runs, "
        f"{t['tool_calls']} tool calls, {t['labels']} labels"
    )
    return fig
