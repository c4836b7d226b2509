"""Agents and runs (docs/agents.md).

An :class:`Agent` is a name, instructions, a model and tools. A run reads a
session, calls the model, runs the tools it asks for, streams events while it
works, and writes to the session only when it succeeds::

    agent = sk.Agent("helper", "You are concise.", "gpt-4o-mini", tools=[get_weather])
    session = sk.create_session()
    result = await agent.run("Weather in Paris?", session=session)
    result.text, result.messages, result.usage

What a run does, in order:

1. load the session's history along its latest path (or the path to ``at``),
   compaction applied (the model sees summaries instead of compacted ranges),
   then narrowed by the run's :class:`~sessionkit.HistoryPolicy` if any;
2. record the run (``status="running"``) and a ``run.start`` event;
3. pass the new user message through the agent's input guardrails;
4. take turns: send ``[system, *history, *new turns]`` to the model, stream its
   text as ``delta.text`` events, run each tool call (``tool.call`` /
   ``tool.result``), and go on while the model asks for tools; at each turn
   boundary one queued controller message (steers first) joins as a user
   message, after passing the input guardrails too;
5. pass the messages about to be appended through the output guardrails;
6. on success append every new message (the user's first, then one assistant
   message per model call, its tool parts carrying input and output) in one
   transaction, under the leaf the history was read from;
7. on failure (:class:`~sessionkit.ModelError`, :class:`~sessionkit.MaxStepsExceeded`,
   :class:`~sessionkit.RunTimeout`, :class:`~sessionkit.RunInterrupted`,
   :class:`~sessionkit.GuardrailTripped`) append nothing, record the run as
   ``failed`` or ``interrupted`` with the error's text and raise.

Messages a controller receives after the run's last turn boundary stay queued
for the controller's next run.

Guardrails (docs/agents.md)
--------------------

A guardrail is a callable, sync or async, taking a list of UIMessages (deep
copies: changing them changes nothing) and returning ``None`` to allow or a
reason (a ``str``) to block::

    CARD = re.compile(r"\\b(?:\\d[ -]?){13,16}\\b")

    def no_card_numbers(messages):
        for m in messages:
            text = " ".join(p["text"] for p in m["parts"] if p["type"] == "text")
            if m["role"] == "assistant" and CARD.search(text):
                return "the reply contains a card number"
        return None

    agent = sk.Agent("support", "...", model, output_guardrails=[no_card_numbers])

- input guardrails get ``[user_message]``: the run's new user message before
  the first model call; each queued controller message (steer or follow-up)
  when it joins the run, before the model sees it; for :meth:`Agent.regenerate`,
  the stored user message being answered again;
- output guardrails get every message the run is about to append (for a run,
  the user's first, as in ``RunResult.messages``; for a regeneration, the new
  replies), once, after the last turn and before anything is written.

Guardrails run in order and the first block wins. A block, a guardrail that
raises, or one returning anything but ``None`` or a ``str`` fails the whole run
with :class:`~sessionkit.GuardrailTripped` (``.reason``, ``.guardrail``,
``.stage``): nothing of the run is appended (earlier turns of the run included),
the run is recorded ``"failed"`` with the error's text (which names the
guardrail and gives the reason), and ``run.end`` carries it as ``error``. As
for any failed run, the run's events keep what streamed (``delta.text``...):
a guardrail keeps a reply out of the conversation, not out of the run's log.
A blocked queued message is consumed, not queued again. Sync guardrails run on
a worker thread, like tools; they count against the run's ``timeout`` and an
``interrupt()`` stops the wait for them.

Context (docs/agents.md)
------------------

``run(prompt, context={...})`` passes a JSON object the application knows
(the signed-in user, their plan, the page they are on) to the model and the
tools without storing it in the conversation. The model sees it as a text part
placed before the prompt in that run's user message, the JSON between tags::

    {"role": "user", "content": [
        {"type": "text", "text": "<context>\\n{\\"user_id\\": \\"u-42\\", \\"plan\\": \\"pro\\"}\\n</context>"},
        {"type": "text", "text": "Which plan am I on?"}]}

It stays beside that message for every model call of the run (tool turns and
queued messages that join included) and is gone in later runs: the stored user
message is the prompt alone, and no event carries the context. A tool with a
parameter named ``context`` receives it (see :mod:`sessionkit.agent.tools`).
``context`` must be a ``dict`` that JSON can encode (``TypeError`` otherwise);
tools and the model see it as JSON would give it back (tuples as lists...).
With :meth:`Agent.regenerate`, the context is shown beside the user message
answered again.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import logging
import math
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import cast

from ..errors import (
    MessageNotFound,
    ModelError,
    RunFailed,
    RunInterrupted,
    RunTimeout,
)
from ..messages import dumps, validate
from ..parts import text_of
from ._guardrails import Guardrail, check_guardrails, run_guardrails
from ._loop import RunState, new_run_id
from ._sync import run_coroutine_sync
from .controller import RunController
from .events import Conversation, EventEmitter, HasSyncConversation, RunLog
from .history import HistoryPolicy, check_policy
from .models import (
    ChatModel,
    LiteLLMModel,
    ModelReply,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    make_usage,
    model_priced,
)
from .sessions import _require_tree, create_session
from .tools import Tool, as_tool, json_safe

__all__ = ["ROOT", "Agent", "RunResult"]

log = logging.getLogger("sessionkit.agent")

#: What a run may be given as its session: a store session, an ``sk.aio`` session or a
#: session of :func:`~sessionkit.agent.sessions.create_session` (``None``: a fresh one).
SessionLike = Conversation | HasSyncConversation

_SUMMARY_SYSTEM = (
    "You summarize conversations faithfully and concisely. Keep names, decisions, "
    "numbers, open questions and what the user asked for."
)


class _Root:
    """The type of :data:`ROOT`."""

    def __repr__(self) -> str:
        return "sessionkit.agent.ROOT"


#: ``run(..., at=ROOT)``: the new turn starts a new root conversation of the session (no history).
ROOT = _Root()


@dataclass(frozen=True)
class RunResult:
    """The outcome of a completed run.

    ``messages`` are the messages the run appended, the user's first (for
    :meth:`Agent.regenerate`, only the new replies); ``usage`` sums the run's
    ``usage`` events (``cost_usd`` is ``None`` if any call was unpriced: an
    unknown cost is never reported as zero).
    ``session`` is the session the run wrote to, handy after ``session=None``.
    """

    run_id: str
    status: str
    text: str
    messages: list[dict]
    usage: dict
    session_id: str = ""
    session: SessionLike | None = field(default=None, repr=False, compare=False)


class _RunTarget:
    """The session a run reads from and writes to, and where its events go."""

    def __init__(self, session: object) -> None:
        if isinstance(session, HasSyncConversation) and isinstance(session.sync, Conversation):
            session = session.sync  # an sk.aio AsyncSession: its store session does the work
        if not isinstance(session, Conversation):
            raise TypeError(
                f"session must be a sessionkit session (store.session(id) or sk.create_session()), "
                f"got {type(session).__name__}, which lacks a Conversation's session_id, run_log, "
                f"get_history, latest_leaf, get or append_many"
            )
        self.session: Conversation = session
        self.session_id = session.session_id
        run_log = session.run_log
        if not isinstance(run_log, RunLog):
            raise TypeError(f"cannot find where session {self.session_id!r} records its runs")
        self.run_log = run_log

    def leaf_id(self) -> str | None:
        leaf = self.session.latest_leaf()
        return None if leaf is None else leaf["id"]

    def history(self, leaf_id: str | None) -> list[dict]:
        if leaf_id is None:
            return []
        return list(self.session.get_history(leaf_id=leaf_id))

    def append(self, messages: list[dict], parent_id: str | None) -> list[dict]:
        results = self.session.append_many(messages, parent_id=parent_id)
        return [r.message for r in results]


def _resolve_model(model: str | ChatModel) -> ChatModel:
    if isinstance(model, str):
        if not model:
            raise ValueError("model must be a non-empty litellm model name or a model object")
        return LiteLLMModel(model)
    if callable(getattr(model, "stream", None)):
        if not getattr(model, "name", None):
            try:
                model.name = type(model).__name__
            except AttributeError:
                pass
        return model
    raise TypeError(
        "model must be a litellm model name (str) or an object with an async "
        f"stream(messages, *, tools) method; got {type(model).__name__}"
    )


def _check_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if not timeout > 0 or math.isnan(timeout):
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    return float(timeout)


def _check_context(context: object) -> str | None:
    """A run's context as compact JSON text, or None; TypeError for anything but a JSON object."""
    if context is None:
        return None
    if not isinstance(context, dict):
        raise TypeError(f"context must be a dict (a JSON object) or None, got {type(context).__name__}")
    try:
        text = json.dumps(context, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))
        text.encode("utf-8")  # a lone surrogate cannot reach any provider
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"context is not JSON-encodable: {exc}") from None
    return text


def _check_prompt(prompt: object) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        if prompt.get("role") != "user":
            raise ValueError("a prompt given as a message must have role 'user'")
        if not isinstance(prompt.get("parts"), list):
            raise ValueError("a prompt given as a message needs a 'parts' list")
        return text_of(prompt, "")
    raise TypeError(f"prompt must be a str or a user message dict, got {type(prompt).__name__}")


class Agent:
    """An agent: a name, instructions, a model and tools.

    ``model`` is a litellm model name (``"gpt-4o-mini"``,
    ``"anthropic/claude-sonnet-4-5"``, ``"ollama/llama3"``...) or an object
    following :class:`~sessionkit.agent.models.ChatModel`, such as
    :class:`~sessionkit.agent.models.LiteLLMModel` with options or
    ``sk.testing.ScriptedModel``. ``tools`` are plain functions, sync or async
    (see :mod:`sessionkit.agent.tools`). ``max_steps`` bounds the model calls
    made for one user message; a model still asking for tools after that fails
    the run with :class:`~sessionkit.MaxStepsExceeded`.

    ``input_guardrails`` and ``output_guardrails`` are callables, sync or async,
    taking a list of messages and returning ``None`` (allow) or a reason
    (block); a block fails the run with :class:`~sessionkit.GuardrailTripped`
    and nothing is appended (see "Guardrails" in :mod:`sessionkit.agent.agent`).
    """

    def __init__(
        self,
        name: str,
        instructions: str | None,
        model: str | ChatModel,
        *,
        tools: Iterable[Callable[..., object] | Tool] = (),
        max_steps: int = 10,
        input_guardrails: Iterable[Guardrail] = (),
        output_guardrails: Iterable[Guardrail] = (),
        history: HistoryPolicy | None = None,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        if instructions is not None and not isinstance(instructions, str):
            raise TypeError(f"instructions must be a str, got {type(instructions).__name__}")
        if isinstance(max_steps, bool) or not isinstance(max_steps, int):
            raise TypeError(f"max_steps must be an int, got {type(max_steps).__name__}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if isinstance(tools, (str, bytes)) or callable(tools):
            raise TypeError("tools must be a list of functions")
        self.name = name
        self.instructions = instructions or ""
        self.model = _resolve_model(model)
        self.max_steps = max_steps
        self.history = check_policy(history)
        self.input_guardrails = check_guardrails(input_guardrails, "input_guardrails")
        self.output_guardrails = check_guardrails(output_guardrails, "output_guardrails")
        self.tools: tuple[Tool, ...] = tuple(as_tool(t) for t in tools)
        self._tools: dict[str, Tool] = {}
        for tool in self.tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool
        self._schemas = [tool.schema() for tool in self.tools]

    def __repr__(self) -> str:
        return (
            f"Agent({self.name!r}, model={getattr(self.model, 'name', self.model)!r}, "
            f"tools={[t.name for t in self.tools]!r})"
        )

    # ------------------------------------------------------------------ public API

    async def run(
        self,
        prompt: str | dict,
        *,
        session: SessionLike | None = None,
        controller: RunController | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        metadata: dict | None = None,
        context: dict | None = None,
        at: str | _Root | None = None,
        history: HistoryPolicy | None = None,
        labels: dict | None = None,
    ) -> RunResult:
        """Run one user prompt to a final reply (see the module docstring).

        ``prompt`` is the user's text, or a user UIMessage dict (to send files or
        choose its id). ``metadata`` goes into the user message's metadata.
        ``context`` is a JSON object shown to the model beside this prompt and
        given to tools with a ``context`` parameter, never stored (see
        "Context" in the module docstring). ``run_id`` names the run (a fresh
        one is minted otherwise). ``at`` is a message id of the session to run
        from instead of its latest leaf: the model sees the path to that
        message (compaction applied) and the new turn becomes a branch under
        it (:data:`ROOT`: a new root, no history); ``run.start`` records it as
        ``at`` (docs/prototyping.md).
        ``history`` overrides the agent's :class:`~sessionkit.HistoryPolicy`
        for this run. ``labels`` (a JSON object, e.g. a variant's name) is
        recorded on ``run.start``, in the user message's ``metadata.labels`` and,
        beside ``at``, in the run record's ``meta`` (``store.runs()``).
        Raises a :class:`~sessionkit.RunFailed` kind
        when the run fails; nothing is appended then, and the run and its
        events stay recorded.
        """
        return await self._execute(
            prompt=prompt,
            session=session,
            controller=controller,
            timeout=timeout,
            run_id=run_id,
            metadata=metadata,
            context=context,
            regenerate_of=None,
            listener=None,
            at=at,
            history=history,
            labels=labels,
        )

    def run_sync(
        self,
        prompt: str | dict,
        *,
        session: SessionLike | None = None,
        controller: RunController | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        metadata: dict | None = None,
        context: dict | None = None,
        at: str | _Root | None = None,
        history: HistoryPolicy | None = None,
        labels: dict | None = None,
    ) -> RunResult:
        """:meth:`run` from sync code; works inside a running event loop (a notebook cell)."""
        return run_coroutine_sync(
            lambda: self.run(
                prompt,
                session=session,
                controller=controller,
                timeout=timeout,
                run_id=run_id,
                metadata=metadata,
                context=context,
                at=at,
                history=history,
                labels=labels,
            )
        )

    async def stream(
        self,
        prompt: str | dict,
        *,
        session: SessionLike | None = None,
        controller: RunController | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        metadata: dict | None = None,
        context: dict | None = None,
        at: str | _Root | None = None,
        history: HistoryPolicy | None = None,
        labels: dict | None = None,
    ) -> AsyncIterator[dict]:
        """Run like :meth:`run`, yielding each event as it is recorded.

        The last event is ``run.end``; a failed run then raises the same error
        :meth:`run` would. Leaving the loop early cancels the run (recorded as
        ``interrupted``).
        """
        queue: asyncio.Queue[dict] = asyncio.Queue()
        task = asyncio.ensure_future(
            self._execute(
                prompt=prompt,
                session=session,
                controller=controller,
                timeout=timeout,
                run_id=run_id,
                metadata=metadata,
                context=context,
                regenerate_of=None,
                listener=queue.put_nowait,
                at=at,
                history=history,
                labels=labels,
            )
        )
        async for event in _drain(queue, task):
            yield event

    async def regenerate(
        self,
        session: SessionLike,
        message_id: str,
        *,
        controller: RunController | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        context: dict | None = None,
        history: HistoryPolicy | None = None,
    ) -> RunResult:
        """Add a new reply to a user message, as a sibling branch of the old reply.

        ``message_id`` is the user message, or a reply to it (the nearest user
        message above it is used). The model sees the path up to that user
        message; the new replies are appended under it and become the latest
        leaf. Recorded as a run whose ``input`` is that user message's text.
        ``RunResult.messages`` holds the new replies only. That user message
        passes the input guardrails again, the new replies the output ones;
        ``context`` (not stored with the first answer) is shown beside it.
        """
        return await self._execute(
            prompt=None,
            session=session,
            controller=controller,
            timeout=timeout,
            run_id=run_id,
            metadata=None,
            context=context,
            regenerate_of=message_id,
            listener=None,
            history=history,
        )

    def regenerate_sync(
        self,
        session: SessionLike,
        message_id: str,
        *,
        controller: RunController | None = None,
        timeout: float | None = None,
        run_id: str | None = None,
        context: dict | None = None,
        history: HistoryPolicy | None = None,
    ) -> RunResult:
        """:meth:`regenerate` from sync code (works inside a running event loop too)."""
        return run_coroutine_sync(
            lambda: self.regenerate(
                session,
                message_id,
                controller=controller,
                timeout=timeout,
                run_id=run_id,
                context=context,
                history=history,
            )
        )

    def summarizer(self, *, instructions: str | None = _SUMMARY_SYSTEM) -> Callable[[str], str]:
        """A ``summarize(prompt) -> str`` that asks this agent's model, for compaction::

            session.on_compaction(sk.create_compact_function(agent.summarizer()))

        The function is synchronous, so it can run inside a store write, and it
        works whether or not an event loop is running in the calling thread.
        """

        async def complete(prompt: str) -> str:
            chat = ([{"role": "system", "content": instructions}] if instructions else []) + [
                {"role": "user", "content": prompt}
            ]
            reply = await self._call_model(chat, None, tools=False)
            return reply.text

        def summarize(prompt: str) -> str:
            if not isinstance(prompt, str):
                raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
            return run_coroutine_sync(lambda: complete(prompt))

        summarize.__name__ = f"{self.name or 'agent'}_summarizer"
        return summarize

    # ------------------------------------------------------------------ the run

    async def _execute(
        self,
        *,
        prompt: str | dict | None,
        session: SessionLike | None,
        controller: RunController | None,
        timeout: float | None,
        run_id: str | None,
        metadata: dict | None,
        context: dict | None,
        regenerate_of: str | None,
        listener: Callable[[dict], object] | None,
        at: str | _Root | None = None,
        history: HistoryPolicy | None = None,
        labels: dict | None = None,
    ) -> RunResult:
        timeout = _check_timeout(timeout)
        policy = check_policy(history) or self.history
        if labels is not None and not isinstance(labels, dict):
            raise TypeError(f"labels must be a dict or None, got {type(labels).__name__}")
        if at is not None and at is not ROOT and not isinstance(at, str):
            raise TypeError(f"at must be a message id (str), ROOT or None, got {type(at).__name__}")
        context_json = _check_context(context)
        if controller is not None and not isinstance(controller, RunController):
            raise TypeError(f"controller must be a RunController, got {type(controller).__name__}")
        if metadata is not None and not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        if run_id is not None and (not isinstance(run_id, str) or not run_id):
            raise TypeError("run_id must be a non-empty str")
        if session is None:
            session = create_session()
        target = _RunTarget(session)
        run_id = run_id or new_run_id()

        # Read everything the run needs before recording it: a bad argument fails cleanly.
        if regenerate_of is None:
            input_text = _check_prompt(prompt)
            # Store reads run on a thread: the loop keeps serving while a long history loads.
            if at is None:
                parent_id = await asyncio.to_thread(target.leaf_id)
            else:  # a run from an earlier node: its new turn is a branch under that node
                _require_tree(target.session, "run(at=...)")
                parent_id = None if at is ROOT else cast(str, at)
            # an id not in this session raises MessageNotFound here, before anything is recorded
            path = await asyncio.to_thread(target.history, parent_id)
        else:
            _require_tree(target.session, "regenerate")
            parent_id, path, input_text = self._regeneration_point(target.session, regenerate_of)

        state = RunState(
            run_id=run_id,
            model_name=getattr(self.model, "name", None),
            system=self.instructions,
            history=path,
            max_steps=self.max_steps,
            context_json=context_json,
        )
        if regenerate_of is None:
            first = state.add_user(
                cast("str | dict", prompt),
                metadata=metadata,  # _check_prompt passed it
                with_run_context=True,
            )
            if labels:
                first["metadata"]["labels"] = copy.deepcopy(labels)
            validate(first)  # a bad prompt or metadata fails now, not after the model calls
            dumps(first)
            run_input = [first]
        else:
            state.show_context_with_last_user()
            run_input = path[-1:]
            path = path[:-1]
        if policy is not None:
            state.show_only(await asyncio.to_thread(policy.apply, path, run_input))

        emitter = EventEmitter(target.run_log, target.session_id, run_id)
        if listener is not None:
            emitter.listeners.append(listener)
        if controller is not None:
            emitter.listeners.append(controller._take_event)

        loop = asyncio.get_running_loop()
        inner: asyncio.Task | None = None

        def cancel_inner() -> None:
            if inner is not None and not inner.done():
                inner.cancel()

        def cancel() -> None:  # called from any thread by RunController.interrupt()
            try:
                loop.call_soon_threadsafe(cancel_inner)
            except RuntimeError:  # the loop is closed: the run is over anyway
                pass

        if controller is not None:
            controller._attach(run_id, cancel)
        try:
            # The run record says what the run was: where its turn hangs, and its labels
            # (a variant's name and settings, a replay's source...), ``at`` always meaning that.
            meta = {"at": parent_id, **{k: v for k, v in (labels or {}).items() if k != "at"}}
            target.run_log.begin(target.session_id, run_id, input_text, meta=meta)
            try:
                emitter.emit("run.start", input=input_text, at=parent_id, **({"labels": labels} if labels else {}))
                inner = asyncio.ensure_future(self._turns(state, emitter, controller, run_input))
                if controller is not None and controller._was_interrupted():
                    inner.cancel()
                timer = asyncio.timeout(timeout)
                try:
                    async with timer:
                        await inner
                except TimeoutError:
                    if timer.expired():
                        raise RunTimeout(f"run {run_id} did not finish within {timeout:g} s", run_id=run_id) from None
                    raise
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if (
                        controller is not None
                        and controller._was_interrupted()
                        and (task is None or task.cancelling() == 0)
                    ):
                        raise RunInterrupted(f"run {run_id} was interrupted", run_id=run_id) from None
                    raise
                if controller is not None:
                    controller._set_cancel(None)  # the reply is complete: too late to interrupt
                try:
                    stored = await asyncio.to_thread(target.append, state.new_messages, parent_id)
                except Exception as exc:
                    raise RunFailed(f"run {run_id}: the new messages could not be saved: {exc}", run_id=run_id) from exc
                usage = self._run_usage(state)
                self._finish(target, emitter, status="completed", error=None, usage=usage)
                return RunResult(
                    run_id=run_id,
                    status="completed",
                    text=state.text,
                    messages=stored,
                    usage=usage,
                    session_id=target.session_id,
                    session=session,
                )
            except RunFailed as exc:
                if exc.run_id is None:
                    exc.run_id = run_id
                status = "interrupted" if isinstance(exc, RunInterrupted) else "failed"
                self._finish(target, emitter, status=status, error=exc, usage=self._run_usage(state))
                raise
            except asyncio.CancelledError:
                self._finish(target, emitter, status="interrupted", error="cancelled", usage=self._run_usage(state))
                raise
            except BaseException as exc:
                self._finish(target, emitter, status="failed", error=exc, usage=self._run_usage(state))
                raise
            finally:
                if inner is not None and not inner.done():
                    inner.cancel()
        finally:
            if controller is not None:
                controller._detach(run_id)

    def _run_usage(self, state: RunState) -> dict:
        """The usage a run reports when it ends (never a made-up zero cost)."""
        if state.calls:
            return state.final_usage(None)  # the calls' own costs decide
        try:
            priced = model_priced(self.model)
        except Exception:  # deciding the price must not hide the run's own error
            priced = None
        return state.final_usage(priced)

    def _finish(
        self,
        target: _RunTarget,
        emitter: EventEmitter,
        *,
        status: str,
        error: BaseException | str | None,
        usage: dict,
    ) -> None:
        """Record the end of a run, then announce it (best effort on a failing store)."""
        error_type: str | None
        text: str | None
        if isinstance(error, BaseException):
            error_type = type(error).__name__
            text = str(error) or error_type
        else:
            error_type = None if error is None else "CancelledError"
            text = error
        try:
            target.run_log.end(emitter.run_id, status=status, error=text, usage=usage)
        except Exception:
            if status == "completed":
                raise
            log.exception("could not record the end of run %s", emitter.run_id)
        try:
            emitter.emit("run.end", status=status, error=text, error_type=error_type, usage=usage)
        except Exception:
            if status == "completed":
                raise
            log.exception("could not record the run.end event of run %s", emitter.run_id)

    def _regeneration_point(self, session: Conversation, message_id: str) -> tuple[str, list[dict], str]:
        """Find the user message to answer again: (its id, the path up to it, its text)."""
        if not isinstance(message_id, str):
            raise TypeError(f"message_id must be a str, got {type(message_id).__name__}")
        if session.get(message_id) is None:
            raise MessageNotFound(f"no message {message_id!r} in session {session.session_id!r}")
        for compacted in (True, False):
            path = list(session.get_history(leaf_id=message_id, compacted=compacted))
            for index in range(len(path) - 1, -1, -1):
                message = path[index]
                if message.get("role") == "user" and not str(message.get("id", "")).startswith("compaction:"):
                    return message["id"], path[: index + 1], text_of(message, "")
        raise ValueError(f"message {message_id!r} has no user message to answer on its path")

    async def _turns(
        self,
        state: RunState,
        emitter: EventEmitter,
        controller: RunController | None,
        run_input: list[dict],
    ) -> None:
        """Take turns until the model gives a final reply and the queue is empty.

        The guardrails run here, inside the run's timeout and interrupt.
        """
        await run_guardrails("input", self.input_guardrails, run_input, state.run_id)
        opening: dict = {}
        while True:
            chat = state.next_call()
            emitter.emit("turn.start", turn=state.turn, **opening)
            reply = await self._call_model(chat, emitter)
            emitter.emit("usage", **reply.usage)
            state.add_reply(reply)
            for call in reply.tool_calls:
                emitter.emit("tool.call", tool_call_id=call.id, name=call.name, input=call.arguments)
                output, error = await self._call_tool(call, state.context_json)
                state.set_tool_result(call.id, output=output, error=error)
                emitter.emit("tool.result", tool_call_id=call.id, output=output, error=error)
            state.end_turn()
            emitter.emit("turn.end", stop_reason=reply.stop_reason)
            item = controller._pop() if controller is not None else None
            if item is not None:
                joined = state.add_user(item["text"], metadata=item.get("metadata"))
                await run_guardrails("input", self.input_guardrails, [joined], state.run_id)
                opening = {"input": item["text"], "mode": item["mode"]}
                continue
            if not reply.tool_calls:
                break
            opening = {}
        await run_guardrails("output", self.output_guardrails, state.new_messages, state.run_id)

    async def _call_model(self, chat: list[dict], emitter: EventEmitter | None, *, tools: bool = True) -> ModelReply:
        """One model call: deltas become events; provider failures become ModelError."""
        name = getattr(self.model, "name", type(self.model).__name__)
        stream = self.model.stream(chat, tools=self._schemas if tools else [])
        iterator = stream.__aiter__()
        reply: ModelReply | None = None
        try:
            while True:
                try:
                    item = await iterator.__anext__()
                except StopAsyncIteration:
                    break
                except RunFailed:
                    raise
                except Exception as exc:
                    raise ModelError(f"model {name!r} failed: {type(exc).__name__}: {exc}") from exc
                if isinstance(item, ModelReply):
                    reply = item
                elif emitter is None:
                    continue
                elif isinstance(item, TextDelta):
                    if item.text:
                        emitter.emit("delta.text", text=item.text)
                elif isinstance(item, ReasoningDelta):
                    if item.text:
                        emitter.emit("delta.reasoning", text=item.text)
        finally:
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                try:
                    await aclose()
                except Exception:  # closing a broken provider stream is not worth a second error
                    pass
        if reply is None:
            raise ModelError(f"model {name!r} ended its reply stream without a ModelReply")
        return _with_usage_keys(reply, name)

    async def _call_tool(self, call: ToolCall, context_json: str | None = None) -> tuple[object, str | None]:
        """Run one tool call; a tool that raises becomes an error result, not a failed run.

        A tool with a ``context`` parameter gets its own copy of the run's context.
        """
        if call.error is not None:
            return None, call.error
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return None, f"unknown tool {call.name!r} (available: {known})"
        try:
            context = None if context_json is None else json.loads(context_json)
            output = await tool.call(call.arguments or {}, context=context)
        except Exception as exc:
            return None, f"{type(exc).__name__}: {exc}"
        return json_safe(output), None


def _with_usage_keys(reply: ModelReply, model_name: str) -> ModelReply:
    """Make sure a reply's usage has exactly the keys of a ``usage`` event (custom models may give fewer)."""
    usage = reply.usage if isinstance(reply.usage, dict) else {}
    cost = usage.get("cost_usd")
    normal = make_usage(
        model=usage.get("model") or model_name,
        input_tokens=usage.get("in"),
        output_tokens=usage.get("out"),
        cache_read=usage.get("cache_read"),
        cache_write=usage.get("cache_write"),
        cost_usd=cost if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
    )
    return reply if normal == usage else dataclasses.replace(reply, usage=normal)


async def _drain(queue: asyncio.Queue, task: asyncio.Future) -> AsyncIterator[dict]:
    """Yield queued events until ``run.end``, then return the task's outcome (or raise it)."""
    try:
        while True:
            if task.done() and queue.empty():
                break
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                event = getter.result()
                yield event
                if event.get("kind") == "run.end":
                    break
            else:
                getter.cancel()
        await task  # raises the run's error, if any
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except BaseException:
                pass
