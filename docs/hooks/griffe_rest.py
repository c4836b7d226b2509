"""A griffe extension: the docstrings' reST constructs read as Markdown in the API reference.

The package's docstrings are plain text with a few reST constructs (``:class:`X```
roles, ``::`` before a literal block, ``>>>`` examples, simple tables drawn with
``===``), which Markdown would show as stray colons, quotes and run-together lines.
mkdocstrings has no reST renderer for them, so this rewrites each docstring as the
reference is built (the source is not changed): roles become inline code, literal
blocks, examples and tables become fenced code blocks.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")
_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")


def _role(match: re.Match) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def convert(text: str) -> str:
    lines = _ROLE.sub(_role, text).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.endswith("::") and not stripped.startswith(">>>"):
            # "text::" then an indented literal block: "text:" and a fenced block
            base = _indent(line)
            head = line.rstrip()[:-2].rstrip()
            if head.strip():
                out.append(head + ":")
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            body = textwrap.dedent("\n".join(b for b in block)).strip("\n")
            out += ["", " " * base + "```", *(" " * base + b if b else "" for b in body.split("\n")),
                    " " * base + "```", ""]
            continue
        if stripped.startswith(">>>"):
            base = _indent(line)
            block = []
            while i < len(lines) and lines[i].strip() and (
                lines[i].strip().startswith((">>>", "...")) or block
            ):
                block.append(lines[i][base:] if _indent(lines[i]) >= base else lines[i].strip())
                i += 1
            out += ["", " " * base + "```pycon", *(" " * base + b for b in block), " " * base + "```", ""]
            continue
        if _BORDER.match(line):
            base = _indent(line)
            block = [line[base:]]
            i += 1
            while i < len(lines):
                block.append(lines[i][base:] if _indent(lines[i]) >= base else lines[i].strip())
                i += 1
                if _BORDER.match(block[-1]) and (i >= len(lines) or not lines[i].strip()):
                    break
            out += ["", *(" " * base + row for row in _table(block)), ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _table(block: list[str]) -> list[str]:
    """A reST simple table (its lines, borders included) as a Markdown table."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"=+", block[0])]
    starts = [a for a, _ in spans]
    borders = [k for k, line in enumerate(block) if _BORDER.match(line)]
    header_end = borders[1] if len(borders) > 2 else None
    rows: list[list[str]] = []
    header: list[str] = [""] * len(starts)
    for k, line in enumerate(block):
        if k in borders or not line.strip():
            continue
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], len(line) + 1])]
        target = header if header_end is not None and k < header_end else None
        if target is not None:
            header = [" ".join(filter(None, (h, c))) for h, c in zip(header, cells)]
        elif rows and not cells[0]:  # a continuation line: its words join the row above
            rows[-1] = [" ".join(filter(None, (r, c))) for r, c in zip(rows[-1], cells)]
        else:
            rows.append(cells)

    def fmt(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    return [fmt(header), "|" + "---|" * len(starts), *(fmt(r) for r in rows)]


class RestToMarkdown(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
