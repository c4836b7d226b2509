"""Anthropic HH-RLHF preference pairs -> one session per pair, two sibling branches.

Each line of an HH file (gzip or plain JSON lines) is
``{"chosen": "\\n\\nHuman: ...\\n\\nAssistant: ...", "rejected": "..."}``. Both texts
are split into turns (``Human`` -> ``user``, ``Assistant`` -> ``assistant``; the
text of each turn is kept exactly, so joining the turns back gives the source
string). The turns both conversations share are stored once; where they part
(normally at the last assistant reply) the two continuations become sibling
branches. Each branch message carries ``metadata["hh"] = {"chosen": True}`` or
``{"chosen": False}``. The rejected branch is written first, so the session's
latest leaf, and therefore its default history, is the chosen conversation.

Message ids are ``p<i>`` for shared turns and ``c<i>`` / ``r<i>`` for the chosen
and rejected branches (``i`` is the turn's position in its conversation). The
session id is ``session_prefix`` plus a hash of the pair's text, so importing a
file twice, or two files holding the same pair, adds nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from ..errors import MalformedInput
from ..store import Session
from ._common import Batches, SessionList, check_file_import, sessions_result, watching_roots
from ._progress import Progress, wants_total
from ._reading import as_path, count_lines, iter_jsonl

__all__ = ["import_hh", "parse_turns"]

_TURN = re.compile(r"(?:\A|\n\n)(Human|Assistant): ?")
_ROLES = {"Human": "user", "Assistant": "assistant"}


def parse_turns(text: str) -> list[tuple[str, str]]:
    """Split an HH transcript into ``[(role, text), ...]``; ValueError when it holds no turn."""
    pieces = _TURN.split(text)
    head = pieces[0]
    if head.strip():
        raise ValueError(f"text before the first 'Human:' or 'Assistant:' turn: {head[:60]!r}")
    if len(pieces) < 3:
        raise ValueError("no 'Human:' or 'Assistant:' turn found")
    return [(_ROLES[pieces[i]], pieces[i + 1]) for i in range(1, len(pieces), 2)]


def _turns_render(turns: list[tuple[str, str]]) -> str:
    """Inverse of :func:`parse_turns` for texts that start with a blank line (the HH layout)."""
    names = {v: k for k, v in _ROLES.items()}
    return "".join(f"\n\n{names[role]}: {text}" for role, text in turns)


def _pair_items(chosen: list, rejected: list) -> list[tuple[dict, str | None, None]]:
    shared = 0
    limit = min(len(chosen), len(rejected)) - 1  # each branch keeps at least one turn
    while shared < limit and chosen[shared] == rejected[shared]:
        shared += 1
    items: list[tuple[dict, str | None, None]] = []
    parent: str | None = None
    for i in range(shared):
        role, text = chosen[i]
        mid = f"p{i}"
        items.append(({"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}, parent, None))
        parent = mid
    fork = parent
    for prefix, turns, is_chosen in (("r", rejected, False), ("c", chosen, True)):
        parent = fork
        for i in range(shared, len(turns)):
            role, text = turns[i]
            mid = f"{prefix}{i}"
            items.append(
                (
                    {
                        "id": mid,
                        "role": role,
                        "parts": [{"type": "text", "text": text}],
                        "metadata": {"hh": {"chosen": is_chosen}},
                    },
                    parent,
                    None,
                )
            )
            parent = mid
    return items


def import_hh(store, path: Any, *, session_prefix: str = "hh-", progress: Any = None) -> Sequence[Session]:
    """Import HH-RLHF pairs: one session per distinct pair; returns the sessions in file order.

    The sessions come as a ``list``; past 10,000 of them as a
    :class:`~sessionkit.io.SessionList` (read like a list, ids packed), so memory stays bounded.

    Idempotent. The file is read a line at a time; pairs are written in groups of
    200 per transaction. Malformed input raises :class:`MalformedInput` naming the
    line; the pairs before it are stored (the error says how many) and nothing of
    the bad one, so importing the corrected file again completes the import.
    ``progress``: ``None`` shows a bar only in a terminal or notebook,
    ``True``/``False`` force it, a callable gets ``(done, total)`` lines.
    """
    check_file_import(store, session_prefix, progress)
    path = as_path(path)
    source = str(path)
    total = count_lines(path) if wants_total(progress) else None
    with (
        watching_roots(store, source) as watch,
        SessionList(store) as sessions,
        Progress(progress, total=total, desc=f"importing {path.name}", unit="pairs") as bar,
        Batches(store, source=source, unit="pairs") as batches,
    ):
        for lineno, obj, nbytes in iter_jsonl(path):
            where = f"line {lineno}"
            if not isinstance(obj, dict):
                raise MalformedInput(source, where, "expected a JSON object with 'chosen' and 'rejected'")
            turns = {}
            for key in ("chosen", "rejected"):
                value = obj.get(key)
                if not isinstance(value, str):
                    raise MalformedInput(source, where, f"field {key!r} is missing or not a string")
                try:
                    turns[key] = parse_turns(value)
                except ValueError as exc:
                    raise MalformedInput(source, where, f"field {key!r}: {exc}") from None
            digest = hashlib.sha256(
                obj["chosen"].encode("utf-8") + b"\x00" + obj["rejected"].encode("utf-8")
            ).hexdigest()[:20]
            session = store.session(session_prefix + digest)
            items = _pair_items(turns["chosen"], turns["rejected"])
            batches.write_record(where, session, items, "pair", watch=watch, nbytes=nbytes)
            sessions.append_new(session.session_id)
            bar.update()
    return sessions_result(sessions)
