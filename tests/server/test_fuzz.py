"""Fuzzing every operation of /openapi.json with schemathesis: no 500s, no unauthenticated success.

Bounded (a fixed number of examples per operation, no shrinking database) and on
loopback only. The event stream is left out: a stream that stays open is what
it is for (tests/server/test_events.py covers it).
"""

from __future__ import annotations

from collections import Counter

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from conftest import AUTH, TOKEN, echo_agent  # noqa: E402

EXAMPLES = 25
SKIP = {"streamEvents"}


def _operations(url: str):
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.definition.raw.get("operationId") not in SKIP:
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


def test_fuzzing_every_operation_with_the_token_finds_no_server_error(serve, store):
    live = serve(echo_agent(n=10_000), store, max_concurrent_runs=1_000, max_body_bytes=50_000)
    ops = _operations(live.url)
    # (schemathesis leaves out the document's own path)
    assert {op.definition.raw["operationId"] for op in ops} >= {
        "createSession", "getSession", "deleteSession", "sendMessage", "websocket"}
    statuses = Counter()
    with live.client() as client:
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

                @_bounded
                @given(case=strategy)
                def check(case):
                    client.post("/sessions", json={"sessionId": "fuzz"})
                    # a plain HTTP request to the WebSocket route is refused with 426 (Upgrade Required)
                    excluded = [positive_data_acceptance] if name == "websocket" else None
                    response = case.call_and_validate(base_url=live.url, headers=dict(AUTH), timeout=10,
                                                      excluded_checks=excluded)
                    statuses[(name, response.status_code)] += 1
                    assert response.status_code < 500

                check()
    # the fuzzing reached the successful answers, not only the refusals
    for expected in [("createSession", 201), ("getSession", 200), ("deleteSession", 202), ("sendMessage", 202),
                     ("websocket", 426)]:
        assert statuses[expected] > 0, (expected, statuses)


def test_without_the_token_nothing_but_the_document_succeeds(serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:  # a real session, so guessed ids can hit something
        c.post("/sessions", json={"sessionId": "0"})
    wrong = {"Authorization": "Bearer " + "0" * len(TOKEN)}
    for op in _operations(live.url):
        public = op.definition.raw.get("operationId") == "openapi"

        @_bounded
        @given(case=op.as_strategy())
        def check(case):
            for headers in ({}, wrong):
                case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
                response = case.call(base_url=live.url, headers=headers, timeout=10)
                if public:
                    assert response.status_code == 200
                else:
                    assert response.status_code == 401, (case.method, case.formatted_path, response.text)
                    assert response.json() == {"error": "unauthorized"}

        check()
    with live.client() as c:
        assert c.get("/sessions/0").json()["messages"] == []
