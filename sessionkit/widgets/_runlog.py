"""Run events folded into what a RunView shows (docs/agents.md events in, plain dicts out).

The same fold runs in Python (the widget's state, the static snapshot, tests)
and in the front end (``static/run_view.js`` mirrors :func:`apply_event`), so
a view rebuilt from stored events looks exactly like the one watched live.
No ipywidgets here.
"""

from __future__ import annotations

import copy
from typing import Literal

from ._payloads import RunState, RunSummary, RunViewState, TurnState, TurnUsage, UsageTotals

__all__ = ["new_state", "apply_event", "fold", "coalesce", "empty_usage"]


def empty_usage() -> UsageTotals:
    return {"in": 0, "out": 0, "cache_read": 0, "cache_write": 0, "cost_usd": 0.0, "calls": 0, "unpriced": 0}


def new_state() -> RunViewState:
    """An empty view: no runs, no usage, ``last_seq`` -1."""
    return {"runs": [], "usage": empty_usage(), "last_seq": -1}


#: The token counts a usage event carries (summed as they come).
_COUNTS: tuple[Literal["in", "out", "cache_read", "cache_write"], ...] = ("in", "out", "cache_read", "cache_write")


def _add_usage(total: UsageTotals, ev: dict) -> None:
    for key in _COUNTS:
        value = ev.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] += int(value)
    total["calls"] += 1
    cost = ev.get("cost_usd")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool):
        total["cost_usd"] += float(cost)
    else:
        total["unpriced"] += 1


def _run(state: RunViewState, ev: dict) -> RunState:
    run_id = ev.get("run_id")
    for run in reversed(state["runs"]):
        if run["run_id"] == run_id:
            return run
    run = {
        "run_id": run_id,
        "input": None,
        "status": "running",
        "error": None,
        "started": ev.get("ts"),
        "ended": None,
        "turns": [],
        "usage": empty_usage(),
    }
    state["runs"].append(run)
    return run


def _turn(run: RunState, ev: dict | None = None) -> TurnState:
    if not run["turns"] or (ev is not None and run["turns"][-1]["done"]):
        run["turns"].append(
            {
                "turn": len(run["turns"]) + 1,
                "input": None,
                "mode": None,
                "text": "",
                "reasoning": "",
                "tools": [],
                "usage": None,
                "stop_reason": None,
                "done": False,
            }
        )
    return run["turns"][-1]


def apply_event(state: RunViewState, ev: dict) -> RunViewState:
    """Fold one event into ``state`` (in place) and return it. Unknown kinds are ignored."""
    kind = ev.get("kind")
    seq = ev.get("seq")
    if isinstance(seq, int):
        state["last_seq"] = max(state["last_seq"], seq)
    if not isinstance(kind, str):
        return state
    run = _run(state, ev)
    if kind == "run.start":
        run["input"] = ev.get("input")
        run["started"] = ev.get("ts")
    elif kind == "turn.start":
        run["turns"].append(
            {
                "turn": ev.get("turn") or len(run["turns"]) + 1,
                "input": ev.get("input"),
                "mode": ev.get("mode"),
                "text": "",
                "reasoning": "",
                "tools": [],
                "usage": None,
                "stop_reason": None,
                "done": False,
            }
        )
    elif kind == "delta.text":
        _turn(run, ev)["text"] += str(ev.get("text") or "")
    elif kind == "delta.reasoning":
        _turn(run, ev)["reasoning"] += str(ev.get("text") or "")
    elif kind == "tool.call":
        _turn(run, ev)["tools"].append(
            {
                "id": ev.get("tool_call_id"),
                "name": ev.get("name"),
                "input": ev.get("input"),
                "output": None,
                "error": None,
                "done": False,
            }
        )
    elif kind == "tool.result":
        turn = _turn(run)
        for tool in reversed(turn["tools"]):
            if tool["id"] == ev.get("tool_call_id"):
                break
        else:
            tool = {
                "id": ev.get("tool_call_id"),
                "name": None,
                "input": None,
                "output": None,
                "error": None,
                "done": False,
            }
            turn["tools"].append(tool)
        tool["output"] = ev.get("output")
        tool["error"] = ev.get("error")
        tool["done"] = True
    elif kind == "usage":
        usage: TurnUsage = {
            "in": ev.get("in"),
            "out": ev.get("out"),
            "cache_read": ev.get("cache_read"),
            "cache_write": ev.get("cache_write"),
            "cost_usd": ev.get("cost_usd"),
            "model": ev.get("model"),
        }
        _turn(run)["usage"] = usage
        _add_usage(run["usage"], ev)
        _add_usage(state["usage"], ev)
    elif kind == "turn.end":
        turn = _turn(run)
        turn["stop_reason"] = ev.get("stop_reason")
        turn["done"] = True
    elif kind == "run.end":
        run["status"] = ev.get("status") or "completed"
        run["error"] = ev.get("error")
        run["ended"] = ev.get("ts")
    return state


def fold(events: list[dict], state: RunViewState | None = None) -> RunViewState:
    """Fold a list of events into a fresh (or the given) state."""
    state = new_state() if state is None else state
    for ev in events:
        apply_event(state, ev)
    return state


def coalesce(events: list[dict]) -> list[dict]:
    """Merge runs of consecutive text deltas of one run into single events (batching).

    The merged event keeps the last ``seq`` and ``ts`` and the joined ``text``;
    folding the result gives the same state as folding the input.
    """
    out: list[dict] = []
    for ev in events:
        prev = out[-1] if out else None
        if (
            prev is not None
            and ev.get("kind") in ("delta.text", "delta.reasoning")
            and prev.get("kind") == ev.get("kind")
            and prev.get("run_id") == ev.get("run_id")
        ):
            merged = dict(prev)
            merged["text"] = str(prev.get("text") or "") + str(ev.get("text") or "")
            for key in ("seq", "ts"):
                if key in ev:
                    merged[key] = ev[key]
            out[-1] = merged
        else:
            out.append(copy.deepcopy(ev) if isinstance(ev, dict) else ev)
    return out


def summary(state: RunViewState) -> RunSummary:
    """The few numbers a header shows: runs, turns, status, usage."""
    runs = state["runs"]
    last = runs[-1] if runs else None
    return {
        "runs": len(runs),
        "turns": sum(len(r["turns"]) for r in runs),
        "status": last["status"] if last else "idle",
        "run_id": last["run_id"] if last else None,
        "usage": state["usage"].copy(),
    }
