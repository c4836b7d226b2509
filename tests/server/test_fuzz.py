"""Fuzzing every operation of /openapi.json with schemathesis: no 500s, no unauthenticated success.

Every check schemathesis has runs on every answer (status codes, content types,
headers and bodies against the document, negative data refused, positive data
accepted...): 0 server errors and 0 mismatches with the document. One setting: a
plain HTTP request to the WebSocket route, however well formed, is answered ``426
Upgrade Required`` (what the document says; ``404`` for an unknown session, as on
every route), so those are the answers the positive-data check expects there, and 426 is
a refusal for the negative-data check there too; and a
generated conversation cursor, which no server gave, is refused with ``400``.
Bounded (a fixed number of examples per operation, no example database) and on
loopback only. With the token, the event stream is fuzzed before any session exists
(unknown sessions, invalid resume points: answers that end); an open stream never
ends, which is what it is for (tests/server/test_events.py covers those).
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from helpers import missing
from live_server import AUTH, TOKEN, echo_agent

pytestmark = pytest.mark.slow  # a live server per engine and 25 generated requests per operation

EXAMPLES = 25
SKIP = {"streamEvents"}
CONFIG = {
    "operations": [
        {
            "include-operation-id": "websocket",
            "checks": {
                "positive_data_acceptance": {"expected-statuses": ["426", "404"]},
                # a schema-violating request (unknown query parameters, which every route
                # ignores) to a session that exists -- one an earlier example created, or not
                # yet deleted: DELETE answers 202 and removes it after -- is still a plain
                # HTTP request: 426 too
                "negative_data_rejection": {
                    "expected-statuses": ["400", "401", "403", "404", "405", "406", "409", "415", "422", "426"]
                },
            },
        },
        {
            # A cursor is opaque: only one the server gave is valid, so a generated one is
            # refused (400 invalid_query), as a leaf the session does not have is (404).
            "include-operation-id": "getConversation",
            "checks": {"positive_data_acceptance": {"expected-statuses": ["200", "400", "404"]}},
        },
    ]
}


@pytest.fixture(scope="module")
def fuzz():
    """schemathesis and hypothesis, imported when a test of this module runs rather than when
    the suite is collected (they take a while to import)."""
    try:
        import schemathesis
    except ImportError:  # a dev dependency: CI must have it, a partial install skips
        missing("schemathesis is not installed (pip install -e '.[dev]')")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import CHECKS, load_all_checks
    from schemathesis.config import SchemathesisConfig
    from schemathesis.generation import GenerationMode

    load_all_checks()
    return SimpleNamespace(
        schemathesis=schemathesis,
        HealthCheck=HealthCheck,
        given=given,
        settings=settings,
        SchemathesisConfig=SchemathesisConfig,
        GenerationMode=GenerationMode,
        # every check schemathesis has, named here rather than left to its defaults
        checks=CHECKS.get_all(),
    )


def _operations(fuzz, url: str, skip=SKIP):
    config = fuzz.SchemathesisConfig.from_dict(CONFIG)
    schema = fuzz.schemathesis.openapi.from_url(f"{url}/openapi.json", config=config)
    ops = []
    for result in schema.get_all_operations():
        op = result.ok()
        if op.definition.raw.get("operationId") not in skip:
            ops.append(op)
    return ops


def _bounded(fuzz, test):
    return fuzz.settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(fuzz.HealthCheck),
    )(test)


def _fuzz(fuzz, strategy, name: str, client, url: str, statuses: Counter, *, session: bool = True):
    """A bounded hypothesis test: each generated request gets a conforming answer, never a 5xx."""

    @fuzz.given(case=strategy)
    def check(case):
        if session:
            client.post("/sessions", json={"sessionId": "fuzz"})  # back, if an example deleted it
        response = case.call_and_validate(base_url=url, headers=dict(AUTH), timeout=60, checks=fuzz.checks)
        statuses[(name, response.status_code)] += 1
        assert response.status_code < 500

    return _bounded(fuzz, check)


def _refused(fuzz, strategy, url: str, wrong: dict):
    """A bounded hypothesis test: without the token (or with a wrong one) every request gets 401."""

    @fuzz.given(case=strategy)
    def check(case):
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        for headers in ({}, wrong):
            response = case.call(base_url=url, headers=headers, timeout=60)
            assert response.status_code == 401, (case.method, case.formatted_path, response.text)
            assert response.json() == {"error": "unauthorized"}

    return _bounded(fuzz, check)


def ops_ids(ops) -> list[str]:
    return [op.definition.raw["operationId"] for op in ops]


def test_fuzzing_every_operation_with_the_token_finds_no_server_error(fuzz, serve, store):
    GenerationMode = fuzz.GenerationMode
    live = serve(echo_agent(n=10_000), store, max_concurrent_runs=1_000, max_body_bytes=50_000)
    ops = _operations(fuzz, live.url)
    # (schemathesis leaves out the document's own path)
    assert {op.definition.raw["operationId"] for op in ops} >= {
        "listSessions",
        "createSession",
        "getSession",
        "deleteSession",
        "sendMessage",
        "websocket",
    }
    statuses: Counter = Counter()
    with live.client() as client:
        # the event stream first, while no session exists: every answer ends (404, or 400 for a bad resume point)
        for op in _operations(fuzz, live.url, skip=set(ops_ids(ops))):
            assert op.definition.raw["operationId"] == "streamEvents"
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _fuzz(
                    fuzz,
                    op.as_strategy(generation_mode=mode),
                    "streamEvents",
                    client,
                    live.url,
                    statuses,
                    session=False,
                )()
        assert statuses[("streamEvents", 404)] > 0 and statuses[("streamEvents", 200)] == 0, statuses
        for op in ops:
            name = op.definition.raw["operationId"]
            has_id = "{sessionId}" in op.path
            # random ids (almost always unknown), then an existing session so the 2xx answers are checked too
            for mode, fixed in [
                (GenerationMode.POSITIVE, None),
                (GenerationMode.NEGATIVE, None),
                (GenerationMode.POSITIVE, "fuzz"),
            ]:
                if fixed and not has_id:
                    continue
                strategy = op.as_strategy(generation_mode=mode, path_parameters={"sessionId": fixed} if fixed else None)
                _fuzz(fuzz, strategy, name, client, live.url, statuses)()
    # the fuzzing reached the successful answers, not only the refusals
    for expected in [
        ("listSessions", 200),
        ("createSession", 201),
        ("getSession", 200),
        ("deleteSession", 202),
        ("sendMessage", 202),
        ("websocket", 426),
    ]:
        assert statuses[expected] > 0, (expected, statuses)


def test_without_the_token_every_operation_is_refused(fuzz, serve, store):
    live = serve(echo_agent(), store)
    with live.client() as c:  # a real session, so guessed ids can hit something
        c.post("/sessions", json={"sessionId": "0"})
    wrong = {"Authorization": "Bearer " + "0" * len(TOKEN)}
    ops = _operations(fuzz, live.url, skip=())  # the event stream too: refused before it starts
    assert "streamEvents" in {op.definition.raw["operationId"] for op in ops}
    for op in ops:
        _refused(fuzz, op.as_strategy(), live.url, wrong)()
    with live.client() as c:
        assert c.get("/sessions/0").json()["messages"] == []
