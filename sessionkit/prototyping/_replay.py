"""``replay``: re-ask a stored conversation's user turns with another agent, beside the original
(docs/prototyping.md)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from ..agent import ROOT, Agent
from ..agent.events import HasSyncConversation
from ..errors import UsageError
from ..io import Progress
from ..parts import text_of
from ..store import Session

__all__ = ["REPLAY_COLUMNS", "Replay", "replay"]

#: A session to replay or replay into: a store's session, or an ``sk.aio`` one.
StoreSession: TypeAlias = Session | HasSyncConversation

#: The columns of :meth:`Replay.to_pandas`, one row per replayed user turn.
REPLAY_COLUMNS = [
    "source_session",
    "turn",
    "user_text",
    "original_text",
    "replay_text",
    "text_changed",
    "original_tools",
    "replay_tools",
    "tools_changed",
    "original_tokens",
    "replay_tokens",
    "original_cost_usd",
    "replay_cost_usd",
    "status",
    "error",
    "resumed",
    "original_id",
    "replay_id",
]


@dataclass(frozen=True)
class Replay:
    """What :func:`replay` returns: a row per user turn of every source, in order.

    ``leaves`` maps each source session id to the replay's last message (``None`` when
    its first turn failed); ``name`` is the replay's name (its message ids start with it).
    """

    name: str
    rows: list[dict]
    leaves: dict[str, str | None]

    def to_pandas(self):
        """The rows as a DataFrame (needs pandas: the ``analysis`` extra)."""
        from ..analysis import rows_df

        return rows_df(self.rows, REPLAY_COLUMNS)


def _reader(session: object, what: str) -> tuple[StoreSession, Session]:
    """The session as given (what the agent runs in) and the store session it reads through."""
    if isinstance(session, HasSyncConversation):
        reader = session.sync  # an sk.aio session reads through its store session
        if isinstance(reader, Session):
            return session, reader
    elif isinstance(session, Session):
        return session, session
    # variants and replays are branches of the store's tree
    raise UsageError(f"replay needs {what} in a sessionkit store (a replay is a branch)")


def _sources(source: object) -> list[tuple[object, str | None]]:
    """``(session, leaf_id)`` for a session (its latest path), a ``(session, leaf_id)`` pair or a list of either."""
    if isinstance(source, tuple) and len(source) == 2 and isinstance(source[1], str):
        return [(source[0], source[1])]
    if isinstance(source, (list, tuple)):
        out: list[tuple[object, str | None]] = []
        for item in source:
            out.extend(_sources(item))
        return out
    return [(source, None)]


def _facts(replies: Iterable[dict]) -> dict:
    """What a turn's replies said and cost: final text, tools called, output tokens, cost."""
    text, tools, tokens, cost, priced = None, [], 0, 0.0, True
    counted = False
    for message in replies:
        if message.get("role") != "assistant":
            continue
        said = text_of(message, "")
        if said:
            text = said
        tools += [p["type"][5:] for p in message.get("parts") or () if str(p.get("type", "")).startswith("tool-")]
        usage = (message.get("metadata") or {}).get("usage")
        if isinstance(usage, dict):
            counted = True
            tokens += int(usage.get("out") or 0)
            if isinstance(usage.get("cost_usd"), (int, float)):
                cost += float(usage["cost_usd"])
            else:
                priced = False
        else:
            priced = False
    return {
        "text": text,
        "tools": tools,
        "tokens": tokens if counted else None,
        "cost": cost if counted and priced else None,
    }


def _turns(path: list[dict]) -> tuple[str | None, list[tuple[dict, list[dict]]]]:
    """Where the replay's first user message hangs, and each user message with the replies that follow it.

    The replay hangs above the system messages right before the first user message (the
    system prompt the original was recorded with): the replaying agent's own instructions
    take their place, as they do in a ``target`` session.
    """
    turns: list[tuple[dict, list[dict]]] = []
    first_parent: str | None = None
    for index, message in enumerate(path):
        if message.get("role") == "user":
            if not turns:
                above = index
                while above and path[above - 1].get("role") == "system":
                    above -= 1
                first_parent = path[above - 1]["id"] if above else None
            turns.append((message, []))
        elif turns:
            turns[-1][1].append(message)
    return first_parent, turns


def _replayed_from(path: list[dict], name: str, source: str) -> str | None:
    """The original leaf a path replays (it is a replay ``name`` of ``source``), else None."""
    for message in path:
        labels = (message.get("metadata") or {}).get("labels")
        if isinstance(labels, dict) and labels.get("replay") == name and labels.get("source") == source:
            leaf = labels.get("leaf")
            return leaf if isinstance(leaf, str) else None
    return None


def _stored_run(reader: Session, user: dict) -> tuple[list[dict], str]:
    """The messages a replayed turn appended (its stored user message, then its replies) and the last one's id."""
    run_id = (user.get("metadata") or {}).get("run_id")
    chain, last = [user], user["id"]
    while True:
        below = [m for m in reader.branches(last) if (m.get("metadata") or {}).get("run_id") == run_id]
        if not below:
            return chain, last
        chain.append(below[0])
        last = below[0]["id"]


async def replay(
    agent: Agent,
    source: StoreSession | tuple[StoreSession, str] | Sequence[StoreSession | tuple[StoreSession, str]],
    *,
    target: StoreSession | None = None,
    name: str | None = None,
    progress: bool | Callable[[int, int | None], object] | None = None,
    context: dict | None = None,
    timeout: float | None = None,
) -> Replay:
    """Re-ask the user turns of stored conversations with ``agent``, each replay a branch beside the original.

    ``source`` is a session (its latest path; when that is this replay's own branch, the
    path it replays), a ``(session, leaf_id)`` pair (that path) or a list of these. Each
    user message of the path is asked again, in order, the model seeing the replay's own
    earlier turns; the first hangs under the original's first
    user message's parent (a new root when there is none), so the replay sits beside
    the original. With ``target`` (a store session), every replay starts a root
    conversation there instead. Either way the model sees ``agent``'s instructions, not
    the system prompt the original was recorded with: in place, the replay hangs above
    the system messages right before the first user message.

    Resumable: a replayed user message's id is ``<name>:<original id>`` (with the source
    session between them when ``target`` is given), so calling ``replay`` again with the
    same ``name`` (default: the agent's name) skips the turns already stored
    (``resumed`` in their rows) and goes on from the first missing one. A turn that fails
    is a row with its ``error``, and that source stops there: its later turns are rows with
    status ``"not run"`` (they would build on it). ``progress`` is as for the importers:
    ``None`` (a bar for long replays), ``True``, ``False`` or a ``fn(done, total)`` called
    after each turn.
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"agent must be an Agent, got {type(agent).__name__}")
    name = agent.name if name is None else name
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"name must be a non-empty str without ':', got {name!r}")
    pairs = _sources(source)
    readers = [(*_reader(session, "a source session"), leaf) for session, leaf in pairs]
    sink = None if target is None else _reader(target, "the target session")

    plans = []
    for session, reader, leaf in readers:
        path = await asyncio.to_thread(reader.get_history, leaf_id=leaf, compacted=False)
        if leaf is None:  # the latest path: after a replay into this session, the replay's own
            mark = _replayed_from(path, name, reader.session_id)
            if mark is not None:
                leaf = mark
                path = await asyncio.to_thread(reader.get_history, leaf_id=leaf, compacted=False)
        first_parent, turns = _turns(path)
        plans.append((session, reader, first_parent, turns, path[-1]["id"] if path else None))
    rows: list[dict] = []
    leaves: dict[str, str | None] = {}
    with Progress(progress, total=sum(len(p[3]) for p in plans), desc="replay", unit="turns", auto_min=20) as shown:
        for session, reader, first_parent, turns, source_leaf in plans:
            out_session, out_reader = (session, reader) if sink is None else sink
            prefix = f"{name}:" if sink is None else f"{name}:{reader.session_id}:"
            at = (first_parent or ROOT) if sink is None else ROOT
            stopped = False
            for number, (user, originals) in enumerate(turns, 1):
                row = _row(reader.session_id, number, user, originals, prefix + user["id"])
                rows.append(row)
                if stopped:  # an earlier turn failed: this one is listed, not asked
                    shown.update(1)
                    continue
                stored = await asyncio.to_thread(out_reader.get, row["replay_id"])
                if stored is not None:  # replayed before this call: not asked again
                    chain, at = await asyncio.to_thread(_stored_run, out_reader, stored)
                    _fill(row, _facts(chain[1:]), status="completed", resumed=True)
                    shown.update(1)
                    continue
                prompt = {
                    "id": row["replay_id"],
                    "role": "user",
                    "parts": copy.deepcopy(user.get("parts") or []),
                }
                labels = {
                    "replay": name,
                    "source": reader.session_id,
                    "leaf": source_leaf,
                    "turn": number,
                    "of": user["id"],
                }
                try:
                    result = await agent.run(
                        prompt, session=out_session, at=at, context=context, timeout=timeout, labels=labels
                    )
                except Exception as exc:  # a failed turn is a row; this source stops here
                    row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
                    shown.update(1)
                    stopped = True
                    continue
                at = result.messages[-1]["id"]
                _fill(row, _facts(result.messages[1:]), status="completed", resumed=False)
                shown.update(1)
            leaves[reader.session_id] = at if isinstance(at, str) and at != first_parent else None
    return Replay(name=name, rows=rows, leaves=leaves)


def _row(source: str, number: int, user: dict, originals: list[dict], replay_id: str) -> dict:
    facts = _facts(originals)
    return {
        "source_session": source,
        "turn": number,
        "user_text": text_of(user, ""),
        "original_text": facts["text"],
        "replay_text": None,
        "text_changed": None,
        "original_tools": facts["tools"],
        "replay_tools": None,
        "tools_changed": None,
        "original_tokens": facts["tokens"],
        "replay_tokens": None,
        "original_cost_usd": facts["cost"],
        "replay_cost_usd": None,
        "status": "not run",
        "error": None,
        "resumed": False,
        "original_id": user["id"],
        "replay_id": replay_id,
    }


def _fill(row: dict, facts: dict, *, status: str, resumed: bool) -> None:
    row.update(
        replay_text=facts["text"],
        text_changed=facts["text"] != row["original_text"],
        replay_tools=facts["tools"],
        tools_changed=facts["tools"] != row["original_tools"],
        replay_tokens=facts["tokens"],
        replay_cost_usd=facts["cost"],
        status=status,
        resumed=resumed,
    )
