"""Tools: plain Python functions the model may call.

The tool's name is the function's ``__name__``; its JSON schema comes from the
signature (type hints, defaults) and the docstring (a summary, and parameter
descriptions in Google, NumPy or Sphinx style)::

    def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''Current weather for a city.

        Args:
            city: The city name, e.g. "Paris".
            unit: Temperature unit.
        '''

becomes ``{"type": "function", "function": {"name": "get_weather",
"description": "Current weather for a city.", "parameters": {"type": "object",
"properties": {"city": {"type": "string", "description": ...}, "unit": {"type":
"string", "enum": ["C", "F"], "default": "C", ...}}, "required": ["city"]}}}``.

A parameter named ``context`` is not shown to the model: it receives the
run's ``context`` (``agent.run(prompt, context={...})``, a JSON object the
application passes beside the prompt), so a tool can read who is asking or
which account it acts for without the model being able to choose it::

    def list_orders(status: str, context: dict) -> list:
        '''Orders of the signed-in customer with a given status.'''
        return db.orders(customer=context["customer_id"], status=status)

The schema of ``list_orders`` has ``status`` only. An argument named
``context`` sent by the model is ignored. When the run has no context, the
parameter gets ``None`` (or its default, when it has one).

Sync functions run in a worker thread so a slow tool does not stall the event
loop (and can be abandoned by a timeout or interrupt; the thread itself runs to
its end, Python cannot stop it). Async functions run on the run's loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import datetime as _dt
import enum
import functools
import inspect
import json
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CONTEXT_PARAMETER", "Tool", "as_tool", "json_safe"]

CONTEXT_PARAMETER = "context"
"""The parameter name through which a tool receives the run's context (never in its schema)."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION_RE = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Returns?|Yields?|Raises|"
    r"Examples?|Notes?|See Also|Attributes)\s*:?\s*$"
)


@dataclass(frozen=True)
class Tool:
    """A callable tool with its model-facing schema.

    Usually built from a function by :func:`as_tool` (``Agent(tools=[fn])`` does
    that); build one directly to choose a name, description or schema yourself.
    """

    name: str
    description: str
    parameters: dict
    fn: Callable[..., Any]

    def schema(self) -> dict:
        """The OpenAI-style tool entry sent to the model."""
        function: dict = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    async def call(self, arguments: Mapping[str, Any], *, context: dict | None = None) -> Any:
        """Call the function with the model's arguments (sync functions in a thread).

        A ``context`` parameter of the function receives ``context`` (see the
        module docstring); the model cannot set it.
        """
        arguments = dict(arguments)
        wants, has_default = _context_parameter(self.fn)
        if wants:
            arguments.pop(CONTEXT_PARAMETER, None)  # the model cannot choose the context
            if context is not None or not has_default:
                arguments[CONTEXT_PARAMETER] = context
        args, kwargs = _bind(self.fn, arguments)
        if _is_async(self.fn):
            return await self.fn(*args, **kwargs)
        result = await _in_thread(functools.partial(self.fn, *args, **kwargs))
        if inspect.isawaitable(result):  # a sync wrapper that returned a coroutine
            result = await result
        return result


async def _in_thread(call: Callable[[], Any]) -> Any:
    """Run ``call`` on its own daemon thread and await its result.

    Not the loop's default executor: ``asyncio.run`` waits for that executor on
    exit, so a tool abandoned by an interrupt or timeout would hold the caller
    until it finished. A daemon thread is simply left to finish on its own.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():  # cancelled while the tool ran
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def worker() -> None:
        try:
            outcome = (True, context.run(call))
        except BaseException as exc:  # handed to the awaiting task
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is gone: nobody waits for this result any more
            pass

    threading.Thread(target=worker, name="sessionkit-tool", daemon=True).start()
    return await future


def _is_async(fn: Callable) -> bool:
    target = fn
    while isinstance(target, functools.partial):
        target = target.func
    if inspect.iscoroutinefunction(target):
        return True
    # a callable object whose __call__ is async
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)


def _context_parameter(fn: Callable) -> tuple[bool, bool]:
    """Whether ``fn`` has a ``context`` parameter, and whether that parameter has a default."""
    try:
        param = inspect.signature(fn).parameters.get(CONTEXT_PARAMETER)
    except (TypeError, ValueError):
        return False, False
    if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        return False, False
    return True, param.default is not param.empty


def _bind(fn: Callable, arguments: dict) -> tuple[list, dict]:
    """Split arguments into positional-only ones and keywords."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return [], arguments
    positional = []
    for param in sig.parameters.values():
        if param.kind is param.POSITIONAL_ONLY and param.name in arguments:
            positional.append(arguments.pop(param.name))
    return positional, arguments


def as_tool(obj: Any) -> Tool:
    """Turn a function (or a :class:`Tool`) into a :class:`Tool`.

    Raises ``TypeError`` for something that is not callable and ``ValueError``
    for a name a model provider would refuse (``^[A-Za-z0-9_-]{1,64}$``), such
    as a lambda's.
    """
    if isinstance(obj, Tool):
        tool = obj
    else:
        if not callable(obj):
            raise TypeError(f"a tool must be a function, got {type(obj).__name__}")
        name = getattr(obj, "__name__", None)
        if not isinstance(name, str):
            raise TypeError(f"a tool needs a __name__ (got {obj!r}); wrap it in a def or build a Tool(...)")
        description, param_docs = parse_docstring(inspect.getdoc(obj) or "")
        tool = Tool(name=name, description=description, parameters=parameters_schema(obj, param_docs), fn=obj)
    if not _NAME_RE.match(tool.name):
        raise ValueError(f"tool name {tool.name!r} is not allowed: use letters, digits, '_' or '-', at most 64")
    return tool


# --------------------------------------------------------------------------- docstrings


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Return ``(description, {parameter: description})`` from a docstring.

    The description is the text before the first section; parameters are read
    from a Google ``Args:`` section, a NumPy ``Parameters`` section or Sphinx
    ``:param name:`` fields.
    """
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    params: dict[str, str] = {}
    summary: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _SECTION_RE.match(line) or line.lstrip().startswith((":param", ":type", ":return", ":raises")):
            break
        summary.append(line)
        i += 1
    description = "\n".join(summary).strip()

    # Sphinx fields
    for match in re.finditer(r":param\s+(?:[^:\s]+\s+)?(\w+)\s*:\s*(.*?)(?=\n\s*:|\Z)", doc or "", re.S):
        params[match.group(1)] = " ".join(match.group(2).split())

    while i < len(lines):
        header = lines[i].strip().rstrip(":")
        is_numpy = i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        if header in ("Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"):
            i += 2 if is_numpy else 1
            indent: int | None = None
            current: str | None = None
            while i < len(lines):
                line = lines[i]
                if not line.strip():
                    i += 1
                    continue
                width = len(line) - len(line.lstrip())
                if is_numpy:
                    if i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}:
                        break  # the next NumPy section
                    if width == 0:
                        current = re.split(r"\s*:\s*", line.strip(), maxsplit=1)[0].strip("*")
                        params.setdefault(current, "")
                    elif current:
                        params[current] = (params[current] + " " + line.strip()).strip()
                else:
                    if width == 0:
                        break  # the next Google section
                    if indent is None:
                        indent = width
                    if width == indent:
                        m = re.match(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line.strip())
                        if m:
                            current = m.group(1)
                            params[current] = m.group(2).strip()
                    elif current:
                        params[current] = (params[current] + " " + line.strip()).strip()
                i += 1
            continue
        i += 1
    return description, params


# --------------------------------------------------------------------------- JSON schema

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def type_schema(tp: Any) -> dict:
    """JSON schema for a Python type hint (best effort; unknown types accept anything)."""
    if tp is inspect.Parameter.empty or tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema: dict = dict(type_schema(args[0]))
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return type_schema(options[0])
        return {"anyOf": [type_schema(a) for a in args]}
    if origin is typing.Literal:
        values = list(args)
        schema = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1 and next(iter(kinds)) in _SIMPLE:
            schema["type"] = _SIMPLE[next(iter(kinds))]
        return schema
    if (
        tp in (list, tuple, set, frozenset)
        or origin in (list, set, frozenset)
        or (isinstance(origin, type) and origin is not str and issubclass(origin, Sequence) and origin is not tuple)
    ):
        schema = {"type": "array"}
        if args:
            schema["items"] = type_schema(args[0])
        return schema
    if origin is tuple:
        schema = {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            schema["items"] = type_schema(args[0])
        elif args:
            schema["prefixItems"] = [type_schema(a) for a in args]
            schema["minItems"] = schema["maxItems"] = len(args)
        return schema
    if tp is dict or origin is dict or (isinstance(origin, type) and issubclass(origin, Mapping)):
        schema = {"type": "object"}
        if len(args) == 2 and type_schema(args[1]):
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            values = [m.value for m in tp]
            schema = {"enum": values}
            kinds = {type(v) for v in values}
            if len(kinds) == 1 and next(iter(kinds)) in _SIMPLE:
                schema["type"] = _SIMPLE[next(iter(kinds))]
            return schema
        if issubclass(tp, _dt.datetime):
            return {"type": "string", "format": "date-time"}
        if issubclass(tp, _dt.date):
            return {"type": "string", "format": "date"}
        if hasattr(tp, "model_json_schema"):  # a pydantic model
            return tp.model_json_schema()
        if dataclasses.is_dataclass(tp):
            hints = _hints(tp)
            props, required = {}, []
            for f in dataclasses.fields(tp):
                props[f.name] = type_schema(hints.get(f.name, f.type))
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    required.append(f.name)
            return {"type": "object", "properties": props, "required": required}
        if typing.is_typeddict(tp):
            hints = _hints(tp)
            required_keys = getattr(tp, "__required_keys__", set(hints))
            return {
                "type": "object",
                "properties": {k: type_schema(v) for k, v in hints.items()},
                "required": [k for k in hints if k in required_keys],
            }
        if issubclass(tp, str):
            return {"type": "string"}
        if issubclass(tp, bool):
            return {"type": "boolean"}
        if issubclass(tp, int):
            return {"type": "integer"}
        if issubclass(tp, float):
            return {"type": "number"}
    return {}


def _hints(obj: Any) -> dict:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # unresolved forward references: fall back to the raw annotations
        return dict(getattr(obj, "__annotations__", {}) or {})


def parameters_schema(fn: Callable, param_docs: Mapping[str, str] | None = None) -> dict:
    """The ``parameters`` object schema of a function, from its signature and docs.

    A parameter named ``context`` is left out: it receives the run's context,
    not a value chosen by the model.
    """
    param_docs = param_docs or {}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"type": "object", "properties": {}}
    hints = _hints(fn)
    properties: dict[str, dict] = {}
    required: list[str] = []
    for name, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name == CONTEXT_PARAMETER:
            continue
        schema = dict(type_schema(hints.get(name, param.annotation)))
        if name in param_docs and param_docs[name] and "description" not in schema:
            schema["description"] = param_docs[name]
        if param.default is param.empty:
            required.append(name)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            try:
                json.dumps(default, allow_nan=False)
            except (TypeError, ValueError):
                pass  # a default the model cannot see is simply not advertised
            else:
                schema["default"] = default
        properties[name] = schema
    result: dict = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    return result


# --------------------------------------------------------------------------- outputs


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def json_safe(value: Any) -> Any:
    """A tool result as a JSON value, so it can be stored and sent to the model.

    JSON values pass unchanged; dataclasses, pydantic models, sets, dates and
    enums are converted; anything else becomes its ``str()``.
    """
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except (TypeError, ValueError):
        return str(value)
