"""What the commands share: exit statuses, their errors, and short forms of values for a terminal."""

from __future__ import annotations

import json
from typing import Any, TextIO

from sessionkit.parts import one_line, part_kinds, text_of

PROG = "sessionkit"


# Exit statuses: 1 for a failed command, 2 for a command line argparse rejects.
EXIT_FAILED = 1


EXIT_USAGE = 2


_PREVIEW = 64  # characters of text shown per message in one-line views


_MAX_INDENT = 48  # characters of tree drawing before a line's message id, at most


_MAX_JSON = 400  # characters of a tool input/output shown in the chat view (--json shows all)


class CommandError(Exception):
    """A failure reported as one line on stderr (no traceback)."""


class _UsageError(Exception):
    """A command line that argparse rejected; carries the one-line message."""


def _sid(session_id: str) -> str:
    """A session id for display: the default session (empty id) shows as ``""``."""
    return session_id if session_id else '""'


def _when(iso: str | None) -> str:
    """``2025-03-03T09:00:00.000Z`` -> ``2025-03-03 09:00:00`` (times are UTC)."""
    if not iso:
        return "-"
    return iso[:19].replace("T", " ")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # unreachable


def _count(n: int, noun: str) -> str:
    """``3 messages``, ``1 message``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _clip(text: str, limit: int = _MAX_JSON) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters)"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _inline_size(part: dict) -> int | None:
    """Decoded size of an inline base64 payload (``data:`` URL or ``data`` field), else None."""
    url = part.get("url")
    if isinstance(url, str) and url.startswith("data:"):
        head, _, body = url.partition(",")
        if head.endswith(";base64"):
            return len(body) * 3 // 4 - body[-2:].count("=")
        return len(body)
    data = part.get("data")
    if isinstance(data, str):
        return len(data) * 3 // 4 - data[-2:].count("=")
    return None


def _preview(message: dict) -> str:
    """One line for a message in tree views: its text, then its other parts in brackets."""
    text = one_line(text_of(message), _PREVIEW)
    kinds = part_kinds(message)
    extra = f"[{', '.join(kinds)}]" if kinds else ""
    return f"{text} {extra}".strip() if text else (extra or "(no text)")


def _print_table(header: list[str], rows: list[list[str]], out: TextIO, *, right: tuple[int, ...] = ()) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip(), file=out)


def _write_json_array(items, out: TextIO) -> None:
    """Stream a JSON array, one item at a time (paths can be long)."""
    out.write("[")
    count = 0
    for item in items:
        out.write(("," if count else "") + "\n  " + _json(item))
        count += 1
    out.write("\n]\n" if count else "]\n")
