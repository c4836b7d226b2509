"""``compare``: one prompt, one node, N variants, run concurrently (docs/prototyping.md)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..agent import ROOT, Agent, LiteLLMModel, RunController, RunResult
from ..agent.events import HasSyncConversation
from ..errors import MessageNotFound, UsageError
from ..store import Session

__all__ = ["COMPARISON_COLUMNS", "Comparison", "compare"]

#: The columns of :meth:`Comparison.to_pandas`, one row per variant.
COMPARISON_COLUMNS = [
    "variant",
    "text",
    "status",
    "error",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_s",
    "tool_calls",
    "tool_names",
    "stop_reason",
    "model",
    "run_id",
    "leaf_id",
]

#: Keys of a dict variant that replace the base agent's own; any other key is a model option.
AGENT_KEYS = ("name", "model", "instructions", "tools", "max_steps", "history")
_SECRET = re.compile(r"key|token|secret|password|credential|auth", re.IGNORECASE)


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` returns: one row per variant, in the order the variants were given.

    ``rows`` are plain dicts with the keys of :data:`COMPARISON_COLUMNS`; ``results``
    maps each variant to its :class:`~sessionkit.agent.RunResult` (``None`` for one
    that failed: its row has the error). ``at`` is the message every variant ran from.
    """

    prompt: str
    at: object  # a message id (str), or ROOT
    rows: list[dict]
    results: dict[str, RunResult | None] = field(repr=False)

    def to_pandas(self):
        """The rows as a DataFrame (needs pandas: the ``analysis`` extra)."""
        from ..analysis import rows_df

        return rows_df(self.rows, COMPARISON_COLUMNS)

    def row(self, variant: str) -> dict:
        """The row of one variant (``KeyError`` naming it if there is none)."""
        for row in self.rows:
            if row["variant"] == variant:
                return row
        raise KeyError(f"no variant {variant!r} in this comparison")


def _model_name(model: object) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def _plain(value: object) -> object:
    """A setting as JSON keeps it (anything else as its repr)."""
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _settings(agent: Agent, options: Mapping[str, object]) -> dict:
    """What a variant's run records of its settings (options that look like secrets are hidden)."""
    settings: dict = {
        "agent": agent.name,
        "model": _model_name(agent.model),
        "instructions": agent.instructions,
        "tools": [t.name for t in agent.tools],
    }
    policy = agent.history
    if policy is not None:
        settings["history"] = {"max_messages": policy.max_messages, "max_tokens": policy.max_tokens}
    for key, value in options.items():
        settings[key] = "***" if _SECRET.search(key) else _plain(value)
    return settings


def _variant(name: object, spec: object, base: Agent | None) -> tuple[Agent, dict]:
    """A variant as an agent and its recorded settings; TypeError/ValueError naming it when malformed."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"variant names must be non-empty strings, got {name!r}")
    if isinstance(spec, Agent):
        return spec, _settings(spec, {})
    if not isinstance(spec, Mapping):
        raise TypeError(f"variant {name!r} must be an Agent or a dict of overrides, got {type(spec).__name__}")
    if base is None:
        raise TypeError(f"variant {name!r} is a dict of overrides: pass base=Agent(...) to apply them to")
    options = {k: v for k, v in spec.items() if k not in AGENT_KEYS}
    model = spec.get("model", base.model)
    if options:
        # Model options (temperature, top_p, seed...) are litellm call options: only a
        # litellm model takes them, so a variant with options gets its own LiteLLMModel.
        if isinstance(model, str):
            model = LiteLLMModel(model, **options)
        elif isinstance(model, LiteLLMModel):
            model = LiteLLMModel(model.name, stream=model.streaming, **{**model.options, **options})
        else:
            raise TypeError(
                f"variant {name!r}: model options ({', '.join(sorted(options))}) need a litellm model; "
                f"{_model_name(model)!r} takes none"
            )
    agent = Agent(
        str(spec.get("name", base.name)),
        spec.get("instructions", base.instructions),
        model,
        tools=spec.get("tools", base.tools),
        max_steps=spec.get("max_steps", base.max_steps),
        input_guardrails=base.input_guardrails,
        output_guardrails=base.output_guardrails,
        history=spec.get("history", base.history),
    )
    return agent, _settings(agent, options)


def _start_node(session: object, at: object) -> str | None:
    """The message every variant runs from: ``at``, or the session's latest leaf (None for ``ROOT``:
    an empty session, or ``at=ROOT``)."""
    # an sk.aio session reads through its store session
    reader = session.sync if isinstance(session, HasSyncConversation) else session
    if not isinstance(reader, Session):  # variants and replays are branches of the store's tree
        raise UsageError("compare needs a session in a sessionkit store (its variants are branches of one message)")
    if at is None:
        leaf = reader.latest_leaf()
        return None if leaf is None else leaf["id"]
    if at is ROOT:
        return None
    if not isinstance(at, str):
        raise TypeError(f"at must be a message id (str), ROOT or None, got {type(at).__name__}")
    if reader.get(at) is None:
        raise MessageNotFound(f"no message {at!r} in session {reader.session_id!r}")
    return at


async def compare(
    prompt: str,
    session: Session | HasSyncConversation,
    *,
    variants: Mapping[str, Agent | Mapping[str, object]],
    base: Agent | None = None,
    at: object = None,
    concurrency: int = 4,
    context: dict | None = None,
    timeout: float | None = None,
    on_event: Callable[[str, dict], object] | None = None,
) -> Comparison:
    """Run ``prompt`` from one message of ``session`` under each variant, at most ``concurrency`` at once.

    ``variants`` maps a name to an :class:`~sessionkit.Agent`, or to a dict of
    overrides of ``base``: ``model``, ``instructions``, ``tools``, ``max_steps``,
    ``history``, ``name``, and model options (``temperature``, ``top_p``...; these
    need a litellm model). Every variant runs from ``at`` (default: the latest
    leaf when the call starts; in an empty session, or with ``at=ROOT``, each
    variant starts a root conversation): its turn is a sibling branch under that message and
    its run records ``labels={"variant": name, "settings": {...}}`` (on
    ``run.start`` and the user message's ``metadata.labels``). A variant that fails
    is a row with its ``error``; the others go on. ``on_event(variant, event)``
    hears every event of every variant as it is recorded (a live view).

    Malformed variants or an unknown ``at`` raise before any run starts.
    """
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
    if not isinstance(variants, Mapping) or not variants:
        raise TypeError("variants must be a non-empty dict of name -> Agent or dict of overrides")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
    if base is not None and not isinstance(base, Agent):
        raise TypeError(f"base must be an Agent, got {type(base).__name__}")
    built = [(name, *_variant(name, spec, base)) for name, spec in variants.items()]
    found = await asyncio.to_thread(_start_node, session, at)
    node = ROOT if found is None else found
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str, agent: Agent, settings: dict) -> tuple[dict, RunResult | None]:
        events: list[dict] = []
        controller = RunController()

        def heard(event: dict) -> None:
            events.append(event)
            if on_event is not None:
                on_event(name, event)

        controller.on_event(heard)
        async with gate:
            started = time.perf_counter()
            result, error = None, None
            try:
                result = await agent.run(
                    prompt,
                    session=session,
                    at=node,
                    controller=controller,
                    context=context,
                    timeout=timeout,
                    labels={"variant": name, "settings": settings},
                )
            except Exception as exc:  # a failing variant is a row with its error, not a failed comparison
                error = f"{type(exc).__name__}: {exc}"
            latency = time.perf_counter() - started
        return _row(name, settings, result, error, latency, events), result

    done = await asyncio.gather(*(one(name, agent, settings) for name, agent, settings in built))
    return Comparison(
        prompt=prompt,
        at=node,
        rows=[row for row, _ in done],
        results={name: result for (name, _, _), (_, result) in zip(built, done)},
    )


def _row(
    name: str, settings: dict, result: RunResult | None, error: str | None, latency: float, events: list[dict]
) -> dict:
    end: dict = next((e for e in reversed(events) if e.get("kind") == "run.end"), {})
    usage = (result.usage if result is not None else end.get("usage")) or {}
    turn_ends = [e for e in events if e.get("kind") == "turn.end"]
    calls = [e for e in events if e.get("kind") == "tool.call"]
    return {
        "variant": name,
        "text": result.text if result is not None else None,
        "status": result.status if result is not None else end.get("status", "failed"),
        "error": error,
        "input_tokens": usage.get("in"),
        "output_tokens": usage.get("out"),
        "cost_usd": usage.get("cost_usd"),
        "latency_s": latency,
        "tool_calls": len(calls),
        "tool_names": [e.get("name") for e in calls],
        "stop_reason": turn_ends[-1].get("stop_reason") if turn_ends else None,
        "model": settings["model"],
        "run_id": result.run_id if result is not None else end.get("run_id"),
        "leaf_id": result.messages[-1]["id"] if result is not None and result.messages else None,
    }
