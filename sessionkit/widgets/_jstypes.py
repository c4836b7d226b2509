"""The front end's type declarations, written from the TypedDicts of :mod:`._payloads`.

``static/types.d.ts`` declares every payload and message of the boundary for the JavaScript of
``static/`` (which names them in JSDoc, ``@param {TreePayload} tree``), and ``tsc`` checks the
JavaScript against them (``make lint``). Regenerate after changing a TypedDict::

    python -m sessionkit.widgets._jstypes

``tests/widgets/test_payloads.py`` fails while the file differs from what this writes.

Hand-written: TypeScript reads no Python, and the mapping is small (str, int, float, bool,
None, object, list, dict, Literal, unions, TypedDicts and the module's aliases of them).
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from . import _payloads

__all__ = ["TYPES_FILE", "render", "write"]

#: Where the declarations are written (beside the JavaScript that uses them).
TYPES_FILE = Path(__file__).parent / "static" / "types.d.ts"

_HEAD = """\
// The payloads and messages between sessionkit's Python and this JavaScript (sessionkit/widgets/_payloads.py).
// Written by `python -m sessionkit.widgets._jstypes`: do not edit; change the TypedDicts and regenerate.
"""


def _aliases() -> dict[str, object]:
    """The module's named unions and containers (``PartView``, ``LabelsByMessage``, ...)."""
    return {
        name: value
        for name, value in vars(_payloads).items()
        if not name.startswith("_")
        and isinstance(value, (types.UnionType, types.GenericAlias))
        and typing.get_origin(value) is not typing.get_origin(_payloads.Handler)
    }


def _is_typeddict(value: object) -> bool:
    return isinstance(value, type) and typing.is_typeddict(value)


def _ts(hint: object, aliases: dict[str, object], *, top: bool = False) -> str:
    """The TypeScript type of one Python annotation."""
    if not top:
        for name, alias in aliases.items():
            if hint is alias or (isinstance(hint, types.UnionType) and hint == alias):
                return name
    if _is_typeddict(hint):
        return typing.cast(type, hint).__name__
    if hint is str:
        return "string"
    if hint is int or hint is float:
        return "number"
    if hint is bool:
        return "boolean"
    if hint is None or hint is type(None):
        return "null"
    if hint is object:
        return "unknown"
    if hint is dict:
        return "Record<string, unknown>"
    if hint is list:
        return "unknown[]"
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(f'"{a}"' if isinstance(a, str) else str(a).lower() for a in args)
    if origin in (types.UnionType, typing.Union):
        return " | ".join(dict.fromkeys(_ts(a, aliases) for a in args))  # int | float: one number
    if origin is list:
        inner = _ts(args[0], aliases)
        return f"({inner})[]" if " | " in inner else f"{inner}[]"
    if origin is dict:
        return f"Record<string, {_ts(args[1], aliases)}>"
    raise TypeError(f"no TypeScript type for {hint!r}: extend sessionkit/widgets/_jstypes.py")


def _doc(td: type) -> list[str]:
    doc = (td.__doc__ or "").strip()
    if not doc or doc.startswith(f"{td.__name__}("):  # a functional TypedDict's generated doc
        return []
    return ["/** " + " ".join(doc.split()) + " */"]


def render() -> str:
    """The text of ``static/types.d.ts`` for the TypedDicts as they are."""
    aliases = _aliases()
    out = [_HEAD]
    for name, alias in aliases.items():
        out.append(f"type {name} = {_ts(alias, aliases, top=True)};\n")
    for td in _payloads.PAYLOADS:
        hints = typing.get_type_hints(td)
        optional = td.__optional_keys__  # type: ignore[attr-defined]
        fields = [f"  {key}{'?' if key in optional else ''}: {_ts(hint, aliases)};" for key, hint in hints.items()]
        out.append("\n".join([*_doc(td), f"interface {td.__name__} {{", *fields, "}"]) + "\n")
    return "\n".join(out)


def write(path: Path = TYPES_FILE) -> Path:
    """Write :func:`render`'s text to ``path``; returns the path."""
    path.write_text(render(), encoding="utf-8")
    return path


if __name__ == "__main__":
    sys.stdout.write(f"wrote {write()}\n")
