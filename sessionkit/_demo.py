"""A small, realistic demo store: branches, a compacted long chat, a tool call and a file.

``sessionkit demo`` builds it and prints a tour; notebooks and the README reuse it so
every example starts from the same data::

    from sessionkit._demo import build_demo_store
    store = build_demo_store("demo.db")

Everything is deterministic and offline: message ids and timestamps are fixed, and the
long conversation is compacted by :func:`demo_summarize`, a rule-based summarizer that
needs no model. Building twice into the same store adds nothing (appends are
idempotent on message ids), so the function is safe to call on an existing demo store.
"""

from __future__ import annotations

import base64
import math
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import PurePath
from typing import Any

from .store import Store, create_compact_function, open_store

__all__ = [
    "build_demo_store",
    "demo_summarize",
    "DEPLOY_SESSION",
    "MIGRATION_SESSION",
    "WEATHER_SESSION",
    "DEMO_SESSIONS",
    "COMPACT_AFTER_TOKENS",
]

#: Session ids of the demo store.
DEPLOY_SESSION = "deploy-help"
MIGRATION_SESSION = "db-migration"
WEATHER_SESSION = "weather-agent"
DEMO_SESSIONS = (DEPLOY_SESSION, MIGRATION_SESSION, WEATHER_SESSION)

#: The migration chat is compacted once its path (as the model sees it) passes this many tokens.
COMPACT_AFTER_TOKENS = 700
_KEEP_RECENT_TOKENS = 250
_PROTECT_HEAD = 2


def _text(mid: str, role: str, text: str, when: datetime, **extra: Any) -> dict:
    msg = {"id": mid, "role": role, "parts": [{"type": "text", "text": text}], "createdAt": _iso(when)}
    msg.update(extra)
    return msg


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


# ---------------------------------------------------------------------------
# The summarizer


_EXCERPT = "Conversation excerpt:"
_EARLIER = "(extend it):"
_LINE = re.compile(r"^(user|assistant|system|tool)( \(reasoning\))?: (.*)$")
_CALL = re.compile(r"^\w+ called tool (\w+)\((.*)\)$")


def _first_sentence(text: str, limit: int | None = None) -> str:
    """The first sentence of ``text``, whole; cut at a word with ``…`` only past ``limit``."""
    text = " ".join(text.split())
    match = re.search(r"(?<=[.!?])\s", text)
    sentence = text[: match.start()] if match else text
    if limit is not None and len(sentence) > limit:
        sentence = sentence[: limit - 1].rsplit(" ", 1)[0] + "…"
    return sentence


def demo_summarize(prompt: str) -> str:
    """Summarize a compaction prompt without a model: one note per assistant reply.

    Works on the prompt :func:`sessionkit.create_compact_function` builds: the notes of an
    earlier summary (the text after ``(extend it):``) are kept, then each assistant line of
    the excerpt contributes its first sentence and each tool call its name and arguments.
    Deterministic, so the demo and the notebooks print the same thing on every run. For real
    conversations pass a function that asks a model.
    """
    notes: list[str] = []
    body = prompt
    if _EXCERPT in prompt:
        before, _, body = prompt.partition(_EXCERPT)
        if _EARLIER in before:
            earlier = before.split(_EARLIER, 1)[1]
            notes += [line for line in earlier.strip().splitlines() if line.startswith("- ")]
    for line in body.strip().splitlines():
        call = _CALL.match(line)
        if call:
            notes.append(f"- called {call.group(1)}({_first_sentence(call.group(2), 60)})")
            continue
        match = _LINE.match(line)
        if not match:
            continue
        role, reasoning, text = match.groups()
        if role == "assistant" and not reasoning:
            notes.append("- " + _first_sentence(text))
    header = "Summary of earlier turns:"
    return "\n".join([header, *notes])


# ---------------------------------------------------------------------------
# Session contents

_DEPLOY_START = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
_MIGRATION_START = datetime(2025, 3, 4, 14, 0, tzinfo=UTC)
_WEATHER_START = datetime(2025, 3, 5, 8, 30, tzinfo=UTC)


def _build_deploy(store: Store) -> None:
    """A question whose first answer was regenerated: two sibling replies, each continued."""
    s = store.session(DEPLOY_SESSION)
    t = _DEPLOY_START
    step = timedelta(seconds=41)
    s.append(_text("u1", "user", "How do I deploy a small Flask app to production?", t), parent_id=None)
    s.append(
        _text(
            "a1",
            "assistant",
            "Run it under gunicorn on one virtual machine with nginx in front as a reverse proxy. "
            "Use systemd to restart gunicorn if it crashes, and let certbot manage the TLS certificate.",
            t + step,
        ),
        parent_id="u1",
    )
    s.append(_text("u2", "user", "Does gunicorn really need nginx in front of it?", t + 2 * step), parent_id="a1")
    s.append(
        _text(
            "a2",
            "assistant",
            "Not strictly, but nginx buffers slow clients, serves static files and terminates TLS, "
            "which gunicorn's sync workers handle poorly.",
            t + 3 * step,
        ),
        parent_id="u2",
    )
    # The user asked for another answer to u1: a sibling of a1 (a new branch).
    s.append(
        _text(
            "a1-regen",
            "assistant",
            "The simplest path is a container: write a Dockerfile, build the image, and deploy it to "
            "a managed platform such as Cloud Run or Fly.io. You get TLS, scaling and rollbacks "
            "without running a server yourself.",
            t + 4 * step,
            metadata={"regenerated_from": "a1"},
        ),
        parent_id="u1",
    )
    s.append(_text("u3", "user", "How do I roll back a bad deployment?", t + 5 * step), parent_id="a1-regen")
    s.append(
        _text(
            "a3",
            "assistant",
            "Every deployment keeps its image tag, so a rollback is deploying the previous tag again: "
            "on Cloud Run, route 100% of traffic back to the last good revision.",
            t + 6 * step,
        ),
        parent_id="u3",
    )


# (user question, assistant answer): the first sentence of each answer is the decision,
# which is what demo_summarize keeps.
_MIGRATION_TURNS = [
    (
        "We need to move our orders database from a single Postgres 12 server to a managed Postgres 16 "
        "cluster. Where do we start?",
        "Start with an inventory: database size, the largest tables, extensions in use and the "
        "applications that connect. That tells us whether a dump and restore fits the downtime window "
        "or whether we need logical replication.",
    ),
    (
        "The database is 180 GB; the largest table, order_events, is 120 GB. We use pg_trgm and postgis.",
        "At 180 GB a plain dump and restore would take hours, so we will use logical replication. Both "
        "extensions exist on the managed service; we will create them on the target before copying the "
        "schema.",
    ),
    (
        "How do we copy the schema?",
        "Dump the schema only with pg_dump --schema-only and deploy the new schema to the target before "
        "any data moves. Review it first: the managed service does not allow superuser-owned objects.",
    ),
    (
        "What about the order_events table? It gets 400 writes per second.",
        "Replicate order_events in its own publication so its initial copy does not hold up the small "
        "tables. Logical replication copies the existing rows first and then streams new writes.",
    ),
    (
        "Do all our tables have primary keys?",
        "Two legacy tables, audit_log and tmp_imports, have no primary key, so logical replication cannot "
        "replicate their updates and deletes. We will add a surrogate bigint key to audit_log and drop "
        "tmp_imports, which nothing reads.",
    ),
    (
        "How long will the initial copy take?",
        "Estimate about six hours for the initial copy at the target's write throughput, mostly "
        "order_events. We will start it on Friday evening when traffic is lowest.",
    ),
    (
        "Sequences: do they replicate?",
        "Sequences do not replicate logically, so at cutover we will set each sequence on the target to "
        "the source's value plus a margin of 10,000. A script reads them from pg_sequences and writes "
        "the setval calls.",
    ),
    (
        "How do we know the copy is correct?",
        "Compare row counts per table and a checksum of each primary key range between source and "
        "target before cutover. Any mismatch blocks the cutover.",
    ),
    (
        "What does cutover look like?",
        "Cutover is a 10 minute window: stop writes, wait for replication lag to reach zero, fix the "
        "sequences, then point the application's connection string at the new cluster.",
    ),
    (
        "And if something goes wrong after cutover?",
        "Keep the old server running read-only for a week as the rollback path, and set up reverse "
        "replication from the new cluster so no order written after cutover is lost if we roll back.",
    ),
    (
        "Who needs to be told?",
        "Notify the support team and the two partner integrations 48 hours ahead, because their API "
        "calls will fail during the 10 minute window.",
    ),
    (
        "What about connection pooling?",
        "Move pgbouncer in front of the new cluster before cutover so the connection string change is a "
        "single pgbouncer setting rather than an application deployment.",
    ),
    (
        "Anything to watch in the first day?",
        "Watch replication lag, error rates and the slow query log for the first 24 hours; Postgres 16 "
        "plans some of our reporting queries differently, so run ANALYZE on every table right after "
        "cutover.",
    ),
    (
        "Can you write the runbook as a checklist?",
        "Here is the runbook: 1. create extensions; 2. deploy the schema; 3. add the audit_log key; "
        "4. start replication Friday evening; 5. verify counts and checksums; 6. notify partners; "
        "7. cutover with sequences fixed; 8. ANALYZE; 9. keep the old server for a week.",
    ),
    (
        "Thanks, that covers it.",
        "Good luck with the migration; ping me with the verification numbers before cutover and I will "
        "check them with you.",
    ),
]


def _build_migration(store: Store) -> None:
    """A long planning chat that is compacted automatically as it grows."""
    s = store.session(MIGRATION_SESSION)
    s.on_compaction(
        create_compact_function(demo_summarize, keep_recent_tokens=_KEEP_RECENT_TOKENS, protect_head=_PROTECT_HEAD)
    ).compact_after(COMPACT_AFTER_TOKENS)
    t = _MIGRATION_START
    n = 0
    for question, answer in _MIGRATION_TURNS:
        for role, text in (("user", question), ("assistant", answer)):
            n += 1
            s.append(_text(f"m{n:02d}", role, text, t + timedelta(minutes=3 * n)))


def _readings_csv() -> bytes:
    """A week of hourly readings from two sensors (about 7 KB): big enough to be stored as a blob."""
    rows = ["timestamp,sensor,temp_c,humidity_pct"]
    start = datetime(2025, 2, 24, tzinfo=UTC)
    for h in range(7 * 24):
        when = start + timedelta(hours=h)
        for k, sensor in enumerate(("roof", "garden")):
            temp = 16.5 + 5.5 * math.sin((h % 24 - 9) / 24 * 2 * math.pi) + 0.8 * k + 0.1 * (h // 24)
            humidity = 62 - 12 * math.sin((h % 24 - 9) / 24 * 2 * math.pi) + 2 * k
            rows.append(f"{when:%Y-%m-%dT%H:%MZ},{sensor},{temp:.1f},{humidity:.0f}")
    return ("\n".join(rows) + "\n").encode("ascii")


def _mean_temp(csv_bytes: bytes) -> float:
    values = [float(line.split(",")[2]) for line in csv_bytes.decode("ascii").splitlines()[1:]]
    return sum(values) / len(values)


def _build_weather(store: Store) -> None:
    """An agent turn with a file attachment, reasoning and a tool call with its result."""
    s = store.session(WEATHER_SESSION)
    t = _WEATHER_START
    csv_bytes = _readings_csv()
    mean = _mean_temp(csv_bytes)
    forecast = [17, 18, 18, 19, 20, 19, 18]
    forecast_mean = sum(forecast) / len(forecast)
    s.append(
        {
            "id": "w1",
            "role": "user",
            "parts": [
                {
                    "type": "text",
                    "text": "Here are last week's readings from my two sensors. "
                    "Was it warmer than the forecast for Lisbon?",
                },
                {
                    "type": "file",
                    "mediaType": "text/csv",
                    "filename": "readings.csv",
                    "url": "data:text/csv;base64," + base64.b64encode(csv_bytes).decode("ascii"),
                },
            ],
            "createdAt": _iso(t),
        },
        parent_id=None,
    )
    warmer = "warmer" if mean > forecast_mean else "cooler"
    s.append(
        {
            "id": "w2",
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "text": "Average the temp_c column, then compare with the forecast daily highs."},
                {
                    "type": "tool-get_forecast",
                    "toolCallId": "call_forecast_1",
                    "state": "output-available",
                    "input": {"city": "Lisbon", "days": 7, "start": "2025-02-24"},
                    "output": {"city": "Lisbon", "unit": "C", "daily_high": forecast},
                },
                {
                    "type": "text",
                    "text": f"Your sensors averaged {mean:.1f} °C over the week, while the forecast "
                    f"highs averaged {forecast_mean:.1f} °C, so it was {warmer} than forecast "
                    f"(the readings include night-time lows, so compare peaks too).",
                },
            ],
            "createdAt": _iso(t + timedelta(seconds=12)),
            "metadata": {"model": "demo-offline"},
        },
        parent_id="w1",
    )


def build_demo_store(path_or_store: Any) -> Store:
    """Fill a store with the demo sessions and return it.

    ``path_or_store`` is a path or URL (opened, and created if missing, with
    :func:`sessionkit.open_store`; the caller closes the returned store) or an open
    :class:`~sessionkit.Store` (returned as is). Three sessions:

    - ``deploy-help``: a question whose reply was regenerated, so the tree branches and
      both branches continue;
    - ``db-migration``: a 30-message planning chat compacted automatically with
      :func:`sessionkit.create_compact_function` and the offline :func:`demo_summarize`;
    - ``weather-agent``: a user message carrying a 7 KB CSV file (stored once, as a blob)
      and an assistant reply with reasoning, a ``tool-get_forecast`` call and its result.
    """
    if isinstance(path_or_store, Store):
        store = path_or_store
        owned = False
    elif isinstance(path_or_store, (str, PurePath)):
        store = open_store(os.fspath(path_or_store))
        owned = True
    else:
        raise TypeError(f"build_demo_store needs a path or a Store, got {type(path_or_store).__name__}")
    try:
        _build_deploy(store)
        _build_migration(store)
        _build_weather(store)
    except BaseException:
        if owned:
            store.close()
        raise
    return store
