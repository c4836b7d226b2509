"""Guardrails: checking them when an agent is made, running them during a run (docs/agents.md).

See "Guardrails" in :mod:`sessionkit.agent.agent` for what a guardrail is and
what a block does to a run.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterable

from ..errors import GuardrailTripped
from .tools import _in_thread, _is_async

__all__ = ["Guardrail", "check_guardrails", "guardrail_name", "run_guardrails"]

#: A guardrail: takes the messages, returns (or, when async, resolves to) None to allow or a reason to block.
Guardrail = Callable[[list[dict]], object]


def check_guardrails(guardrails: Iterable[Guardrail], name: str) -> tuple[Guardrail, ...]:
    if isinstance(guardrails, (str, bytes, dict)) or callable(guardrails):
        raise TypeError(f"{name} must be a list of callables")
    try:
        items = tuple(guardrails)
    except TypeError:
        raise TypeError(f"{name} must be a list of callables, got {type(guardrails).__name__}") from None
    for item in items:
        if not callable(item):
            raise TypeError(f"each of {name} must be callable, got {type(item).__name__}")
    return items


def guardrail_name(guardrail: object) -> str:
    target = guardrail
    while isinstance(target, functools.partial):
        target = target.func
    name = getattr(target, "__name__", None)
    return name if isinstance(name, str) and name else type(target).__name__


async def run_guardrails(stage: str, guardrails: tuple[Guardrail, ...], messages: list[dict], run_id: str) -> None:
    """Pass ``messages`` through ``guardrails`` in order; raise GuardrailTripped at the first block."""
    for guardrail in guardrails:
        name = guardrail_name(guardrail)
        view = copy.deepcopy(messages)
        try:
            if _is_async(guardrail):
                verdict = guardrail(view)  # a coroutine, awaited below
            else:
                verdict = await _in_thread(functools.partial(guardrail, view))
            if inspect.isawaitable(verdict):  # or a sync wrapper that returned a coroutine
                verdict = await verdict
        except GuardrailTripped as exc:  # raised on purpose: keep its reason
            exc.run_id = exc.run_id or run_id
            exc.guardrail = exc.guardrail or name
            exc.stage = exc.stage or stage
            exc.reason = exc.reason or str(exc)
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise GuardrailTripped(
                f"{stage} guardrail {name!r} raised {reason}",
                run_id=run_id,
                reason=reason,
                guardrail=name,
                stage=stage,
            ) from exc
        if verdict is None:
            continue
        if not isinstance(verdict, str):
            reason = (
                f"returned a {type(verdict).__name__}; a guardrail returns None to allow or a reason (str) to block"
            )
            raise GuardrailTripped(
                f"{stage} guardrail {name!r} {reason}",
                run_id=run_id,
                reason=reason,
                guardrail=name,
                stage=stage,
            )
        reason = verdict or "blocked"
        raise GuardrailTripped(
            f"{stage} guardrail {name!r} blocked the run: {reason}",
            run_id=run_id,
            reason=reason,
            guardrail=name,
            stage=stage,
        )
