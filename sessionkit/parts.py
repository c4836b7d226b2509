"""Message parts: what a message says, which tools it calls, how it reads on one line.

Every layer reads messages the same way through these helpers: the store (search
indexes :func:`text_of`), the agent (a prompt's text), analysis (the D1 ``text``
and ``tool_names`` columns), the notebook views and the command line (previews),
so a message is described the same everywhere. A compaction shows on read as an
overlay message (docs/compaction.md); :func:`overlay_message` builds it and
:func:`overlay_info` recognises it.

Pure functions over plain dicts: no I/O, nothing imported from the rest of the
package. They never raise on odd input (a part that is not a dict, a ``text``
that is not a string): such parts are skipped.

>>> m = {"id": "a1", "role": "assistant", "parts": [
...     {"type": "text", "text": "Checking."},
...     {"type": "tool-search", "toolCallId": "c1", "input": {"q": "x"}}]}
>>> text_of(m), tool_names(m)
('Checking.', ['search'])
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "FOLD_LINES",
    "output_text",
    "input_text",
    "fold_lines",
    "OVERLAY_PREFIX",
    "text_of",
    "tool_names",
    "tool_parts",
    "is_tool_part",
    "tool_name",
    "part_kinds",
    "one_line",
    "preview",
    "overlay_message",
    "overlay_info",
]

#: The id of a compaction's overlay message is this prefix and the compaction's id.
OVERLAY_PREFIX = "compaction:"


#: Tool output longer than this many lines is folded in every view (with a "show all" control).
FOLD_LINES = 30

# ECMA-48 escape sequences: CSI (colours, cursor moves), OSC (titles, links) and the short
# two-byte ones. The same pattern as SK_ANSI in widgets/static/common.js. A regular expression
# rather than a dependency: the views strip the codes, they do not render colours.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def output_text(value: Any) -> str:
    """A tool's input or output as a person reads it (docs/widgets.md, "Tool output").

    A string is shown as itself: real line breaks (``\\r\\n`` and a lone ``\\r`` become
    ``\\n``), ANSI colour codes stripped; any other value as indented JSON.

    >>> print(output_text('Found 1 match:\\r\\n/src/a.py \\x1b[32mok\\x1b[0m'))
    Found 1 match:
    /src/a.py ok
    >>> print(output_text({"rows": 2}))
    {
      "rows": 2
    }
    """
    if isinstance(value, str):
        return _ANSI.sub("", value).replace("\r\n", "\n").replace("\r", "\n")
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        return repr(value)


#: A string argument of a tool's input this long or longer is shown under its name, not beside it.
INLINE_CHARS = 60


def _json_object(text: str) -> dict | None:
    """``text`` read as a JSON object (a model's raw tool-call arguments), or None."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def input_text(value: Any) -> str:
    """A tool's input as a person reads it (docs/widgets.md, "Tool output").

    An object of arguments (or a JSON text of one) shows each argument on a line of its
    own: a short one-line string, a number, ``true``/``false`` or ``null`` beside its name;
    a longer or multi-line string under its name, indented, with real line breaks (as
    :func:`output_text` shows a string), a list or an object as indented JSON under its
    name. Any other input is shown as :func:`output_text` shows it.

    >>> print(input_text({"command": "create", "file_text": "def f():\\n    return 1\\n"}))
    command: create
    file_text:
      def f():
          return 1
    """
    if isinstance(value, str):
        parsed = _json_object(value)
        if parsed is None:
            return output_text(value)
        value = parsed
    if not isinstance(value, dict) or not value:
        return output_text(value)
    lines: list[str] = []
    for name, arg in value.items():
        if arg is None or isinstance(arg, (bool, int, float)):
            lines.append(f"{name}: {json.dumps(arg)}")
            continue
        text = output_text(arg)
        if isinstance(arg, str) and "\n" not in text and len(text) < INLINE_CHARS:
            lines.append(f"{name}: {text}" if text else f'{name}: ""')
            continue
        lines.append(f"{name}:")
        lines.extend(f"  {line}" if line else "" for line in text.rstrip("\n").split("\n"))
    return "\n".join(lines)


def fold_lines(text: str, limit: int = FOLD_LINES) -> tuple[str, int]:
    """The first ``limit`` lines of ``text`` and how many lines were left out (0: nothing folded).

    A fold that would hide a single line shows it instead: "1 more line" saves nothing.

    >>> fold_lines("a\\nb\\nc", 1)
    ('a', 2)
    """
    lines = text.split("\n")
    if len(lines) <= limit + 1:
        return text, 0
    return "\n".join(lines[:limit]), len(lines) - limit


def _parts(message: Any) -> Any:
    return (message.get("parts") or ()) if isinstance(message, dict) else ()


def text_of(message: dict, separator: str = "\n\n") -> str:
    """The ``text`` parts of a message, joined by ``separator``.

    The default (a blank line between parts) is what search indexes and the D1
    ``text`` column holds; the agent joins with ``""`` (what a prompt or reply says).
    """
    return separator.join(
        p["text"]
        for p in _parts(message)
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


def is_tool_part(part: Any) -> bool:
    """Whether ``part`` is a tool call: type ``tool-<name>`` or ``dynamic-tool``."""
    if not isinstance(part, dict):
        return False
    ptype = part.get("type")
    return isinstance(ptype, str) and (ptype.startswith("tool-") or ptype == "dynamic-tool")


def tool_name(part: dict) -> str | None:
    """The tool a tool part calls (``tool-<name>``, or a ``dynamic-tool``'s ``toolName``), else None."""
    ptype = part.get("type") if isinstance(part, dict) else None
    if not isinstance(ptype, str):
        return None
    if ptype.startswith("tool-"):
        return ptype[5:]
    if ptype == "dynamic-tool" and isinstance(part.get("toolName"), str):
        return part["toolName"]
    return None


def tool_parts(message: dict) -> list[dict]:
    """The tool parts of a message, in part order."""
    return [p for p in _parts(message) if is_tool_part(p)]


def tool_names(message: dict) -> list[str]:
    """Names of the tools a message calls, one per tool part, in part order."""
    out = []
    for part in _parts(message):
        name = tool_name(part)
        if name is not None:
            out.append(name)
    return out


def part_kinds(message: dict) -> list[str]:
    """Short descriptions of a message's parts other than text (``tool search``, ``file image/png``...)."""
    kinds = []
    for part in _parts(message):
        if not isinstance(part, dict):
            continue
        ptype = str(part.get("type", ""))
        if ptype == "text" or ptype == "step-start":
            continue
        if ptype.startswith("tool-"):
            kinds.append(f"tool {ptype[5:]}")
        elif ptype == "dynamic-tool":
            kinds.append(f"tool {part.get('toolName', '?')}")
        elif ptype == "file":
            kinds.append(f"file {part.get('mediaType', '?')}")
        else:
            kinds.append(ptype)
    return kinds


def one_line(text: str, width: int) -> str:
    """``text`` with its whitespace collapsed, cut to ``width`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


def preview(message: dict, limit: int = 96) -> str:
    """One line saying what a message holds: its text, then the tools it calls, else its part types.

    >>> preview({"parts": [{"type": "text", "text": "Let me look."}, {"type": "tool-search"}]})
    'Let me look. → search()'
    """
    text = " ".join(text_of(message, "").split())
    tools = tool_names(message)
    if tools:
        call = "→ " + ", ".join(f"{t}()" for t in tools)
        text = f"{text} {call}".strip() if text else call
    if not text:
        kinds = [str(p.get("type")) for p in _parts(message) if isinstance(p, dict)]
        text = "[" + ", ".join(kinds) + "]" if kinds else "(empty)"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def overlay_message(
    *, id: str, from_id: str, to_id: str, summary: str, created_at: str, messages: int, tokens_before: int
) -> dict:
    """The message a compaction shows as on read (docs/compaction.md): its summary in place of ``messages`` messages."""
    return {
        "id": OVERLAY_PREFIX + id,
        "role": "assistant",
        "parts": [{"type": "text", "text": summary}],
        "createdAt": created_at,
        "metadata": {
            "compaction": {
                "id": id,
                "from_id": from_id,
                "to_id": to_id,
                "messages": messages,
                "tokens_before": tokens_before,
            }
        },
    }


def overlay_info(message: dict) -> dict | None:
    """The ``metadata.compaction`` of a compaction's overlay message read from a path, else None."""
    if not isinstance(message, dict):
        return None
    meta = message.get("metadata")
    if str(message.get("id", "")).startswith(OVERLAY_PREFIX) and isinstance(meta, dict):
        info = meta.get("compaction")
        if isinstance(info, dict):
            return info
    return None
