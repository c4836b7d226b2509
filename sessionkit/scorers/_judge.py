"""A model as judge: :func:`llm_judge` asks a model, through the agent's model layer
(litellm), to grade one unit against a rubric and answer in JSON (docs/judging.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from .. import parts as _parts
from ..agent.models import ChatModel, LiteLLMModel, ModelReply, add_usage, empty_usage
from ..errors import InvalidLabel, ModelError
from ..store import Score, Unit, scorer

__all__ = ["LLMJudge", "llm_judge"]

#: The longest text of one message part shown to the judge (characters; longer is cut).
PART_CHARS = 4000

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def _render(message: dict) -> str:
    """A message as the judge reads it: its role, its text, its tool calls and results."""
    lines = []
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            lines.append(part["text"][:PART_CHARS])
        elif _parts.is_tool_part(part):
            call = f"[tool call {_parts.tool_name(part)}({json.dumps(part.get('input'), ensure_ascii=False)})"
            if part.get("state") == "output-error":
                call += f" -> error: {part.get('errorText')}"
            elif "output" in part:
                call += f" -> {json.dumps(part.get('output'), ensure_ascii=False)}"
            lines.append(call[:PART_CHARS] + "]")
    return f"[{message.get('role')}] " + "\n".join(lines)


def _tag(tag: Any) -> str:
    """A tag a label takes (docs/labels.md): refused early, before any model is asked."""
    if not isinstance(tag, str) or not tag.strip() or tag != tag.strip() or len(tag) > 100 or not tag.isprintable():
        raise InvalidLabel(f"a tag is a str of 1 to 100 printable characters without surrounding spaces, got {tag!r}")
    return tag


class LLMJudge:
    """A scorer asking a model to judge each unit against a rubric (see :func:`llm_judge`)."""

    name: str
    version: str
    source: str

    def __init__(
        self,
        rubric: str,
        *,
        model: str | ChatModel,
        scale: tuple[float, float] | None = None,
        tags: Iterable[str] | None = None,
        name: str = "judge",
        version: int | str = 1,
        history: bool = True,
        **litellm_kwargs: Any,
    ):
        if not isinstance(rubric, str) or not rubric.strip():
            raise ValueError("llm_judge needs a rubric: a non-empty str saying what to judge and how")
        self.rubric = rubric
        scorer(self, name=name, version=version, source="llm")  # checks and sets name, version, source
        self.tags = None if tags is None else [_tag(t) for t in tags]
        if self.tags == []:
            raise ValueError("tags is None (the judge names a tag) or a list of one tag or more")
        if scale is not None:
            if (
                not isinstance(scale, (tuple, list))
                or len(scale) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in scale)
                or not scale[0] < scale[1]
            ):
                raise ValueError(f"scale is (lowest, highest), two numbers in order, got {scale!r}")
            scale = (scale[0], scale[1])
        self.scale = scale
        self.history = bool(history)
        if isinstance(model, str):
            options = {"response_format": {"type": "json_object"}, **litellm_kwargs}
            if options["response_format"] is None:
                del options["response_format"]
            self.model: ChatModel = LiteLLMModel(model, stream=False, **options)
        elif isinstance(model, ChatModel):
            if litellm_kwargs:
                raise TypeError("litellm options go with a model name; a model object carries its own")
            self.model = model
        else:
            raise TypeError(f"model is a litellm model name or a model object (sk.LiteLLMModel), got {model!r}")

    def __repr__(self) -> str:
        return f"LLMJudge({self.name}@{self.version}, model={getattr(self.model, 'name', self.model)!r})"

    # -- the prompt ------------------------------------------------------------------
    def _answer_format(self) -> str:
        fields = []
        if self.tags is not None:
            fields.append(f'"tag": one of {json.dumps(self.tags, ensure_ascii=False)}')
        elif self.scale is None:
            fields.append('"tag": a short label for your verdict (a word or two, no line break)')
        if self.scale is not None:
            fields.append(f'"rating": a number from {self.scale[0]:g} (worst) to {self.scale[1]:g} (best)')
        fields.append('"rationale": one or two sentences saying why')
        return "{" + ", ".join(fields) + "}"

    def prompt(self, unit: Unit) -> list[dict]:
        """The chat messages the judge sends for ``unit`` (a system message, then the
        rubric and the unit in a user message)."""
        system = (
            "You judge conversations between users and an AI assistant. Read the rubric, then the "
            f"{unit.level} to judge, and answer with one JSON object and nothing else: {self._answer_format()}."
        )
        text = f"Rubric:\n{self.rubric.strip()}\n\n"
        if self.history and unit.history:
            earlier = "\n\n".join(_render(m) for m in unit.history)
            text += f"Earlier in the conversation (context, not judged):\n{earlier}\n\n"
        judged = "\n\n".join(_render(m) for m in unit.messages)
        text += f"The {unit.level} to judge:\n{judged}"
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]

    # -- the reply -------------------------------------------------------------------
    def parse(self, text: str) -> Score:
        """The judge's reply as a :class:`Score`; ``ValueError`` saying what is wrong with it."""
        fenced = _FENCE.match(text or "")
        try:
            data = json.loads(fenced.group(1) if fenced else text)
        except (TypeError, ValueError):
            raise ValueError(f"the reply is not a JSON object: {str(text)[:200]!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"the reply is JSON but not an object: {str(text)[:200]!r}")
        tag = data.get("tag")
        if self.tags is None and self.scale is not None:
            tag = self.name  # a rating judge: its tag is its name, the rating is the verdict
        if not isinstance(tag, str):
            raise ValueError(f"the reply has no 'tag' string (got {tag!r})")
        if self.tags is not None and tag not in self.tags:
            raise ValueError(f"the tag {tag!r} is not one of {self.tags}")
        try:
            tag = _tag(tag)
        except ValueError as exc:
            raise ValueError(f"the tag {tag!r} is not usable: {exc}") from None
        rating = data.get("rating")
        if self.scale is not None:
            if isinstance(rating, bool) or not isinstance(rating, (int, float)) or not math.isfinite(rating):
                raise ValueError(f"the reply has no numeric 'rating' (got {rating!r})")
            if not self.scale[0] <= rating <= self.scale[1]:
                raise ValueError(f"the rating {rating!r} is outside {self.scale[0]:g} to {self.scale[1]:g}")
        elif rating is not None and (isinstance(rating, bool) or not isinstance(rating, (int, float))):
            rating = None  # a rating nobody asked for, not a number: left out
        rationale = data.get("rationale")
        rationale = rationale[:20_000] if isinstance(rationale, str) and rationale.strip() else None
        return Score(tag, None if rating is None else float(rating), rationale)

    async def _ask(self, messages: list[dict]) -> ModelReply:
        reply = None
        async for item in self.model.stream(messages, tools=[]):
            if isinstance(item, ModelReply):
                reply = item
        if reply is None:
            raise ModelError(f"judge {self.name}@{self.version}: the model gave no reply")
        return reply

    def _ask_sync(self, messages: list[dict]) -> ModelReply:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self._ask(messages))
        # called from inside an event loop (a notebook cell): ask on a thread of its own
        with cf.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self._ask(messages)).result()

    def __call__(self, unit: Unit) -> Score:
        """Ask the model about ``unit``; one retry when its reply is not a usable JSON
        answer (the model is shown its reply and what is wrong with it)."""
        messages = self.prompt(unit)
        usage = empty_usage(getattr(self.model, "name", None))
        for attempt in (1, 2):
            reply = self._ask_sync(messages)
            usage = add_usage(usage, reply.usage)
            try:
                found = self.parse(reply.text)
            except ValueError as exc:
                if attempt == 2:
                    raise ModelError(
                        f"judge {self.name}@{self.version} gave no usable answer twice for the {unit.level} at"
                        f" {unit.message_id!r} of session {unit.session_id!r}: {exc}"
                    ) from None
                messages = [
                    *messages,
                    {"role": "assistant", "content": reply.text},
                    {
                        "role": "user",
                        "content": f"That answer is not usable: {exc}. Answer again with the JSON object only.",
                    },
                ]
                continue
            return Score(found.tag, found.rating, found.rationale, usage=usage, prompt=messages[1]["content"])
        raise AssertionError("unreachable")  # pragma: no cover


def llm_judge(
    rubric: str,
    *,
    model: str | ChatModel,
    scale: tuple[float, float] | None = None,
    tags: Iterable[str] | None = None,
    name: str = "judge",
    version: int | str = 1,
    history: bool = True,
    **litellm_kwargs: Any,
) -> LLMJudge:
    """A scorer that asks ``model`` to judge each unit against ``rubric`` (docs/judging.md).

    The model answers one JSON object: a ``tag`` (one of ``tags`` when given), a
    ``rating`` (a number within ``scale``, ``(lowest, highest)``, when given) and a
    ``rationale``. With a ``scale`` and no ``tags`` the tag is the judge's ``name`` and
    the rating carries the verdict. A reply that is not such an object is answered
    once with what is wrong with it; a second bad reply raises ``sk.ModelError``.
    ``history`` shows the judge the conversation above the unit as context.
    ``judge.prompt(unit)`` gives the chat messages sent. ``model`` is a litellm model
    name (``litellm_kwargs`` go to each call: ``temperature``, ``api_base``,
    ``mock_response``...; JSON output is asked with ``response_format``, which
    ``response_format=None`` leaves out) or a model object (``sk.LiteLLMModel``). Its
    labels are ``source="llm"``, ``scorer="name@version"``; ``store.score`` records
    each call as a run of the unit's session (model, tokens, cost, times).
    """
    return LLMJudge(
        rubric, model=model, scale=scale, tags=tags, name=name, version=version, history=history, **litellm_kwargs
    )
