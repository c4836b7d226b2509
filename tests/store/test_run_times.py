"""Runs recorded with their own start and end (an imported trace): ``begin_run(started_at=)``,
``end_run(ended_at=)``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest


def test_a_run_keeps_the_times_it_is_given(new_store, engine):
    store = new_store(engine)
    store.run_log.begin("s", "r1", "hi", started_at="2026-03-01T10:00:00.250Z")
    store.run_log.end("r1", status="completed", ended_at=datetime(2026, 3, 1, 10, 0, 2, 750000, tzinfo=UTC))
    (run,) = store.runs("s")
    assert (run.started_at, run.ended_at) == ("2026-03-01T10:00:00.250Z", "2026-03-01T10:00:02.750Z")
    (row,) = store.sql("SELECT epoch(ended_at - started_at) AS d FROM runs").to_dict("records")
    assert row["d"] == pytest.approx(2.5)


@pytest.mark.parametrize("bad", ["yesterday", True, float("nan")])
def test_a_time_that_is_no_time_records_nothing(new_store, bad):
    store = new_store("sqlite")
    with pytest.raises((TypeError, ValueError), match="^started_at: "):
        store.run_log.begin("s", "r1", "hi", started_at=bad)
    assert store.runs("s") == []
    store.run_log.begin("s", "r1", "hi")
    with pytest.raises((TypeError, ValueError), match="^ended_at: "):
        store.run_log.end("r1", status="completed", ended_at=bad)
    assert store.runs("s")[0].status == "running"
