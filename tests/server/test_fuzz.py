"""Fuzzing every operation of /openapi.json with schemathesis: no 500s, no unauthenticated success.

Every check schemathesis has runs on every answer (status codes, content types,
headers and bodies against the document, negative data refused, positive data
accepted...): 0 server errors and 0 mismatches with the document. One setting: a
plain HTTP request to the WebSocket route, however well formed, is answered ``426
Upgrade Required`` (what the document says; ``404`` for an unknown session, as on
every route), so those are the answers the positive-data check expects there.
Bounded (a fixed number of examples per operation, no example database) and on
loopback only. With the token, the event stream is fuzzed before any session exists
(unknown sessions, invalid resume points: answers that end); an open stream never
ends, which is what it is for (tests/server/test_events.py covers those).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

try:
    import schemathesis
except ImportError:  # a dev dependency: CI must have it, a partial install skips
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip("schemathesis is not installed", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import CHECKS, load_all_checks  # noqa: E402
from schemathesis.config import SchemathesisConfig  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

from live_server import AUTH, TOKEN, echo_agent  # noqa: E402

pytestmark = pytest.mark.slow  # a live server per engine and 25 generated requests per operation

EXAMPLES = 25
SKIP = {"streamEvents"}
load_all_checks()
ALL_CHECKS = CHECKS.get_all()  # every check schemathesis has, named here rather than left to its defaults
CONFIG = {"operations": [{"include-operation-id": "websocket",
                          "checks": {"positive_data_acceptance": {"expected-statuses": ["426", "404"]}}}]}


def _operations(url: str, skip=SKIP):
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=SchemathesisConfig.from_dict(CONFIG))
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.definition.raw.get("operationId") not in skip:
            ops.append(op)
    return ops


def _bounded(test):
    return settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )(test)


def _fuzz(strategy, name: str, client, url: str, statuses: Counter, *, session: bool = True):
    """A bounded hypothesis test: each generated request gets a conforming answer, never a 5xx."""

    @_bounded
    @given(case=strategy)
    def check(case):
        if session:
            client.post("/sessions", json={"sessionId": "fuzz"})  # back, if an example deleted it
        response = case.call_and_validate(base_url=url, headers=dict(AUTH), timeout=10, checks=ALL_CHECKS)
        statuses[(name, response.status_code)] += 1
        assert response.status_code < 500

    return check


def _refused(strategy, url: str, wrong: dict):
    """A bounded hypothesis test: without the token (or with a wrong one) every request gets 401."""

    @_bounded
    @given(case=strategy)
    def check(case):
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        for headers in ({}, wrong):
            response = case.call(base_url=url, headers=headers, timeout=10)
            assert response.status_code == 401, (case.method, case.formatted_path, response.text)
            assert response.json() == {"error": "unauthorized"}

    return check


def ops_ids(ops) -> list[str]:
    return [op.definition.raw["operationId"] for op in ops]


def test_fuzzing_every_operation_with_the_token_finds_no_server_error(serve, store):
    live = serve(echo_agent(n=10_000), store, max_concurrent_runs=1_000, max_body_bytes=50_000)
    ops = _operations(live.url)
    # (schemathesis leaves out the document's own path)
    assert {op.definition.raw["operationId"] for op in ops} >= {
        "listSessions", "createSession", "getSession", "deleteSession", "sendMessage", "websocket"}
    statuses: Counter = Counter()
    with live.client() as client:
        # the event stream first, while no session exists: every answer ends (404, or 400 for a bad resume point)
        for op in _operations(live.url, skip=set(ops_ids(ops))):
            assert op.definition.raw["operationId"] == "streamEvents"
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _fuzz(op.as_strategy(generation_mode=mode), "streamEvents", client, live.url, statuses,
                      session=False)()
        assert statuses[("streamEvents", 404)] > 0 and statuses[("streamEvents", 200)] == 0, statuses
        for op in ops:
            name = op.definition.raw["operationId"]
            has_id = "{sessionId}" in op.path
            # random ids (almost always unknown), then an existing session so the 2xx answers are checked too
            for mode, fixed in [(GenerationMode.POSITIVE, None), (GenerationMode.NEGATIVE, None),
                                (GenerationMode.POSITIVE, "fuzz")]:
                if fixed and not has_id:
                    continue
                strategy = op.as_strategy(generation_mode=mode,
                                          path_parameters={"sessionId": fixed} if fixed else None)
                _fuzz(strategy, name, client, live.url, statuses)()
    # the fuzzing reached the successful answers, not only the refusals
    for expected in [("listSessions", 200), ("createSession", 201), ("getSession", 200), ("deleteSession", 202),
                     ("sendMessage", 202), ("websocket", 426)]:
        assert statuses[expected] > 0, (expected, statuses)


def test_without_the_token_every_operation_is_refused(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:  # a real session, so guessed ids can hit something
        c.post("/sessions", json={"sessionId": "0"})
    wrong = {"Authorization": "Bearer " + "0" * len(TOKEN)}
    ops = _operations(live.url, skip=())  # the event stream too: refused before it starts
    assert "streamEvents" in {op.definition.raw["operationId"] for op in ops}
    for op in ops:
        _refused(op.as_strategy(), live.url, wrong)()
    with live.client() as c:
        assert c.get("/sessions/0").json()["messages"] == []
