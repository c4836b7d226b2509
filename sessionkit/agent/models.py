"""The model layer: UIMessages <-> chat messages, the model protocol, and litellm.

A run talks to a model through a small protocol, :class:`ChatModel`: an async
``stream(messages, *, tools)`` that yields :class:`TextDelta` and
:class:`ReasoningDelta` while the model writes and ends with one
:class:`ModelReply` (the whole reply: text, tool calls, usage, stop reason).
``messages`` are OpenAI-style chat messages, the lingua franca every provider
adapter speaks; the conversion from the stored UIMessages happens here, in
:func:`to_chat_messages`, so a model object never sees the store's format.

:class:`LiteLLMModel` is the implementation for every provider litellm
supports. This module is the only place litellm is imported, and only when a
model is first called: ``import sessionkit`` never pays litellm's import time,
and ``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set before the import (unless the
caller chose otherwise) so importing it never reaches for the network.

Usage is a plain dict with the keys of the run's ``usage`` event (docs/agents.md)::

    {"in": 12, "out": 7, "cache_read": 0, "cache_write": 0,
     "cost_usd": 6e-06, "model": "gpt-4o-mini"}

``cost_usd`` is ``None`` when the model is not in litellm's price map: an
unknown cost is never reported as zero.

A run's ``context`` (docs/agents.md) reaches the model through
:func:`with_context`: a text part holding the JSON object between
``<context>`` tags, placed before the prompt inside that turn's user message.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast, runtime_checkable

from ..errors import ModelError, RunFailed, missing

__all__ = [
    "ChatModel",
    "LiteLLMModel",
    "ModelReply",
    "ReasoningDelta",
    "TextDelta",
    "ToolCall",
    "add_callback",
    "add_usage",
    "callback_base",
    "context_block",
    "empty_usage",
    "from_chat_messages",
    "make_usage",
    "model_priced",
    "remove_callback",
    "response_usage",
    "to_chat_messages",
    "with_context",
]


# --------------------------------------------------------------------------- protocol


@dataclass(frozen=True)
class TextDelta:
    """New characters of the reply's text, as the model writes them."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """New characters of the model's reasoning (for models that expose it)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for.

    ``arguments`` is the parsed JSON object; when the model sent arguments that
    are not a JSON object, ``arguments`` is ``None`` and ``error`` says why (the
    run then answers the call with that error instead of calling the tool).
    """

    id: str
    name: str
    arguments: dict | None
    error: str | None = None


@dataclass(frozen=True)
class ModelReply:
    """A whole model reply: the last item a :class:`ChatModel` stream yields.

    ``stop_reason`` is ``"stop"``, ``"tool_calls"``, ``"length"``,
    ``"content_filter"`` or whatever else the provider reported.
    """

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: dict = field(default_factory=lambda: empty_usage())
    stop_reason: str = "stop"


@runtime_checkable
class ChatModel(Protocol):
    """What :class:`sessionkit.Agent` needs from a model object.

    ``name`` is reported in usage events. ``stream`` receives OpenAI-style chat
    messages and tool schemas (``[{"type": "function", "function": {...}}]``,
    empty when the agent has no tools), yields deltas and ends with exactly one
    :class:`ModelReply`. Raising fails the run with :class:`sessionkit.ModelError`
    (the exception is kept as its cause); cancellation must be allowed to
    propagate, since that is how timeouts and interrupts stop a call.

    A model may also say whether it is priced (an attribute or property
    ``priced``: ``True``, ``False`` or ``None`` for unknown). A run that made no
    completed model call reports a cost of ``0.0`` only for a model that says
    ``True``, and ``None`` (unknown) otherwise.
    """

    name: str

    def stream(
        self, messages: list[dict], *, tools: list[dict]
    ) -> AsyncIterator[TextDelta | ReasoningDelta | ModelReply]: ...


# --------------------------------------------------------------------------- usage


def empty_usage(model: str | None = None) -> dict:
    """Usage of nothing yet: zero tokens and a zero (known) cost."""
    return {"in": 0, "out": 0, "cache_read": 0, "cache_write": 0, "cost_usd": 0.0, "model": model}


def make_usage(
    *,
    model: str | None,
    input_tokens: int | None = 0,
    output_tokens: int | None = 0,
    cache_read: int | None = 0,
    cache_write: int | None = 0,
    cost_usd: float | None = None,
) -> dict:
    """Build one model call's usage dict (the keys of a ``usage`` event, docs/agents.md); missing counts become 0."""
    return {
        "in": int(input_tokens or 0),
        "out": int(output_tokens or 0),
        "cache_read": int(cache_read or 0),
        "cache_write": int(cache_write or 0),
        "cost_usd": None if cost_usd is None else float(cost_usd),
        "model": model,
    }


def add_usage(total: dict, usage: dict) -> dict:
    """Sum two usage dicts. A cost stays known only while every part of it is known."""
    cost_a, cost_b = total.get("cost_usd"), usage.get("cost_usd")
    return {
        "in": total.get("in", 0) + usage.get("in", 0),
        "out": total.get("out", 0) + usage.get("out", 0),
        "cache_read": total.get("cache_read", 0) + usage.get("cache_read", 0),
        "cache_write": total.get("cache_write", 0) + usage.get("cache_write", 0),
        "cost_usd": None if cost_a is None or cost_b is None else cost_a + cost_b,
        "model": usage.get("model") or total.get("model"),
    }


def model_priced(model: object) -> bool | None:
    """Whether a model object says it has a known price (its optional ``priced``), else None."""
    try:
        priced = getattr(model, "priced", None)
    except Exception:  # a property that could not find out
        return None
    return priced if isinstance(priced, bool) else None


# --------------------------------------------------------------------------- run context


def context_block(context_json: str) -> str:
    """The text the model sees for a run's context: the JSON object between ``<context>`` tags.

    >>> context_block('{"plan": "pro"}')
    '<context>\\n{"plan": "pro"}\\n</context>'
    """
    return f"<context>\n{context_json}\n</context>"


def with_context(chat_message: dict, context_json: str) -> dict:
    """A chat user message with the run's context as a text part placed before its content.

    ``{"role": "user", "content": "Hi"}`` becomes ``{"role": "user", "content":
    [{"type": "text", "text": "<context>\\n{...}\\n</context>"}, {"type": "text",
    "text": "Hi"}]}``; content that is already a list of parts keeps its parts
    after the context part. The stored message is not touched.
    """
    content = chat_message.get("content")
    if isinstance(content, list):
        parts = list(content)
    elif content is None or content == "":
        parts = []
    else:
        parts = [{"type": "text", "text": str(content)}]
    return {**chat_message, "content": [{"type": "text", "text": context_block(context_json)}, *parts]}


# --------------------------------------------------------------------------- UIMessage -> chat


def _json_text(value: object) -> str:
    """A tool output as the text a chat ``tool`` message carries."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _file_content(part: dict) -> dict | None:
    """A UIMessage ``file`` part as an OpenAI content block (images inline, others as files)."""
    media = part.get("mediaType") or "application/octet-stream"
    url = part.get("url")
    if not isinstance(url, str) or not url:
        data = part.get("data")
        if not isinstance(data, str) or not data:
            return None
        url = f"data:{media};base64,{data}"
    if media.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    block: dict = {"type": "file", "file": {"file_data": url} if url.startswith("data:") else {"file_id": url}}
    if part.get("filename"):
        block["file"]["filename"] = part["filename"]
    return block


def _user_content(parts: list[dict]) -> str | list[dict] | None:
    texts = [p.get("text", "") for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
    converted = [_file_content(p) for p in parts if p.get("type") == "file"]
    files = [f for f in converted if f is not None]
    if not files:
        return "\n\n".join(texts) if texts else None
    blocks: list[dict] = [{"type": "text", "text": t} for t in texts]
    return blocks + files


def _assistant_steps(parts: list[dict]) -> list[tuple[list[str], list[dict]]]:
    """Split an assistant message's parts into steps of (texts, tool parts).

    A UIMessage written by the AI SDK may hold several model steps in one
    message (``step-start`` parts, or text that follows a tool call); in chat
    format each step is its own assistant message followed by its tool results.
    """
    steps: list[tuple[list[str], list[dict]]] = [([], [])]
    for part in parts:
        ptype = part.get("type")
        texts, tools = steps[-1]
        if ptype == "step-start":
            if texts or tools:
                steps.append(([], []))
        elif ptype == "text" and isinstance(part.get("text"), str):
            if tools:  # text after a tool call belongs to the next step
                steps.append(([part["text"]], []))
            else:
                texts.append(part["text"])
        elif isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool"):
            tools.append(part)
    return [s for s in steps if s[0] or s[1]]


def _arguments_json(value: object) -> str:
    """Tool input as the JSON string chat ``tool_calls`` carry (a missing input is ``{}``)."""
    return json.dumps({} if value is None else value, ensure_ascii=False)


def _tool_name(part: dict) -> str:
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName") or "tool")
    return part["type"][len("tool-") :]


def to_chat_messages(messages: Iterable[dict], *, system: str | None = None) -> list[dict]:
    """Convert stored UIMessages to OpenAI-style chat messages for a model call.

    - ``system`` (the agent's instructions) comes first when given.
    - ``text`` parts become ``content``; ``file`` parts of a user message become
      image or file content blocks.
    - ``tool-<name>`` parts of an assistant message become ``tool_calls`` followed
      by one ``tool`` message per call (``output``, or ``errorText`` for a failed
      call). A call without a result (``input-available``) is left out: providers
      refuse a call that has no answer.
    - ``reasoning`` parts and unknown part types are not sent back to the model.
    - Empty messages are skipped.
    """
    out: list[dict] = []
    if system:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message.get("role")
        parts = [p for p in message.get("parts") or () if isinstance(p, dict)]
        if role == "assistant":
            for texts, tools in _assistant_steps(parts):
                done = [p for p in tools if p.get("state") in ("output-available", "output-error")]
                text = "".join(texts)
                if not text and not done:
                    continue
                chat: dict = {"role": "assistant", "content": text or None}
                if done:
                    chat["tool_calls"] = [
                        {
                            "id": str(p.get("toolCallId")),
                            "type": "function",
                            "function": {
                                "name": _tool_name(p),
                                "arguments": _arguments_json(p.get("input")),
                            },
                        }
                        for p in done
                    ]
                out.append(chat)
                for p in done:
                    if p.get("state") == "output-error":
                        content = f"Error: {p.get('errorText') or 'the tool failed'}"
                    else:
                        content = _json_text(p.get("output"))
                    out.append({"role": "tool", "tool_call_id": str(p.get("toolCallId")), "content": content})
        elif role == "user":
            user_content = _user_content(parts)
            if user_content is not None:
                out.append({"role": "user", "content": user_content})
        else:  # system and any other role: its text, as given
            texts = [p["text"] for p in parts if p.get("type") == "text" and isinstance(p.get("text"), str)]
            if texts:
                out.append({"role": role, "content": "\n\n".join(texts)})
    return out


# --------------------------------------------------------------------------- chat -> UIMessage


def _chat_text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return str(content)


def _parse_tool_output(text: str) -> object:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def from_chat_messages(chat: Iterable[dict], *, id_prefix: str = "msg") -> list[dict]:
    """Convert OpenAI-style chat messages to UIMessages (the inverse of :func:`to_chat_messages`).

    Each assistant ``tool_calls`` entry becomes a ``tool-<name>`` part whose
    ``input`` is the parsed arguments; the matching ``tool`` message's content
    becomes that part's ``output`` (JSON decoded when it is JSON) with state
    ``output-available``; ``tool`` messages do not become messages of their own.
    Messages without an ``id`` get ``<id_prefix>-<index>``.
    """
    result: list[dict] = []
    pending: dict[str, dict] = {}
    for index, msg in enumerate(chat):
        role = msg.get("role")
        if role == "tool":
            part = pending.get(str(msg.get("tool_call_id")))
            if part is not None:
                part["output"] = _parse_tool_output(_chat_text(msg.get("content")))
                part["state"] = "output-available"
            continue
        parts: list[dict] = []
        reasoning = msg.get("reasoning_content")
        if reasoning:
            parts.append({"type": "reasoning", "text": reasoning})
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if block.get("type") == "text":
                    parts.append({"type": "text", "text": block.get("text", "")})
                elif block.get("type") == "image_url":
                    url = (block.get("image_url") or {}).get("url", "")
                    media = url[5:].split(";", 1)[0] if url.startswith("data:") else "image/*"
                    parts.append({"type": "file", "mediaType": media, "url": url})
        elif content:
            parts.append({"type": "text", "text": _chat_text(content)})
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") or {}
            raw = fn.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) and raw else (raw or {})
            except ValueError:
                args = raw
            part = {
                "type": f"tool-{fn.get('name')}",
                "toolCallId": str(call.get("id")),
                "state": "input-available",
                "input": args,
            }
            pending[part["toolCallId"]] = part
            parts.append(part)
        result.append({"id": str(msg.get("id") or f"{id_prefix}-{index}"), "role": role, "parts": parts})
    return result


# --------------------------------------------------------------------------- litellm


class _LiteLLM(Protocol):
    """What sessionkit uses of the litellm module (mypy does not read litellm itself).

    Its responses are litellm's own objects, read field by field with :func:`_get`.
    """

    callbacks: list[object]

    # a response, or with stream=True an async iterator of chunks
    def acompletion(self, **kwargs: object) -> Awaitable[Any]: ...

    def embedding(self, **kwargs: object) -> object: ...

    def stream_chunk_builder(self, chunks: list[object], messages: list[dict] | None = None) -> object: ...

    def get_model_info(self, model: str | None, custom_llm_provider: object = None) -> dict: ...

    def completion_cost(self, completion_response: object) -> float | None: ...


_litellm_lock = threading.Lock()
_litellm_module: _LiteLLM | None = None


def _litellm() -> _LiteLLM:
    """Import litellm once, offline-friendly and quiet."""
    global _litellm_module
    if _litellm_module is not None:
        return _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            # The bundled price map is enough for cost; fetching the remote one on import
            # stalls offline machines and prints warnings into notebooks.
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                import litellm
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise missing("agents", "litellm", exc) from exc
            litellm.suppress_debug_info = True
            _litellm_module = litellm
    return _litellm_module


def embed_texts(model: str, texts: list[str], **options: object) -> list[list[float]]:
    """One vector per text from litellm's embedding model ``model`` (``store.embed``);
    ``options`` go to ``litellm.embedding`` (``api_base``, ``dimensions``...)."""
    response = _litellm().embedding(model=model, input=list(texts), **options)
    data = sorted(_get(response, "data") or [], key=lambda item: _get(item, "index", 0) or 0)
    return [list(_get(item, "embedding") or []) for item in data]


def _get(obj: object, name: str, default: object = None) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _parse_arguments(raw: object) -> tuple[dict | None, str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(cast(str, raw))  # anything but text raises TypeError, reported below
    except (TypeError, ValueError) as exc:
        return None, f"the tool arguments are not valid JSON ({exc}): {str(raw)[:200]}"
    if not isinstance(value, dict):
        return None, f"the tool arguments must be a JSON object, got {type(value).__name__}"
    return value, None


_RESERVED_OPTIONS = frozenset({"model", "messages", "tools"})
_SECRET_RE = re.compile(r"key|token|secret|password|credential|auth", re.IGNORECASE)

_STOP_REASONS = {"function_call": "tool_calls", "tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


class LiteLLMModel:
    """A :class:`ChatModel` for any provider litellm supports (``sk.LiteLLMModel``).

    ``sk.Agent(..., model="gpt-4o-mini")`` wraps the name in this class; build it
    yourself to pass litellm options, which go to every ``litellm.acompletion``
    call (``api_base``, ``api_key``, ``temperature``, ``max_tokens``,
    ``mock_response``...)::

        model = sk.LiteLLMModel("gpt-4o-mini", temperature=0)
        local = sk.LiteLLMModel("ollama/llama3", api_base="http://localhost:11434")
        offline = sk.LiteLLMModel("gpt-4o-mini", mock_response="Hi!")
        agent = sk.Agent("helper", "Be brief.", model)

    ``model``, ``messages`` and ``tools`` are set per call and cannot be options
    (``TypeError``). The repr hides the values of options that look like secrets.

    Replies are streamed (``stream=False`` asks for one response instead; the text
    then arrives as a single delta). Errors raised by litellm or the provider
    become :class:`sessionkit.ModelError` with the original as ``__cause__``.
    Cost comes from litellm's bundled price map; ``cost_usd`` is ``None`` for a
    model it does not price. Subclasses may override :meth:`call_options` to
    vary the options per call.
    """

    def __init__(self, model: str, *, stream: bool = True, **litellm_kwargs: object):
        if not isinstance(model, str) or not model:
            raise TypeError("model must be a non-empty litellm model name")
        reserved = sorted(set(litellm_kwargs) & _RESERVED_OPTIONS)
        if reserved:
            raise TypeError(
                f"LiteLLMModel sets {', '.join(reserved)} itself for each call (the run's chat "
                "and the agent's tools); pass the other litellm options only"
            )
        self.name = model
        self.streaming = bool(stream)
        self.options = dict(litellm_kwargs)

    def __repr__(self) -> str:
        shown = "".join(
            f", {key}={'***' if _SECRET_RE.search(key) else repr(value)}" for key, value in self.options.items()
        )
        return f"LiteLLMModel({self.name!r}{'' if self.streaming else ', stream=False'}{shown})"

    @property
    def priced(self) -> bool | None:
        """Whether litellm's price map (or a per-token price in the options) prices this model.

        ``None`` when litellm is not installed. A run of an unpriced model reports
        ``cost_usd`` ``None``, never ``0.0``.
        """
        options = self.options
        if options.get("input_cost_per_token") is not None or options.get("output_cost_per_token") is not None:
            return True
        try:
            litellm = _litellm()
        except ImportError:
            return None
        try:
            info = litellm.get_model_info(model=self.name, custom_llm_provider=self.options.get("custom_llm_provider"))
        except Exception:  # litellm raises for a model missing from its price map
            return False
        return info.get("input_cost_per_token") is not None or info.get("output_cost_per_token") is not None

    def call_options(self, messages: list[dict], tools: list[dict]) -> dict:
        """Extra ``litellm.acompletion`` keyword arguments for one call (default: ``options``)."""
        return dict(self.options)

    async def stream(
        self, messages: list[dict], *, tools: list[dict]
    ) -> AsyncIterator[TextDelta | ReasoningDelta | ModelReply]:
        """Call the model through litellm, yielding deltas, then the :class:`ModelReply`."""
        litellm = _litellm()
        kwargs = self.call_options(messages, tools)
        kwargs["model"] = self.name
        kwargs["messages"] = messages
        if tools:
            kwargs["tools"] = tools
        try:
            if not self.streaming:
                response = await litellm.acompletion(**kwargs)
                reply = self._reply(litellm, response)
                if reply.reasoning:
                    yield ReasoningDelta(reply.reasoning)
                if reply.text:
                    yield TextDelta(reply.text)
                yield reply
                return
            kwargs["stream"] = True
            kwargs.setdefault("stream_options", {"include_usage": True})
            response = await litellm.acompletion(**kwargs)
            chunks = []
            async for chunk in response:
                chunks.append(chunk)
                for choice in _get(chunk, "choices") or ():
                    delta = _get(choice, "delta")
                    reasoning = _get(delta, "reasoning_content")
                    if reasoning:
                        yield ReasoningDelta(reasoning)
                    text = _get(delta, "content")
                    if text:
                        yield TextDelta(text)
            built = litellm.stream_chunk_builder(chunks, messages=messages) if chunks else None
        except RunFailed:
            raise
        except Exception as exc:
            raise ModelError(f"model {self.name!r} failed: {exc}") from exc
        yield self._reply(litellm, built)

    def _reply(self, litellm: _LiteLLM, response: object) -> ModelReply:
        """Read text, reasoning, tool calls, usage and cost out of a litellm response."""
        if response is None:
            return ModelReply(usage=make_usage(model=self.name, cost_usd=None), stop_reason="stop")
        choices = _get(response, "choices") or []
        message = _get(choices[0], "message") if choices else None
        finish = (_get(choices[0], "finish_reason") if choices else None) or "stop"
        calls = []
        for index, call in enumerate(_get(message, "tool_calls") or ()):
            fn = _get(call, "function")
            args, error = _parse_arguments(_get(fn, "arguments"))
            calls.append(
                ToolCall(
                    id=str(_get(call, "id") or f"call_{index}"),
                    name=str(_get(fn, "name") or ""),
                    arguments=args,
                    error=error,
                )
            )
        stop = "tool_calls" if calls else _STOP_REASONS.get(finish, finish)
        return ModelReply(
            text=_chat_text(_get(message, "content")),
            reasoning=_get(message, "reasoning_content") or "",
            tool_calls=tuple(calls),
            usage=self._usage(litellm, response),
            stop_reason=stop,
        )

    def _usage(self, litellm: _LiteLLM, response: object) -> dict:
        return response_usage(response, model=self.name)


# --------------------------------------------------------------------------- usage of a response


def response_usage(response: object, *, model: str | None = None) -> dict:
    """One litellm response's usage dict (the keys of a ``usage`` event): its tokens, and its cost
    from litellm's price map (``None`` when the model is unpriced). ``model`` names the model when
    the response does not."""
    litellm = _litellm()
    usage = _get(response, "usage")
    details = _get(usage, "prompt_tokens_details")
    cache_read = _get(usage, "cache_read_input_tokens") or _get(details, "cached_tokens") or 0
    cache_write = _get(usage, "cache_creation_input_tokens") or 0
    return make_usage(
        model=_get(response, "model") or model,
        input_tokens=_get(usage, "prompt_tokens"),
        output_tokens=_get(usage, "completion_tokens"),
        cache_read=cache_read,
        cache_write=cache_write,
        cost_usd=_cost(litellm, response, model),
    )


def _cost(litellm: _LiteLLM, response: object, model: str | None) -> float | None:
    """A response's cost: the one litellm computed for it (its hidden ``response_cost``), else
    ``completion_cost`` from the price map; ``None`` when the model is unpriced."""
    hidden = _get(response, "_hidden_params") or {}
    known = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(known, (int, float)) and not isinstance(known, bool) and known > 0:
        return float(known)
    try:
        cost = litellm.completion_cost(completion_response=response)
    except Exception:  # litellm raises for models missing from its price map
        return None
    if cost is None:
        return None
    if cost == 0:
        # litellm answers 0.0 for some models it cannot price; only trust a zero the
        # price map actually says (free local models, for instance).
        try:
            info = litellm.get_model_info(model=_get(response, "model") or model)
        except Exception:
            return None
        if info.get("input_cost_per_token") is None and info.get("output_cost_per_token") is None:
            return None
    return float(cost)


# --------------------------------------------------------------------------- callbacks


def callback_base() -> type:
    """litellm's ``CustomLogger``: the class a litellm callback object derives from (the capture of
    ``sessionkit.integrations.litellm`` does), so litellm is imported here as everywhere else."""
    _litellm()
    from litellm.integrations.custom_logger import CustomLogger

    return CustomLogger


def add_callback(callback: object) -> None:
    """Put ``callback`` in ``litellm.callbacks`` (once), so every litellm call from now on reports to it."""
    litellm = _litellm()
    with _litellm_lock:
        if not any(c is callback for c in litellm.callbacks):
            litellm.callbacks = [*litellm.callbacks, callback]


def remove_callback(callback: object) -> None:
    """Take ``callback`` out of ``litellm.callbacks`` (and the lists litellm copied it into)."""
    litellm = _litellm()
    # litellm copies a callback of litellm.callbacks into its per-event lists on the next call,
    # under this lock; it is taken out of all of them.
    manager = getattr(litellm, "logging_callback_manager", None)
    lists_lock = getattr(manager, "callback_lists_lock", None) or threading.Lock()
    with _litellm_lock, lists_lock:
        litellm.callbacks = [c for c in litellm.callbacks if c is not callback]
        for name in _CALLBACK_LISTS:
            kept = getattr(litellm, name, None)
            if isinstance(kept, list):
                kept[:] = [c for c in kept if c is not callback]


_CALLBACK_LISTS = (
    "input_callback",
    "_async_input_callback",
    "success_callback",
    "failure_callback",
    "_async_success_callback",
    "_async_failure_callback",
)
