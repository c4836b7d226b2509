"""sk.analysis.overview_data (the viewer's #/overview) against figures computed here from the
views' plain rows, and sk.plot's overview plots drawn from them (SQLite; the views are the same
SQL on every engine, which the viewer's browser test checks on all three)."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

import sessionkit as sk
from sessionkit.analysis import overview_data


def listing(command: str) -> str:
    """Lists files."""
    return "a.txt b.txt"


def broken(path: str) -> str:
    """Reads a file."""
    raise OSError(f"no such file: {path}")


def _text(mid: str, role: str, text: str, at: str) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}], "createdAt": at}


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    store = sk.open_store(tmp_path_factory.mktemp("overview") / "o.db")
    for k, day in enumerate(["2026-03-01", "2026-03-01", "2026-03-02"]):
        s = store.session(f"chat{k}")
        s.append(_text("u", "user", "hello", f"{day}T10:00:00.000Z"))
        s.append(_text("a", "assistant", "hi", f"{day}T10:00:01.000Z"))
        s.append(_text("u2", "user", "more", "2026-03-04T09:00:00.000Z"))
    s.add_label("a", "good", rating=4, author="ana")
    s.add_label("u2", "good", rating=2.5, author="bo")
    s.add_label("a", "terse", source="code", scorer="length@1")
    store.session("chat0").add_label("a", "good", rating=4, author="bo")
    script = [
        {
            "text": "Looking.",
            "tool_calls": [
                {"name": "listing", "arguments": {"command": "ls"}, "id": "c1"},
                {"name": "broken", "arguments": {"path": "x"}, "id": "c2"},
            ],
        },
        {"text": "One file unreadable."},
    ]
    sk.Agent("t", "Be brief.", sk.testing.ScriptedModel(script), tools=[listing, broken]).run_sync(
        "list", session=store.session("run")
    )
    sk.Agent("t", "Be brief.", sk.testing.ScriptedModel([{"text": "Again."}])).run_sync(
        "again", session=store.session("run")
    )
    yield store
    store.close()


def _q(values: list[float], q: float) -> float:
    """The linear-interpolation quantile (as DuckDB's quantile_cont), computed here."""
    xs = sorted(values)
    at = (len(xs) - 1) * q
    lo = int(at)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def test_the_overview_figures_equal_the_views_rows_counted_here(filled):
    got = overview_data(filled)
    rows = lambda q: filled.sql_arrow(q).to_pylist()  # noqa: E731
    days = Counter(r["t"].strftime("%Y-%m-%d") for r in rows("SELECT created_at AS t FROM messages"))
    assert [(r["day"], r["messages"]) for r in got["messages_by_day"]] == sorted(days.items())
    assert days["2026-03-04"] == 3  # the three u2 messages on their own day
    first = Counter(
        r["t"].strftime("%Y-%m-%d") for r in rows("SELECT min(created_at) AS t FROM messages GROUP BY session_id")
    )
    assert [(r["day"], r["sessions"]) for r in got["sessions_by_day"]] == sorted(first.items())

    runs = rows("SELECT model, tokens_in, tokens_out, cost_usd FROM runs")
    assert len(runs) == 2
    by_model = {}
    for r in runs:
        m = by_model.setdefault(r["model"], {"runs": 0, "tokens_in": 0, "tokens_out": 0})
        m["runs"] += 1
        m["tokens_in"] += r["tokens_in"] or 0
        m["tokens_out"] += r["tokens_out"] or 0
    assert {r["model"]: {k: r[k] for k in ("runs", "tokens_in", "tokens_out")} for r in got["models"]} == by_model
    assert all(r["cost_usd"] is None and r["unpriced"] == r["runs"] for r in got["models"])  # unpriced: unknown

    calls = rows("SELECT tool_name, is_error, latency_s FROM tool_calls")
    assert sorted((c["tool_name"], c["is_error"]) for c in calls) == [("broken", True), ("listing", False)]
    tools = {r["tool_name"]: (r["calls"], r["answered"], r["errors"], r["error_rate"]) for r in got["tools"]}
    assert tools == {"broken": (1, 1, 1, 1.0), "listing": (1, 1, 0, 0.0)}
    turns = [r["latency_s"] for r in rows("SELECT latency_s FROM turns") if r["latency_s"] is not None]
    waits = [c["latency_s"] for c in calls if c["latency_s"] is not None]
    assert len(turns) == 2 and len(waits) == 2
    latency = {r["what"]: r for r in got["latency"]}
    for what, values in (("turn", turns), ("tool", waits)):
        assert latency[what]["n"] == len(values)
        assert latency[what]["p50"] == pytest.approx(statistics.median(values))
        assert latency[what]["p95"] == pytest.approx(_q(values, 0.95))

    labels = filled.labels()
    tags = Counter((lab.tag, lab.source) for lab in labels)
    assert tags == {("good", "human"): 3, ("terse", "code"): 1}
    assert {(r["tag"], r["source"]): r["labels"] for r in got["tags"]} == tags
    ratings = Counter(lab.rating for lab in labels if lab.rating is not None)
    assert [(r["rating"], r["labels"]) for r in got["ratings"]] == sorted(ratings.items())
    assert got["totals"] == {
        "sessions": len(filled.list_sessions()),
        "messages": sum(days.values()),
        "runs": 2,
        "tool_calls": 2,
        "labels": 4,
    }
    # one session's figures: its own alone
    one = overview_data(filled, ["chat2"])
    assert one["totals"]["sessions"] == 1 and one["totals"]["messages"] == 3 and one["tools"] == []
    assert [(r["day"], r["sessions"]) for r in one["sessions_by_day"]] == [("2026-03-02", 1)]


@pytest.mark.slow
def test_the_overview_plots_draw_its_figures(filled):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    data = overview_data(filled)
    fig = sk.plot.overview(filled)  # one panel per plot below, from its own overview_data
    assert isinstance(fig, Figure) and sum(a.axison for a in fig.axes) >= 7
    tool_panel = next(a for a in fig.axes if a.get_title().startswith("tool errors"))
    assert [p.get_width() for p in tool_panel.patches][::-1] == [r["error_rate"] for r in data["tools"]]
    ax = sk.plot.tool_errors(filled, data=data)
    rates = [p.get_width() for p in ax.patches][::-1]  # drawn bottom-up
    assert rates == [r["error_rate"] for r in data["tools"]]
    ax = sk.plot.messages_over_time(filled, data=data)
    assert [p.get_height() for p in ax.patches] == [r["messages"] for r in data["messages_by_day"]]
    ax = sk.plot.latency(filled, data=data)
    heights = [p.get_height() for p in ax.patches]
    assert heights == [r["p50"] for r in data["latency"]] + [r["p95"] for r in data["latency"]]
    ax = sk.plot.label_distribution(filled, data=data)
    assert sum(p.get_width() for p in ax.patches) == data["totals"]["labels"]
    ax = sk.plot.rating_distribution(filled.session("chat0"))
    assert [p.get_height() for p in ax.patches] == [1]  # chat0 holds one rated label
    with pytest.raises(TypeError):
        sk.plot.latency("not a store")
    with pytest.raises(ValueError):
        sk.plot.tool_errors(filled, top=0)
    plt.close("all")
