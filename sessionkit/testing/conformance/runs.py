"""Runs, events and records."""

from __future__ import annotations

import pytest

import sessionkit as sk

from ._common import ISO_MS, msg


class TestRunsEventsRecords:
    """docs/agents.md storage: ``store.run_log`` (``begin``/``end``/``append_events``); ``store.session_records``."""

    def test_runs_are_recorded_from_start_to_end(self, store):
        store.run_log.begin("s", "s.1", "first prompt")
        (run,) = store.runs("s")
        assert (run.run_id, run.session_id, run.status, run.input, run.ended_at) == (
            "s.1",
            "s",
            "running",
            "first prompt",
            None,
        )
        assert ISO_MS.match(run.started_at)
        usage = {"in": 10, "out": 4, "cost_usd": None, "model": "m"}
        store.run_log.end("s.1", status="completed", usage=usage)
        store.run_log.begin("s", "s.2", "second")
        store.run_log.end("s.2", status="failed", error="boom")
        done, failed = store.runs("s")
        assert (done.status, done.error, done.usage) == ("completed", None, usage)
        assert ISO_MS.match(done.ended_at)
        assert (failed.run_id, failed.status, failed.error, failed.usage) == ("s.2", "failed", "boom", None)
        assert store.runs("other") == []
        with pytest.raises(TypeError):
            store.run_log.begin("s", 3, "x")

    def test_a_run_keeps_what_it_was(self, store):
        meta = {"at": "m1", "variant": "terse", "settings": {"temperature": 0.5, "tools": ["a", "b"]}, "é": None}
        store.run_log.begin("s", "s.1", "x", meta=meta)
        store.run_log.begin("s", "s.2", "y")
        store.run_log.end("s.1", status="completed", usage={"in": 1})
        first, second = store.runs("s")
        assert (first.meta, second.meta) == (meta, None)
        assert [(sid, r.meta) for page in store.scan("runs") for sid, r in page] == [("s", meta), ("s", None)]
        bad: list[tuple[object, type[Exception]]] = [
            ({"x": {1, 2}}, TypeError),
            ({"x": float("nan")}, TypeError),
            ("{}", TypeError),
        ]
        bad.append(({"x": "\ud800"}, ValueError))  # a lone surrogate
        for value, kind in bad:
            with pytest.raises(kind, match="meta"):
                store.run_log.begin("s", "s.3", "z", meta=value)
        assert [r.run_id for r in store.runs("s")] == ["s.1", "s.2"]  # nothing of a failed call
        assert store.runs("s")[0].meta == meta

    def test_events_are_numbered_per_session_across_runs(self, store):
        out = store.run_log.append_events(
            "s",
            [
                {"run_id": "s.1", "kind": "run.start", "input": "hi"},
                {"run_id": "s.1", "kind": "run.end", "session_id": "ignored"},
            ],
        )
        more = store.run_log.append_events(
            "s", [{"run_id": "s.2", "kind": "run.start", "v": 1, "ts": "2024-01-01T00:00:00.000Z"}]
        )
        other = store.run_log.append_events("t", [{"kind": "note"}])
        assert [e["seq"] for e in out + more] == [0, 1, 2] and other[0]["seq"] == 0
        assert all(e["session_id"] == "s" and e["v"] == 1 and ISO_MS.match(e["ts"]) for e in out + more)
        assert more[0]["ts"] == "2024-01-01T00:00:00.000Z"
        assert store.events("s") == out + more
        assert store.events("s", after_seq=0) == out[1:] + more
        assert store.events("t") == other
        assert store.run_log.append_events("s", []) == []
        with pytest.raises(TypeError):
            store.run_log.append_events("s", ["not an event"])
        with pytest.raises(TypeError):
            store.run_log.append_events("s", [{"kind": "x", "bad": {1, 2}}])
        assert len(store.events("s")) == 3

    def test_records_sit_beside_a_session_and_go_with_it(self, store):
        store.session("s").append(msg("a"))
        store.session_records.put("s", "queue", [(2, {"text": "b"}), (1, ["a", 1, None, 2.5])])
        store.session_records.put("s", "queue", [(2, "replaced")])
        store.session_records.put("s", "table", [(0, {"n": 0})])
        store.session_records.put("t", "queue", [(1, True)])
        assert store.session_records.get("s", "queue") == [(1, ["a", 1, None, 2.5]), (2, "replaced")]
        assert store.session_records.get("s", "table") == [(0, {"n": 0})]
        assert store.session_records.get("s", "nothing") == []
        assert store.session_records.get("t", "queue") == [(1, True)]
        with pytest.raises(TypeError):
            store.session_records.put("s", "queue", [(3, "ok"), ("4", "not an int")])
        with pytest.raises(TypeError):
            store.session_records.put("s", "queue", [(3, "ok"), (4, {1, 2})])
        assert [n for n, _ in store.session_records.get("s", "queue")] == [1, 2]  # nothing of a failed call
        store.run_log.begin("s", "s.1", "x")
        store.run_log.append_events("s", [{"kind": "k"}])
        store.delete_session("s")
        assert store.session_records.get("s", "queue") == [] and store.session_records.get("s", "table") == []
        assert store.runs("s") == [] and store.events("s") == []
        assert store.session_records.get("t", "queue") == [(1, True)]

    def test_a_session_holding_only_records_or_runs_exists(self, store):
        store.session_records.put("only-records", "k", [(0, "v")])
        store.run_log.begin("only-runs", "r.1", "x")
        store.delete_session("only-records")
        store.delete_session("only-runs")
        assert store.session_records.get("only-records", "k") == [] and store.runs("only-runs") == []
        with pytest.raises(sk.SessionNotFound):
            store.delete_session("only-records")
