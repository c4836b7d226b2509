"""The built-in code scorers: cheap checks written as code (docs/judging.md).

Each is a :func:`~sessionkit.store._scoring.scorer` answering a tag or None, at any
level (message, turn, path, session) unless said otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .. import parts as _parts
from ..store import Score, Unit, scorer

__all__ = ["tool_error", "empty_reply", "regenerated", "refusal", "refusal_keywords", "REFUSAL_PHRASES"]


@scorer(name="tool_error", version=1)
def tool_error(unit: Unit) -> Score | None:
    """``"tool-error"`` when a tool call of the unit ended in error (a tool part in state
    ``output-error``); the rationale names the tools and their first error text."""
    failed = []
    for message in unit.messages:
        for part in _parts.tool_parts(message):
            if part.get("state") == "output-error":
                error = part.get("errorText")
                failed.append(
                    f"{_parts.tool_name(part)}: {error}" if isinstance(error, str) else str(_parts.tool_name(part))
                )
    if not failed:
        return None
    return Score("tool-error", rationale="; ".join(failed)[:2000])


def _says_something(message: dict) -> bool:
    return bool(_parts.text_of(message).strip()) or bool(_parts.tool_parts(message))


@scorer(name="empty_reply", version=1)
def empty_reply(unit: Unit) -> Score | None:
    """``"empty-reply"`` when the unit's last assistant message has no text and calls no
    tool, or (a turn, a path, a session) when the unit has no assistant message at all.
    A message other than an assistant's is not judged (None)."""
    reply = unit.reply
    if reply is None:
        if unit.level == "message":
            return None
        return Score("empty-reply", rationale="no assistant message answers")
    if _says_something(reply):
        return None
    return Score("empty-reply", rationale=f"assistant message {reply.get('id')!r} has no text and calls no tool")


@scorer(name="regenerated", version=1)
def regenerated(unit: Unit) -> Score | None:
    """``"regenerated"`` when another version was written beside the unit's reply (a
    regeneration, or an edit): a turn whose user message has two or more children (the
    ``turns`` view's ``regenerated``), a path passing a message with siblings (the
    ``paths`` view's ``regenerations``), a session with a branch point. It reads the
    unit's row: at the message level it raises ``ValueError``."""
    row = unit.row
    if unit.level == "turn":
        why = "the user message has two replies or more" if row.get("regenerated") else None
    elif unit.level == "path":
        n = row.get("regenerations") or 0
        why = f"{n} message(s) on the path have other versions beside them" if n else None
    elif unit.level == "session":
        n = row.get("branch_points") or 0
        why = f"{n} message(s) have two children or more" if n else None
    else:
        raise ValueError("the regenerated scorer scores turns, paths and sessions, not single messages")
    return None if why is None else Score("regenerated", rationale=why)


#: Phrases of a refusal, matched case-insensitively in the reply's text.
REFUSAL_PHRASES: tuple[str, ...] = (
    "i can't help with",
    "i cannot help with",
    "i can't assist",
    "i cannot assist",
    "i'm not able to help",
    "i am not able to help",
    "i'm unable to",
    "i am unable to",
    "i won't be able to",
    "i can't do that",
    "i cannot do that",
    "i must decline",
    "i'm sorry, but i can't",
    "i'm sorry, but i cannot",
    "as an ai",
)


def refusal_keywords(
    phrases: Iterable[str] = REFUSAL_PHRASES, *, name: str = "refusal", version: int | str = 1, tag: str = "refusal"
):
    """A scorer answering ``tag`` when the unit's last assistant message says one of
    ``phrases`` (case-insensitive, curly apostrophes read as straight ones); the rationale
    quotes the phrase found. ``sk.scorers.refusal`` is this with the default phrases."""
    words = [p.lower().replace("\u2019", "'") for p in phrases]
    if not words or not all(isinstance(p, str) and p.strip() for p in words):
        raise ValueError("refusal_keywords needs one phrase or more, each a non-blank str")
    pattern = re.compile("|".join(re.escape(p) for p in sorted(words, key=len, reverse=True)))

    def refusal(unit: Unit) -> Score | None:
        reply = unit.reply
        if reply is None:
            return None
        found = pattern.search(_parts.text_of(reply).lower().replace("\u2019", "'"))
        return None if found is None else Score(tag, rationale=f"says {found.group(0)!r}")

    return scorer(refusal, name=name, version=version)


refusal = refusal_keywords()
