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
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..errors import missing

if TYPE_CHECKING:  # a type hint as a value (what pydantic's TypeAdapter takes)
    from typing_extensions import TypeForm

__all__ = ["CONTEXT_PARAMETER", "Tool", "as_tool", "json_safe"]

T = TypeVar("T")

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
    fn: Callable[..., object]

    def schema(self) -> dict:
        """The OpenAI-style tool entry sent to the model."""
        function: dict = {"name": self.name, "parameters": self.parameters}
        if self.description:
            function["description"] = self.description
        return {"type": "function", "function": function}

    async def call(self, arguments: Mapping[str, object], *, context: dict | None = None) -> object:
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
            result = self.fn(*args, **kwargs)  # a coroutine, awaited below
        else:
            result = await _in_thread(functools.partial(self.fn, *args, **kwargs))
        if inspect.isawaitable(result):  # or a sync wrapper that returned a coroutine
            result = await result
        return result


async def _in_thread(call: Callable[[], T]) -> T:
    """Run ``call`` on its own daemon thread and await its result.

    Not the loop's default executor: ``asyncio.run`` waits for that executor on
    exit, so a tool abandoned by an interrupt or timeout would hold the caller
    until it finished. A daemon thread is simply left to finish on its own.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():  # else cancelled while the tool ran
            outcome()

    def worker() -> None:
        outcome: Callable[[], None]
        try:
            outcome = functools.partial(future.set_result, context.run(call))
        except BaseException as exc:  # handed to the awaiting task
            outcome = functools.partial(future.set_exception, exc)
        try:
            loop.call_soon_threadsafe(settle, outcome)
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


def as_tool(obj: object) -> Tool:
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

# What a schema keyword holds: one schema, a list of schemas, or a mapping of names to schemas.
# Only these are walked, so a property named "title" or a default holding a "$ref" key is data.
_ONE_SCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_REF_PREFIX = "#/$defs/"


def _hints(fn: Callable[..., object]) -> dict[str, TypeForm[object]]:
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # unresolved forward references: the raw annotations (strings accept anything)
        return dict(getattr(fn, "__annotations__", {}) or {})


def _annotation_notes(tp: object) -> str | None:
    """The text notes of ``Annotated[int, "how many"]`` (pydantic reads only ``Field(description=...)``)."""
    if typing.get_origin(tp) is not typing.Annotated:
        return None
    notes = [a for a in typing.get_args(tp)[1:] if isinstance(a, str)]
    return " ".join(notes) if notes else None


def _for_model(schema: dict, defs: dict[str, dict], expanding: frozenset[str], kept: set[str]) -> dict:
    """A pydantic schema as a model provider takes it, with the same meaning.

    pydantic names each class (``$defs``/``$ref``), titles every schema and writes
    ``X | None`` as an ``anyOf`` with null; tool schemas have always been flat,
    untitled and give ``X | None`` as ``X``. References are inlined, except one
    back to a type being inlined (a recursive type): that definition goes in
    ``kept`` and stays referenced. This walk is written here because pydantic has
    no option for it.
    """
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
        name = ref[len(_REF_PREFIX) :]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        if name in expanding:
            kept.add(name)
            return {"$ref": ref, **_for_model(rest, defs, expanding, kept)}
        inlined = _for_model(defs[name], defs, expanding | {name}, kept)
        return {**inlined, **_for_model(rest, defs, expanding, kept)}
    out: dict = {}
    for key, value in schema.items():
        # "title" is a name for people; "discriminator" (OpenAPI) maps tags to the $defs inlined here
        if key == "title" or key == "discriminator":
            continue
        if key in _ONE_SCHEMA and isinstance(value, dict):
            value = _for_model(value, defs, expanding, kept)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            value = [_for_model(v, defs, expanding, kept) if isinstance(v, dict) else v for v in value]
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            value = {k: _for_model(v, defs, expanding, kept) if isinstance(v, dict) else v for k, v in value.items()}
        out[key] = value
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        (other,) = [o for o in options if o != {"type": "null"}] or [{}]
        del out["anyOf"]
        out = {**other, **out}
    return out


def _type_schemas(fn: Callable[..., object], annotations: dict[str, TypeForm[object]]) -> dict[str, dict]:
    """One JSON schema per parameter, from pydantic, in the shape :func:`_for_model` gives.

    A definition a recursive type keeps is returned under ``"$defs"``.
    """
    try:
        from pydantic import TypeAdapter
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise missing("agents", "pydantic", exc) from exc
    adapters: dict[str, TypeAdapter[object]] = {}
    for name, tp in annotations.items():
        try:
            adapters[name] = TypeAdapter(tp)
        except Exception as exc:  # pydantic's error for a type it cannot validate
            raise _unsupported(fn, name, tp, exc) from exc
    try:
        by_key, definitions = TypeAdapter.json_schemas(
            [(name, "validation", adapter) for name, adapter in adapters.items()]
        )
    except Exception:
        for name, adapter in adapters.items():  # find the parameter to name in the error
            try:
                adapter.json_schema()
            except Exception as exc:
                raise _unsupported(fn, name, annotations[name], exc) from exc
        raise
    defs = definitions.get("$defs", {})
    kept: set[str] = set()
    schemas = {name: _for_model(by_key[(name, "validation")], defs, frozenset(), kept) for name in adapters}
    resolved: dict[str, dict] = {}
    while kept - resolved.keys():  # a kept definition may keep others
        name = min(kept - resolved.keys())
        resolved[name] = _for_model(defs[name], defs, frozenset({name}), kept)
    if resolved:
        schemas["$defs"] = resolved
    return schemas


def _unsupported(fn: Callable[..., object], name: str, tp: object, exc: Exception) -> TypeError:
    shown = tp.__name__ if isinstance(tp, type) else repr(tp)
    first = str(exc).strip().split(". ")[0].splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
    return TypeError(
        f"tool {getattr(fn, '__name__', fn)!r}: parameter {name!r} is annotated {shown}, which has no JSON "
        f"schema ({first}); annotate it with a JSON type (str, int, list[str], a dataclass, a pydantic "
        "model...), leave it unannotated, or build a Tool(...) with the parameters schema yourself"
    )


def parameters_schema(fn: Callable[..., object], param_docs: Mapping[str, str] | None = None) -> dict:
    """The ``parameters`` object schema of a function, from its signature and docs.

    Each parameter's type hint becomes its schema through pydantic (anything
    pydantic validates: JSON types, ``Literal``, enums, dataclasses, pydantic
    models, ``typing_extensions.TypedDict``, dates...), inlined and without
    titles; ``X | None`` is given as ``X``. The description is a text note of
    ``Annotated[...]``, else the docstring's. A default is shown when it is a
    JSON value (an enum member as its value). A parameter named ``context`` is
    left out: it receives the run's context, not a value chosen by the model.
    A type hint pydantic cannot describe raises ``TypeError`` naming it.
    """
    param_docs = param_docs or {}
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"type": "object", "properties": {}}
    hints = _hints(fn)
    annotations: dict[str, TypeForm[object]] = {}
    for name, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or name == CONTEXT_PARAMETER:
            continue
        tp = hints.get(name, param.annotation)
        # no hint, or one that could not be resolved (a string): any value
        annotations[name] = object if tp is param.empty or isinstance(tp, str) else tp
    schemas = _type_schemas(fn, annotations)
    properties: dict[str, dict] = {}
    required: list[str] = []
    for name, tp in annotations.items():
        schema = schemas[name]
        note = _annotation_notes(tp)
        if note:
            schema["description"] = note
        elif param_docs.get(name) and "description" not in schema:
            schema["description"] = param_docs[name]
        param = sig.parameters[name]
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
    if "$defs" in schemas:
        result["$defs"] = schemas["$defs"]
    return result


# --------------------------------------------------------------------------- outputs


def _json_default(value: object) -> object:
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


def json_safe(value: object) -> object:
    """A tool result as a JSON value, so it can be stored and sent to the model.

    JSON values pass unchanged; dataclasses, pydantic models, sets, dates and
    enums are converted; anything else becomes its ``str()``.
    """
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except (TypeError, ValueError):
        return str(value)
