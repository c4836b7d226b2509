"""The tree views (``paths``, ``turns``, ``tool_calls``) against a Python reference, on every engine.

The reference reads the store through its public API only (sessions, tree nodes, messages,
events) and walks the trees in Python, following the definitions of docs/analysis.md; the
views compute the same in SQL. Hypothesis draws write sequences (appends, regenerations,
tool calls answered in place or by a later ``tool`` message, deletes, compactions, runs with
events); the real data (tau-bench, OASST, HH), SWE-agent trajectories and scripted agent runs
are compared too.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessionkit as sk
from sessionkit.parts import is_tool_part, tool_name

DATA = Path(__file__).resolve().parent.parent / "data"
RESULT_STATES = ("output-available", "output-error")


# ---------------------------------------------------------------------------
# The reference


def _number(value):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sum(values):
    known = [v for v in values if v is not None]
    return round(sum(known), 9) if known else None


def _ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None


def _span(start, end):
    return round((end - start).total_seconds(), 6) if start is not None and end is not None else None


class Reference:
    """The three views of some sessions, computed in Python from the public read API."""

    def __init__(self, store, session_ids):
        self.paths, self.turns, self.tool_calls = [], [], []
        events = [e for sid in session_ids for e in store.events(sid)]
        self.events = events
        for sid in session_ids:
            self._session(store.session(sid))

    def _run_span(self, run_id, start_kind, end_kind, call_id=None):
        def when(kind, pick):
            times = [
                _ts(e.get("ts"))
                for e in self.events
                if e.get("run_id") == run_id
                and e.get("kind") == kind
                and (call_id is None or e.get("tool_call_id") == call_id)
            ]
            times = [t for t in times if t is not None]
            return pick(times) if times else None

        if run_id is None:
            return None
        return _span(when(start_kind, min), when(end_kind, max if call_id is None else min))

    def _session(self, session):
        nodes = sorted(session.tree().nodes, key=lambda n: n.seq)
        if not nodes:
            return
        sid = session.session_id
        messages = session.get_many([n.id for n in nodes])
        by_id = {n.id: n for n in nodes}
        kids: dict[str, list] = {}
        for n in nodes:
            if n.parent_id in by_id:
                kids.setdefault(n.parent_id, []).append(n)
        meta = {n.id: messages[n.id].get("metadata") or {} for n in nodes}
        cost = {
            i: _number((m.get("usage") or {}).get("cost_usd")) if isinstance(m.get("usage"), dict) else None
            for i, m in meta.items()
        }
        run = {i: m.get("run_id") if isinstance(m.get("run_id"), str) else None for i, m in meta.items()}
        tools = {
            n.id: [tool_name(p) for p in messages[n.id]["parts"] if is_tool_part(p) and tool_name(p)] for n in nodes
        }

        def up(n):  # root .. n
            chain = [n]
            while chain[-1].parent_id in by_id:
                chain.append(by_id[chain[-1].parent_id])
            return chain[::-1]

        def newest_below(n):
            best, todo = n, [n]
            while todo:
                x = todo.pop()
                best = max(best, x, key=lambda y: y.seq)
                todo.extend(kids.get(x.id, ()))
            return best

        def way_down(n):  # the messages below n on the way to the newest leaf below it
            path = up(newest_below(n))
            return path[path.index(n) + 1 :]

        latest = nodes[-1]
        for leaf in (n for n in nodes if n.id not in kids):
            path = up(leaf)
            self.paths.append(
                {
                    "session_id": sid,
                    "leaf_id": leaf.id,
                    "depth": leaf.depth,
                    "message_count": len(path),
                    "tokens": sum(n.tokens for n in path),
                    "cost_usd": _sum(cost[n.id] for n in path),
                    "is_latest": leaf.id == latest.id,
                    "regenerations": sum(1 for n in path if n.parent_id in by_id and len(kids[n.parent_id]) >= 2),
                    "branch_points": sum(1 for n in path if len(kids.get(n.id, ())) >= 2),
                }
            )
        for u in (n for n in nodes if n.role == "user"):
            stretch = list(itertools.takewhile(lambda n: n.role != "user", way_down(u)))
            replies = [n for n in stretch if n.role == "assistant"]
            self.turns.append(
                {
                    "session_id": sid,
                    "user_id": u.id,
                    "reply_id": replies[-1].id if replies else None,
                    "message_count": len(stretch),
                    "tool_calls": sum(len(tools[n.id]) for n in stretch if n.role != "tool"),
                    "tool_names": [t for n in stretch if n.role != "tool" for t in tools[n.id]],
                    "tokens": u.tokens + sum(n.tokens for n in stretch),
                    "cost_usd": _sum(cost[n.id] for n in stretch),
                    "run_id": run[u.id],
                    "latency_s": self._run_span(run[u.id], "run.start", "run.end"),
                    "regenerated": len(kids.get(u.id, ())) >= 2,
                }
            )
        parts = {n.id: list(enumerate(messages[n.id]["parts"])) for n in nodes}

        def tool_parts(n):
            return [(i, p) for i, p in parts[n.id] if is_tool_part(p) and isinstance(p.get("toolCallId"), str)]

        for c in nodes:
            if c.role == "tool":
                continue
            for _, part in tool_parts(c):
                cid = part["toolCallId"]
                result = None
                if part.get("state") in RESULT_STATES:
                    result = (c, part)
                else:
                    for r in nodes:
                        if r.seq <= c.seq or c not in up(r):
                            continue
                        found = [
                            p for _, p in tool_parts(r) if p["toolCallId"] == cid and p.get("state") in RESULT_STATES
                        ]
                        if found:
                            result = (r, found[0])
                            break
                row = {
                    "session_id": sid,
                    "call_message_id": c.id,
                    "result_message_id": None,
                    "tool_call_id": cid,
                    "tool_name": tool_name(part),
                    "arguments": part.get("input"),
                    "result": None,
                    "is_error": None,
                    "latency_s": self._run_span(run[c.id], "tool.call", "tool.result", cid),
                    "run_id": run[c.id],
                    "next_user_id": None,
                }
                if result is not None:
                    r, rp = result
                    error = rp["state"] == "output-error"
                    text = rp.get("errorText") if error else rp.get("output")
                    # a result reading "Error: ..." is an error too (docs/analysis.md)
                    said = text if isinstance(text, str) else json.dumps(text)
                    error = error or bool(re.match(r"\s*(Error|ERROR|error)\s*:", said or ""))
                    following = [n for n in way_down(r) if n.role == "user"]
                    row.update(
                        result_message_id=r.id,
                        result=text,
                        is_error=error,
                        next_user_id=following[0].id if following else None,
                    )
                self.tool_calls.append(row)


def _clean(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, float):
        return round(value, 6)
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _rows(store, view, session_ids):
    table = store.sql_arrow(f"SELECT * FROM {view}", session_ids=session_ids)
    return [{k: _clean(v) for k, v in row.items()} for row in table.to_pylist()]


def _json_value(text):
    return None if text is None else json.loads(text)


def assert_tree_views_match(store, session_ids):
    """Each tree view of ``session_ids`` equals the reference; returns the reference."""
    ref = Reference(store, session_ids)
    keys = {
        "paths": ("session_id", "leaf_id"),
        "turns": ("session_id", "user_id"),
        "tool_calls": ("session_id", "call_message_id", "tool_call_id"),
    }
    for view, key in keys.items():
        got = sorted(_rows(store, view, session_ids), key=lambda r: tuple(r[k] for k in key))
        want = sorted(
            ({k: _clean(v) for k, v in r.items()} for r in getattr(ref, view)),
            key=lambda r: tuple(r[k] for k in key),
        )
        if view == "tool_calls":  # JSON arrives as JSON text: compared as values
            for row, expected in zip(got, want):
                row["arguments"] = _json_value(row["arguments"])
                if row["result"] is not None and not isinstance(expected["result"], str):
                    row["result"] = json.loads(row["result"])
        assert got == want, view
    return ref


# ---------------------------------------------------------------------------
# Random write sequences

_appends = st.tuples(
    st.just("append"),
    st.one_of(st.none(), st.integers(0, 30)),  # the parent: the latest leaf, or an earlier message
    st.sampled_from(["user", "assistant", "assistant", "system"]),
    st.sampled_from(["none", "none", "done", "failed", "pending"]),  # a tool call in the message
    st.one_of(st.none(), st.sampled_from([0.25, 1, 0.5])),  # its cost
)
_steps = st.lists(
    st.one_of(
        _appends,
        _appends,
        st.tuples(st.just("result"), st.integers(0, 10), st.booleans(), st.booleans()),
        st.tuples(st.just("delete_leaf"), st.integers(0, 10)),
        st.just(("compact",)),
        st.just(("run",)),
    ),
    min_size=1,
    max_size=14,
)


class Writer:
    """Applies drawn steps to one session; tool calls and runs leave their events."""

    def __init__(self, store, sid):
        self.store, self.sid = store, sid
        self.session = store.session(sid)
        self.n = 0
        self.tick = 0
        self.run_id = None
        self.pending: list[str] = []

    def ts(self):
        self.tick += 1
        return f"2024-05-01T00:{self.tick // 60:02d}:{self.tick % 60:02d}.{self.tick * 7 % 1000:03d}Z"

    def ids(self):
        return [n.id for n in sorted(self.session.tree().nodes, key=lambda n: n.seq)]

    def event(self, kind, **fields):
        self.store.run_log.append_events(self.sid, [{"run_id": self.run_id, "kind": kind, "ts": self.ts(), **fields}])

    def apply(self, step):
        kind = step[0]
        if kind == "append":
            _, parent, role, tool, cost = step
            self.n += 1
            mid = f"{self.sid}-m{self.n}"
            message = {"id": mid, "role": role, "parts": [{"type": "text", "text": f"words {self.n}"}]}
            metadata = {}
            if cost is not None:
                metadata["usage"] = {"cost_usd": cost}
            if self.run_id is not None:
                metadata["run_id"] = self.run_id
            if metadata:
                message["metadata"] = metadata
            if tool != "none":
                cid = f"{mid}-call"
                part = {"type": f"tool-t{self.n % 3}", "toolCallId": cid, "input": {"n": self.n, "x": [1, "é"]}}
                if tool == "done":
                    part.update(state="output-available", output={"rows": self.n} if self.n % 2 else f"out {self.n}")
                elif tool == "failed":
                    part.update(state="output-error", errorText=f"boom {self.n}")
                else:
                    part["state"] = "input-available"
                    self.pending.append(cid)
                message["parts"].append(part)
                if self.run_id is not None:
                    self.event("tool.call", tool_call_id=cid, name=part["type"][5:], input=part["input"])
                    if tool != "pending":
                        self.event("tool.result", tool_call_id=cid, output="x", error=None)
            ids = self.ids()
            where = sk.LATEST if parent is None or not ids else ids[parent % len(ids)]
            self.session.append(message, parent_id=where)
        elif kind == "result" and self.pending:
            _, pick, failed, as_dict = step
            cid = self.pending[pick % len(self.pending)]
            self.n += 1
            part = {"type": "tool-t0", "toolCallId": cid}
            if failed:
                part.update(state="output-error", errorText="late failure")
            else:
                part.update(state="output-available", output={"late": True} if as_dict else "late")
            self.session.append({"id": f"{self.sid}-m{self.n}", "role": "tool", "parts": [part]})
            if self.run_id is not None:
                self.event("tool.result", tool_call_id=cid, output="late", error=None)
        elif kind == "delete_leaf":
            nodes = self.session.tree().nodes
            parents = {n.parent_id for n in nodes}
            leaves = [n.id for n in nodes if n.id not in parents]
            if leaves:
                self.session.delete(leaves[step[1] % len(leaves)])
        elif kind == "compact":
            path = [n.id for n in self.session.tree().path()]
            if len(path) >= 3:
                self.n += 1
                self.session.import_compaction(
                    sk.Compaction(f"c{self.n}", path[0], path[-2], "summary", "2024-05-01T00:00:00.000Z", 50, 5)
                )
        elif kind == "run":
            if self.run_id is not None:
                self.event("run.end", status="completed")
                self.store.run_log.end(self.run_id, status="completed")
            self.n += 1
            self.run_id = f"{self.sid}-r{self.n}"
            self.store.run_log.begin(self.sid, self.run_id, "go")
            self.event("run.start", input="go")


_counter = itertools.count()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@given(steps=_steps)
def test_tree_views_equal_the_reference_for_random_writes(store, steps):
    """Appends anywhere (regenerations), tool calls answered in place, later or never,
    deletes, compactions and runs with events: each view equals the Python reference."""
    sid = f"h{next(_counter)}"
    writer = Writer(store, sid)
    for step in steps:
        writer.apply(step)
    assert_tree_views_match(store, [sid])


def test_tree_views_of_a_known_conversation(store):
    """A small hand-made tree whose rows are written out here, derived from its drawing:

    u1 ─ a1 (tool call c1, answered later by t1) ─ t1 ─ a3 ─ u2
       └ a2 (a regeneration: the newest reply to u1 is on the other branch)"""
    s = store.session("k")
    s.append({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "find x"}]})
    call = {"type": "tool-search", "toolCallId": "c1", "state": "input-available", "input": {"q": "x"}}
    s.append({"id": "a1", "role": "assistant", "parts": [call], "metadata": {"usage": {"cost_usd": 0.5}}})
    s.append({"id": "a2", "role": "assistant", "parts": [{"type": "text", "text": "no"}]}, parent_id="u1")
    result = {"type": "tool-search", "toolCallId": "c1", "state": "output-error", "errorText": "down"}
    s.append({"id": "t1", "role": "tool", "parts": [result]}, parent_id="a1")
    s.append({"id": "a3", "role": "assistant", "parts": [{"type": "text", "text": "sorry"}]})
    s.append({"id": "u2", "role": "user", "parts": [{"type": "text", "text": "ok"}]})
    paths = store.sql_arrow(
        "SELECT leaf_id, depth, is_latest, regenerations, branch_points, cost_usd FROM paths ORDER BY leaf_id"
    ).to_pylist()
    assert paths == [
        {"leaf_id": "a2", "depth": 1, "is_latest": False, "regenerations": 1, "branch_points": 1, "cost_usd": None},
        {"leaf_id": "u2", "depth": 4, "is_latest": True, "regenerations": 1, "branch_points": 1, "cost_usd": 0.5},
    ]
    turns = store.sql_arrow(
        "SELECT user_id, reply_id, message_count, tool_calls, regenerated FROM turns ORDER BY user_id"
    ).to_pylist()
    assert turns == [
        # a1, t1 and a3; one call (t1 holds its result)
        {"user_id": "u1", "reply_id": "a3", "message_count": 3, "tool_calls": 1, "regenerated": True},
        {"user_id": "u2", "reply_id": None, "message_count": 0, "tool_calls": 0, "regenerated": False},
    ]
    calls = store.sql("SELECT * FROM tool_calls")
    assert calls[["call_message_id", "result_message_id", "tool_name", "result", "is_error", "next_user_id"]].to_dict(
        "records"
    ) == [
        {
            "call_message_id": "a1",
            "result_message_id": "t1",
            "tool_name": "search",
            "result": "down",
            "is_error": True,
            "next_user_id": "u2",
        }
    ]
    assert json.loads(calls["arguments"][0]) == {"q": "x"}


def test_tree_views_of_real_data(real):
    """The imported OASST trees (real branching), tau-bench trajectories (tool calls with
    their results) and HH pairs (a branch at the last reply) equal the reference."""
    store = real["store"]
    ids = sorted(info.id for info in store.list_sessions())
    # every kind of tree, a few of each (the reference reads session by session)
    picked = [i for i in ids if i.startswith("tau-")][:15] + [i for i in ids if not i.startswith("tau-")][:40]
    ref = assert_tree_views_match(store, picked)
    assert ref.tool_calls and any(r["regenerations"] for r in ref.paths) and any(t["regenerated"] for t in ref.turns)


def test_tree_views_of_swe_agent_trajectories_and_agent_runs(store):
    """SWE-agent trajectories and scripted agent runs (tool calls, a failing tool, a
    regeneration): the runs' events give the latencies, which equal the reference's."""
    from sessionkit.testing import ScriptedModel

    sk.io.import_swe_agent(store, DATA / "swe_agent")

    def add(a: int, b: int) -> int:
        """Adds two numbers."""
        return a + b

    def broken(x: str) -> str:
        """Always fails."""
        raise RuntimeError("broken tool")

    model = ScriptedModel(
        [
            {
                "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}],
                "usage": {"in": 5, "out": 2, "cost_usd": 0.01},
            },
            {"text": "3", "usage": {"in": 6, "out": 1, "cost_usd": 0.02}},
            {"tool_calls": [{"name": "broken", "arguments": {"x": "y"}}]},
            "it failed",
            "3, again",
        ]
    )
    agent = sk.Agent("calc", "You add numbers.", model, tools=[add, broken])
    session = store.session("agent")
    agent.run_sync("1 + 2?", session=session)
    second = agent.run_sync("break it", session=session)
    assert second.status == "completed"
    first_reply = [n.id for n in session.tree().nodes if n.role == "assistant"][1]
    agent.regenerate_sync(session, first_reply)
    ids = [info.id for info in store.list_sessions()]
    ref = assert_tree_views_match(store, ids)
    mine = [r for r in ref.tool_calls if r["session_id"] == "agent"]
    assert [r["is_error"] for r in mine] == [False, True]
    assert all(r["latency_s"] is not None for r in mine)
    assert any(r["session_id"] != "agent" for r in ref.tool_calls)  # the trajectories' calls
    assert any(t["latency_s"] is not None for t in ref.turns)


def test_queries_that_do_not_name_the_tree_views_pay_nothing_for_them(tmp_path):
    """On a SQLite file (an analysis cache beside it): a query of ``messages`` defines no tree
    view and copies no message JSON; the first query naming ``tool_calls`` copies it."""
    with sk.open_store(str(tmp_path / "lazy.db")) as store:
        s = store.session("s")
        s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]})
        call = {"type": "tool-f", "toolCallId": "c", "state": "output-available", "input": {}, "output": "ok"}
        s.append({"id": "a", "role": "assistant", "parts": [call]})
        assert store.sql("SELECT count(*) AS n, max(text) AS t FROM messages")["n"][0] == 2
        cache = store._engine._analysis
        assert not cache.lazy["content"] and not cache.views["views"] & {"paths", "turns", "tool_calls"}
        assert store.sql("SELECT count(*) AS n FROM turns")["n"][0] == 1
        assert not cache.lazy["content"]  # turns reads no message JSON
        assert store.sql("SELECT result FROM tool_calls")["result"].tolist() == ["ok"]
        assert cache.lazy["content"]


def _big_call(i, size):
    output = f"{i}:" + "x" * size
    return {
        "id": f"a{i}",
        "role": "assistant",
        "parts": [
            {"type": "tool-bash", "toolCallId": f"c{i}", "state": "output-available", "input": {}, "output": output}
        ],
    }


def test_tool_calls_holds_the_calls_of_messages_past_a_mebibyte(store):
    """A message larger than a stored row holds (its JSON continues in chunk rows) keeps its
    tool calls in the view: exactly the large tool outputs of coding agents. Read before and
    after the view was first queried (an analysis copy then reads the new rows only)."""
    s = store.session("s")
    s.append({"id": "u", "role": "user", "parts": [{"type": "text", "text": "go"}]})
    s.append(_big_call(0, 100))
    s.append(_big_call(1, 3 << 20))
    query = "SELECT tool_call_id, length(result) AS n FROM tool_calls ORDER BY tool_call_id"
    assert store.sql(query).values.tolist() == [["c0", 102], ["c1", (3 << 20) + 2]]
    s.append(_big_call(2, (1 << 20) + 7), parent_id="a1")
    assert store.sql(query).values.tolist() == [["c0", 102], ["c1", (3 << 20) + 2], ["c2", (1 << 20) + 9]]
    assert store.sql_arrow("SELECT count(*) AS n FROM tool_calls", session_ids=["s"]).column("n").to_pylist() == [3]


def test_is_error_of_imported_results_reading_error(new_store):
    """tau-bench's tools answer a failed call with a result text "Error: ..." (the chat format
    has no error flag): those calls are errors in tool_calls, the others are not."""
    import gzip

    store = new_store("sqlite", memory=True)
    with gzip.open(DATA / "gpt-4o-airline.json.gz", "rt", encoding="utf-8") as fh:
        chats = json.load(fh)
    for i, chat in enumerate(chats):
        sk.io.import_openai(store.session(f"tau-{i}"), chat["traj"], progress=False)
    outputs = [
        p.get("output")
        for c in chats
        for m in c["traj"]
        if m.get("role") == "tool"
        for p in [{"output": m.get("content")}]
    ]
    failed = sum(1 for o in outputs if isinstance(o, str) and o.startswith("Error:"))
    counts = store.sql("SELECT is_error, count(*) AS n FROM tool_calls GROUP BY ALL ORDER BY is_error")
    assert dict(zip(counts["is_error"], counts["n"])) == {False: len(outputs) - failed, True: failed}
    assert failed == 73


def test_turns_reads_each_message_once_when_every_message_was_regenerated(new_store):
    """turns reads no root-to-leaf path: in a conversation regenerated at every message (as
    many leaves as messages, half of them as deep as the conversation) its walk up from the
    leaves makes one row per message, not one per (leaf, message above it)."""
    import duckdb

    from sessionkit.store.sql.tree_views import tree_view_sql

    store = new_store("sqlite", memory=True)
    s, parent = store.session("s"), None
    for i in range(200):
        role = "user" if i % 2 == 0 else "assistant"
        s.append({"id": f"old{i}", "role": role, "parts": [{"type": "text", "text": "first try"}]}, parent_id=parent)
        s.append({"id": f"new{i}", "role": role, "parts": [{"type": "text", "text": "again"}]}, parent_id=parent)
        parent = f"new{i}"
    rows = store.sql(
        "SELECT seq, session_id, id, parent_id, depth, role, tokens, NULL::VARCHAR AS tool_names,"
        " NULL::VARCHAR AS metadata FROM messages"
    )
    con = duckdb.connect()
    con.register("msgs", rows)
    con.execute("CREATE TABLE evs (session_id VARCHAR, seq BIGINT, run_id VARCHAR, data VARCHAR)")
    turns = tree_view_sql({"messages": "msgs", "events": "evs"})["turns"]
    ctes = turns[: turns.rindex("SELECT u.session_id")]
    climbed = con.execute(ctes + " SELECT count(*) FROM _tv_climb").fetchone()[0]
    assert climbed == len(rows) == 400
    # and the view is the one the reference computes
    assert store.sql("SELECT count(*) AS n, sum(message_count) AS m FROM turns").values.tolist() == [[200, 100]]
