"""sk.plot: each plot returns its Axes, drawn from the right numbers (Agg backend)."""

from __future__ import annotations

import math
import re
from collections import Counter

import matplotlib
import pytest

import sessionkit as sk

matplotlib.use("Agg")


def _heights(ax):
    return [p.get_height() for p in ax.patches]


def _session(store):
    s = store.session("p")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "one two three " * 10}]})
    s.append({"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "reply " * 40}]})
    s.append({"id": "u2", "role": "user", "parts": [{"type": "text", "text": "again"}]})
    s.append({"id": "a2", "role": "assistant", "parts": [{"type": "text", "text": "final " * 5}]})
    return s


def test_tokens_along_path(store):
    from matplotlib.axes import Axes

    s = _session(store)
    df = s.to_pandas()
    ax = sk.plot.tokens_along_path(s)
    assert isinstance(ax, Axes)
    assert _heights(ax) == list(df["tokens"])
    (twin,) = [a for a in ax.figure.axes if a is not ax]
    running = list(twin.lines[0].get_ydata())
    assert running == [sum(df["tokens"][: i + 1]) for i in range(len(df))]
    # compacted: the range becomes one bar holding the summary's tokens
    s.on_compaction(lambda msgs, ctx: sk.CompactionResult("u1", "a1", "gist"))
    comp = s.compact()
    ax2 = sk.plot.tokens_along_path(s, cumulative=False)
    assert _heights(ax2) == [comp.tokens_after] + list(df["tokens"][2:])
    assert len(ax2.figure.axes) == 1
    ax3 = sk.plot.tokens_along_path(s, compacted=False, leaf_id="u2", cumulative=False)
    assert _heights(ax3) == list(df["tokens"][:3])
    with pytest.raises(TypeError):
        sk.plot.tokens_along_path(store)


def test_plots_draw_on_a_given_axes(store):
    import matplotlib.pyplot as plt

    s = _session(store)
    fig, (a, b) = plt.subplots(1, 2)
    assert sk.plot.tokens_along_path(s, ax=a, cumulative=False) is a
    assert sk.plot.branch_fanout(s, ax=b) is b


def _fanout(trees):
    counts = Counter()
    for tree in trees:
        stack = [tree["prompt"]]
        while stack:
            node = stack.pop()
            if node["replies"]:
                counts[len(node["replies"])] += 1
            stack.extend(node["replies"])
    return counts


def test_branch_fanout_on_real_trees(real):
    expected = _fanout(real["oasst"])
    store = real["store"]
    for tree in real["oasst"][:5]:  # one session
        one = _fanout([tree])
        ax = sk.plot.branch_fanout(store.session("oasst-" + tree["message_tree_id"]))
        assert [int(x) for x in _heights(ax)] == [one.get(k, 0) for k in range(1, max(one) + 1)]
    # the whole store: OASST trees, tau chains (one child each) and HH pairs (a chain, then a fork)
    for rec in real["tau"]:
        expected[1] += sum(1 for m in rec["traj"] if m["role"] != "tool") - 1
    turn = re.compile(r"\n\n(Human|Assistant): ")
    for rec in real["hh"]:
        a, b = (turn.split(rec[k])[1:] for k in ("chosen", "rejected"))
        a, b = list(zip(a[::2], a[1::2])), list(zip(b[::2], b[1::2]))
        shared = 0
        while shared < min(len(a), len(b)) - 1 and a[shared] == b[shared]:
            shared += 1
        expected[1] += (shared - 1) + (len(a) - shared - 1) + (len(b) - shared - 1)
        expected[2] += 1
    ax = sk.plot.branch_fanout(store)
    assert [int(x) for x in _heights(ax)] == [expected.get(k, 0) for k in range(1, max(expected) + 1)]
    assert [int(t.get_text()) for t in ax.get_xticklabels()] == list(range(1, max(expected) + 1))


def test_tool_calls_on_real_trajectories(real):
    calls = Counter(
        c["function"]["name"] for rec in real["tau"] for m in rec["traj"] for c in (m.get("tool_calls") or [])
    )
    ax = sk.plot.tool_calls(real["store"], top=5)
    ranked = sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    widths = [p.get_width() for p in ax.patches]
    assert labels[::-1] == [name for name, _ in ranked]  # most called on top
    assert widths[::-1] == [n for _, n in ranked]
    with pytest.raises(ValueError):
        sk.plot.tool_calls(real["store"], top=0)


def test_cost_per_run(store):
    for i, cost in enumerate([0.01, None, 0.03]):
        store.run_log.begin("s", f"s.{i + 1}", "hi")
        store.run_log.end(
            f"s.{i + 1}",
            status="completed",
            error=None,
            usage={"in": 1, "out": 1, "cache_read": 0, "cache_write": 0, "cost_usd": cost, "model": "m"},
        )
    ax = sk.plot.cost_per_run(store)
    h = _heights(ax)
    assert h[0] == pytest.approx(0.01) and math.isnan(h[1]) and h[2] == pytest.approx(0.03)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["s.1", "s.2", "s.3"]
    assert [t.get_text() for t in ax.texts] == ["unknown"]  # the one word for an unknown cost
    assert len(ax.lines) == 1 and ax.lines[0].get_xdata()[0] == 1  # a marker where the bar is missing
    assert ax.texts[0].xy[1] > 0  # above the axis line, not on it
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed"]
    assert _heights(sk.plot.cost_per_run(store.session("s"))) == h or math.isnan(h[1])
    assert len(sk.plot.cost_per_run(store.session("none")).patches) == 0
    store.run_log.begin("s", "s.4", "hi")
    store.run_log.end("s.4", status="failed", error="boom", usage=None)
    ax = sk.plot.cost_per_run(store)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["completed", "failed or interrupted"]
    assert ax.lines[-1].get_color() == "#d62728"  # the failed run's marker is red
