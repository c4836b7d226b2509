"""Sessions and a slow scripted model shared by the browser test and its notebook.

The notebook imports this module (the test puts this folder on its path), and
the test builds the same sessions to know what the page must show.
"""

from __future__ import annotations

import asyncio
import random

import sessionkit as sk
from sessionkit.testing import ScriptedModel


def text(mid: str, role: str, body: str, **extra) -> dict:
    message = {"id": mid, "role": role, "parts": [{"type": "text", "text": body}]}
    message.update(extra)
    return message


def demo_session(store) -> sk.Session:
    """A small trip-planning tree: a tool call, a compaction and a branch at the end."""
    s = store.session("trip")
    s.append(text("sys", "system", "You are a helpful travel planner."))
    s.append(text("u1", "user", "Plan a weekend in Lisbon for two."))
    s.append(text("a1", "assistant", "Happy to. Which weekend, and what do you enjoy?"))
    s.append(text("u2", "user", "Mid May. Food, views, a little history."))
    s.append(
        {
            "id": "a2",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "Let me check the weather first."},
                {
                    "type": "tool-weather",
                    "toolCallId": "call_1",
                    "state": "output-available",
                    "input": {"city": "Lisbon", "month": "May"},
                    "output": {"high_c": 23, "rain_days": 4},
                },
            ],
            "metadata": {"usage": {"in": 420, "out": 35, "cost_usd": 0.0011, "model": "gpt-4o-mini"}},
        }
    )
    s.append(
        text(
            "a3",
            "assistant",
            "Mid May is warm (about 23°C) with few rainy days. Day 1: Alfama and the castle; day 2: Belém.",
            metadata={"usage": {"in": 510, "out": 60, "cost_usd": 0.0014, "model": "gpt-4o-mini"}},
        )
    )
    s.append(text("u3", "user", "Great. Where should we eat?"))
    s.append(
        text(
            "a4",
            "assistant",
            "Try Cervejaria Ramiro for seafood and Taberna da Rua das Flores.",
            metadata={"usage": {"in": 600, "out": 40, "cost_usd": 0.0012, "model": "gpt-4o-mini"}},
        ),
        parent_id="u3",
    )
    s.append(
        text(
            "a4b",
            "assistant",
            "Do you prefer seafood or traditional petiscos?",
            metadata={"usage": {"in": 600, "out": 18, "cost_usd": None, "model": "local-llm"}},
        ),
        parent_id="u3",
    )
    s.append(text("u4", "user", "Petiscos, please."), parent_id="a4b")
    s.append(text("a5", "assistant", "Then Taberna da Rua das Flores and O Trevo for bifanas."), parent_id="u4")
    s.on_compaction(
        lambda msgs, ctx: sk.CompactionResult(
            "u1",
            "a2",
            "The user plans a mid-May weekend in Lisbon for two (food, views, history); "
            "the weather tool said 23°C, 4 rain days.",
        )
    )
    s.compact(leaf_id="a5")
    return s


def big_session(store, n: int = 10_000, *, seed: int = 7) -> sk.Session:
    """A random tree of ``n`` messages: long chains with a branch now and then."""
    s = store.session("big")
    rng = random.Random(seed)
    items = []
    ids: list[str] = []
    for i in range(n):
        if not ids:
            parent = None
        elif rng.random() < 0.9:
            parent = ids[-1]
        else:
            parent = ids[rng.randrange(len(ids))]
        role = "user" if i % 2 == 0 else "assistant"
        body = f"message {i}: " + " ".join(
            rng.choice(("plan", "trip", "hotel", "train", "museum", "lunch")) for _ in range(rng.randrange(3, 25))
        )
        items.append((text(f"m{i}", role, body), parent, None))
        ids.append(f"m{i}")
    s.import_many(items)
    return s


class SlowModel:
    """A ScriptedModel whose text arrives slowly, as a real provider's would."""

    name = "slow-scripted"

    def __init__(self, script, pause: float = 0.04):
        self.inner = ScriptedModel(script, name=self.name)
        self.pause = pause

    async def stream(self, messages, *, tools):
        async for item in self.inner.stream(messages, tools=tools):
            yield item
            await asyncio.sleep(self.pause)


def weather(city: str) -> dict:
    """Today's weather for a city."""
    return {"city": city, "high_c": 23, "sky": "sunny"}


def run_script() -> list:
    return [
        {
            "text": "Let me look at the weather in Lisbon before I plan the day, so we pick the right "
            "mix of indoor and outdoor places for a comfortable and relaxed walk around town.",
            "tool_calls": [{"name": "weather", "arguments": {"city": "Lisbon"}, "id": "call_w1"}],
            "usage": {"in": 812, "out": 64},
        },
        {
            "text": "Sunny and 23°C: start at the castle, walk down through Alfama, lunch by the river, "
            "and end the day with a dinner of petiscos in Bairro Alto.",
            "usage": {"in": 1020, "out": 48},
        },
    ]


def _usage(cost) -> dict:
    return {"metadata": {"usage": {"in": 100, "out": 10, "cost_usd": cost, "model": "m"}}}


def forked_session(store) -> sk.Session:
    """u1 -> a1 (priced) | a2 (no usage) -> u2 -> a3 (no price) -> u3 -> a4 (priced); markup in texts."""
    s = store.session("forked")
    s.append(text("u1", "user", "What does <!-- this --> do before </script>?"))
    s.append(text("a1", "assistant", "It opens an HTML comment.", **_usage(0.0002)), parent_id="u1")
    s.append(text("a2", "assistant", "An imported answer <!-- with a comment"), parent_id="u1")
    s.append(text("u2", "user", "More"), parent_id="a2")
    s.append(text("a3", "assistant", "From an unpriced model", **_usage(None)), parent_id="u2")
    s.append(text("u3", "user", "And?"), parent_id="a3")
    s.append(text("a4", "assistant", "Priced again", **_usage(0.0001)), parent_id="u3")
    return s


def line_session(store) -> sk.Session:
    """Three messages in one line: one leaf, no branch point, no compaction."""
    s = store.session("line")
    for mid, role, body in (
        ("q", "user", "Is the museum open on Mondays?"),
        ("r", "assistant", "No, it closes on Mondays."),
        ("t", "user", "Thanks!"),
    ):
        s.append(text(mid, role, body))
    return s


def interrupted_runs(store) -> list:
    """Six completed runs with long replies, then a run that was interrupted: a view taller than its height."""
    script = [{"text": "Step 0: " + "a long line of planning text " * 12, "usage": {"in": 10, "out": 5}}]
    agent = sk.Agent("t", "Be brief.", ScriptedModel(script * 6))
    for i in range(6):
        agent.run_sync(f"Request number {i}", session=store.session("long"))
    events = list(store.events("long"))
    events.append(
        {"kind": "run.start", "run_id": "cut", "input": "This one is interrupted", "ts": "2025-01-01T00:00:00Z"}
    )
    events.append(
        {
            "kind": "run.end",
            "run_id": "cut",
            "status": "interrupted",
            "error": "run cut was interrupted",
            "ts": "2025-01-01T00:00:01Z",
        }
    )
    return events


QA = ["What is 2 + 3?", "Name a colour.", "Say hello."]


def qa_dataset(store) -> sk.DatasetInfo:
    """Three one-turn sessions frozen as the dataset ``qa`` (for the experiment view)."""
    for k, question in enumerate(QA):
        store.session(f"qa{k}").append_many(
            [text("u", "user", question), text("a", "assistant", f"Original {k}.")], parent_id=None
        )
    return store.dataset("qa", query="SELECT session_id, reply_id AS message_id FROM turns WHERE session_id LIKE 'qa%'")


def experiment_variants() -> dict:
    """Two variants answering each question after a pause (so the view fills in several batches)."""

    def say(prefix):
        def reply(messages):
            question = [m for m in messages if m["role"] == "user"][-1]["content"]
            return {"text": f"{prefix} {question}", "delay": 0.3, "usage": {"in": 7, "out": len(prefix)}}

        return reply

    return {
        "base": sk.Agent("a", "", ScriptedModel([say("B")] * 3)),
        "long": sk.Agent("a", "", ScriptedModel([say("LONGER")] * 3)),
    }


@sk.scorers.scorer(name="length")
def reply_length(unit) -> sk.Score:
    return sk.Score("scored", rating=float(len(sk.parts.text_of(unit.reply, ""))))
