"""What the notebook views read from a session, without ipywidgets.

Everything here is plain Python over the store's public reads: the tree read
model (``session.tree()`` and ``session.path()``: ids, parents, roles, token
counts and compaction spans, no message content), so the static HTML snapshots
work where ipywidgets is not installed and the widgets send a 10,000-message tree
without reading one message body. Message content is read only for the ids a
view asks for (``session.get_many``).

Sessions that are not backed by a sessionkit store (``sk.create_session`` over
a ``SessionStore``) are shown as the straight line of messages they hold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from ..agent.events import Conversation
from ..parts import OVERLAY_PREFIX, input_text, output_text, preview, tool_parts
from ..store import Session, Tree
from ._payloads import (
    BranchDiff,
    BranchSide,
    CompactionBand,
    LabelsByMessage,
    LabelView,
    MessageView,
    PartView,
    PathCompaction,
    PathEntry,
    PathPayload,
    ToolPartView,
    TreePayload,
)

__all__ = [
    "TreeData",
    "tree_data",
    "tree_json",
    "outline_rows",
    "path_entries",
    "load_messages",
    "message_view",
    "message_preview",
    "branch_diff",
    "labels_json",
    "ROLE_ORDER",
    "ViewedSession",
]

#: What a view shows: a store's session (a tree), any other session (a straight line of
#: messages, ``sk.create_session``) or a list of messages.
ViewedSession = Conversation | Sequence[dict]

#: Roles get small integer codes in the compact tree; these come first, in this order.
ROLE_ORDER = ("user", "assistant", "system", "tool")

#: A chain longer than this shows its first and last message around a "n more" row.
COLLAPSE_MIN = 4

_PREVIEW_CHARS = 96
_TEXT_LIMIT = 20_000
_JSON_LIMIT = 4_000


# ---------------------------------------------------------------------------
# the tree


@dataclass
class TreeData:
    """A session's message tree as parallel arrays (index = position in write order).

    ``parent[i]`` is the index of message i's parent or -1; parents always come
    before their children. ``latest`` is the index of the latest leaf (-1 when
    empty); ``compactions`` are dicts with ``from``/``to`` as indices.
    """

    session_id: str
    ids: list[str] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    role: list[int] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    latest: int = -1
    compactions: list[CompactionBand] = field(default_factory=list)
    linear: bool = False  # True when the session is a plain list, not a store tree

    @property
    def n(self) -> int:
        return len(self.ids)

    def index(self) -> dict[str, int]:
        return {mid: i for i, mid in enumerate(self.ids)}

    def children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in self.ids]
        for i, p in enumerate(self.parent):
            if p >= 0:
                kids[p].append(i)
        return kids

    def path_to(self, i: int) -> list[int]:
        """Indices from the root down to ``i``."""
        out = []
        while i >= 0:
            out.append(i)
            i = self.parent[i]
        out.reverse()
        return out

    def role_of(self, i: int) -> str:
        return self.roles[self.role[i]]


def is_store_session(session: object) -> TypeGuard[Session]:
    """A session of a sessionkit Store (a tree with cheap skeleton reads)."""
    return isinstance(session, Session)


#: The fields of a label the views show (docs/labels.md).
LABEL_FIELDS = tuple(LabelView.__annotations__)


def labels_json(session: object) -> LabelsByMessage:
    """A store session's labels by message id, in the order they were added ({} for other sessions)."""
    if not is_store_session(session):
        return {}
    out: LabelsByMessage = {}
    for label in session.labels():
        view = LabelView(
            id=label.id,
            tag=label.tag,
            rating=label.rating,
            target=label.target,
            note=label.note,
            author=label.author,
            source=label.source,
            scorer=label.scorer,
            rationale=label.rationale,
        )
        out.setdefault(label.message_id, []).append(view)
    return out


def tree_data(session: ViewedSession) -> TreeData:
    """Read the skeleton of a session's tree: no message content is loaded."""
    data = TreeData(session_id=session.session_id if isinstance(session, Conversation) else "")
    codes: dict[str, int] = {}

    def code(role: str) -> int:
        c = codes.get(role)
        if c is None:
            c = codes[role] = len(data.roles)
            data.roles.append(role)
        return c

    for r in ROLE_ORDER:
        code(r)
    if is_store_session(session):
        tree = session.tree()
        pos: dict[str, int] = {}
        for i, nd in enumerate(tree.nodes):
            pos[nd.id] = i
            data.ids.append(nd.id)
            data.parent.append(-1 if nd.parent_id is None else pos.get(nd.parent_id, -1))
            data.role.append(code(nd.role))
            data.tokens.append(int(nd.tokens))
            data.seqs.append(int(nd.seq))
        data.latest = -1 if tree.latest_id is None else pos.get(tree.latest_id, -1)
        data.compactions = _compaction_bands(tree, pos)
    else:
        from ..messages import estimate_tokens

        messages = list(session.get_history()) if isinstance(session, Conversation) else list(session)
        data.linear = True
        for i, m in enumerate(messages):
            data.ids.append(str(m.get("id", i)))
            data.parent.append(i - 1)
            data.role.append(code(str(m.get("role", "?"))))
            data.tokens.append(estimate_tokens(m))
            data.seqs.append(i)
        data.latest = len(messages) - 1
    return data


def _compaction_bands(tree: Tree, pos: dict[str, int]) -> list[CompactionBand]:
    """Compactions as index ranges, oldest first; ``superseded`` when a newer one overlaps it."""
    bands: list[CompactionBand] = []
    for placed in tree.compactions:
        comp = placed.compaction
        a, b = pos.get(comp.from_id), pos.get(comp.to_id)
        bands.append(
            {
                "id": comp.id,
                "from": -1 if a is None else a,
                "to": -1 if b is None else b,
                "from_id": comp.from_id,
                "to_id": comp.to_id,
                "summary": comp.summary,
                "messages": placed.messages,
                "tokens_before": int(comp.tokens_before),
                "tokens_after": int(comp.tokens_after),
                "created_at": comp.created_at,
                "superseded": placed.superseded,
            }
        )
    return bands


def tree_json(data: TreeData) -> TreePayload:
    """The compact JSON a BranchTree front end receives once (arrays, no text)."""
    return {
        "v": 1,
        "session_id": data.session_id,
        "n": data.n,
        "ids": data.ids,
        "parent": data.parent,
        "role": data.role,
        "roles": data.roles,
        "tokens": data.tokens,
        "latest": data.latest,
        "compactions": data.compactions,
        "linear": data.linear,
    }


def outline_rows(
    data: TreeData,
    *,
    collapse: bool = True,
    expanded: frozenset[int] | set[int] = frozenset(),
    guides: list[str] | None = None,
) -> list[tuple]:
    """The rows a BranchTree shows, top to bottom (the front end computes the same rows).

    The tree is cut into chains: a chain starts at a root or at a child of a
    branch point and runs down while a message has exactly one child. Chains are
    visited depth first, children oldest first; a chain is indented one step
    deeper than the branch point it hangs from. With ``collapse``, a chain of
    ``COLLAPSE_MIN`` or more messages shows its first and last message around one
    ``("more", first_hidden, last_hidden, depth)`` row unless its first message's
    index is in ``expanded``. A compaction adds a ``("band", k, depth)`` row just
    before the row holding its first message. Other rows are ``("node", i, depth)``.

    Pass a list as ``guides`` to receive, for each row, the box-drawing prefix
    (``"│ ├ "``...) a text rendering of the tree puts before it.
    """
    kids = data.children()
    band_at: dict[int, list[int]] = {}
    for k, band in enumerate(data.compactions):
        if band["from"] >= 0 and band["messages"]:
            band_at.setdefault(band["from"], []).append(k)
    rows: list[tuple] = []
    roots = [i for i, p in enumerate(data.parent) if p < 0]
    # stack items: (first message, depth, guide prefix of the parent level, last sibling?)
    stack = [(r, 0, "", True) for r in reversed(roots)]
    while stack:
        start, depth, pre, last = stack.pop()
        chain = [start]
        while len(kids[chain[-1]]) == 1:
            chain.append(kids[chain[-1]][0])
        first_guide = pre + (("└ " if last else "├ ") if depth else "")
        next_guide = pre + (("  " if last else "│ ") if depth else "")
        todo: list[tuple] = []
        if collapse and len(chain) >= COLLAPSE_MIN and start not in expanded:
            hidden = chain[1:-1]
            for k in band_at.get(chain[0], ()):
                todo.append(("band", k, depth))
            todo.append(("node", chain[0], depth))
            for i in hidden:
                for k in band_at.get(i, ()):
                    todo.append(("band", k, depth))
            todo.append(("more", hidden[0], hidden[-1], depth))
            for k in band_at.get(chain[-1], ()):
                todo.append(("band", k, depth))
            todo.append(("node", chain[-1], depth))
        else:
            for i in chain:
                for k in band_at.get(i, ()):
                    todo.append(("band", k, depth))
                todo.append(("node", i, depth))
        rows.extend(todo)
        if guides is not None:
            guides.append(first_guide)
            guides.extend([next_guide] * (len(todo) - 1))
        children = kids[chain[-1]]
        for j in range(len(children) - 1, -1, -1):
            stack.append((children[j], depth + 1, next_guide, j == len(children) - 1))
    return rows


# ---------------------------------------------------------------------------
# one path


def path_entries(session: ViewedSession, leaf_id: str | None, *, compacted: bool) -> PathPayload:
    """The path to ``leaf_id`` (default: the latest leaf) as Transcript entries, no content.

    Returns ``{"leaf_id", "entries", "compactions", "tokens_model", "tokens_full"}``.
    An entry is ``{"id", "role", "tokens", "kind"}`` where ``kind`` is
    ``"message"``, ``"summary"`` (a compaction as the model sees it, with
    ``compaction``: its index in ``compactions``) or, in the full history,
    ``"hidden"`` (a message a compaction replaces, with ``compaction``).
    """
    if not is_store_session(session):
        from ..messages import estimate_tokens

        msgs = list(session.get_history()) if isinstance(session, Conversation) else list(session)
        entries: list[PathEntry] = [
            {"id": str(m.get("id")), "role": str(m.get("role")), "tokens": estimate_tokens(m), "kind": "message"}
            for m in msgs
        ]
        total = sum(e["tokens"] for e in entries)
        return {
            "leaf_id": entries[-1]["id"] if entries else None,
            "entries": entries,
            "compactions": [],
            "tokens_model": total,
            "tokens_full": total,
        }
    path = session.path(leaf_id)
    if path.leaf_id is None:
        return {"leaf_id": None, "entries": [], "compactions": [], "tokens_model": 0, "tokens_full": 0}
    comp_list: list[PathCompaction] = []
    for span in path.spans:
        comp = span.compaction
        comp_list.append(
            {
                "id": comp.id,
                "overlay_id": OVERLAY_PREFIX + comp.id,
                "from_id": comp.from_id,
                "to_id": comp.to_id,
                "summary": comp.summary,
                "messages": span.messages,
                "tokens_before": int(comp.tokens_before),
                "tokens_after": int(comp.tokens_after),
                "created_at": comp.created_at,
            }
        )
    in_span = {p: k for k, span in enumerate(path.spans) for p in range(span.start, span.end + 1)}
    entries = []
    for p, node in enumerate(path.nodes):
        k = in_span.get(p)
        if k is None:
            entries.append({"id": node.id, "role": node.role, "tokens": int(node.tokens), "kind": "message"})
            continue
        if not compacted:
            entries.append(
                {"id": node.id, "role": node.role, "tokens": int(node.tokens), "kind": "hidden", "compaction": k}
            )
        elif p == path.spans[k].start:
            c = comp_list[k]
            entries.append(
                {
                    "id": c["overlay_id"],
                    "role": "assistant",
                    "tokens": c["tokens_after"],
                    "kind": "summary",
                    "compaction": k,
                }
            )
    return {
        "leaf_id": path.leaf_id,
        "entries": entries,
        "compactions": comp_list,
        "tokens_model": int(path.tokens_model),
        "tokens_full": int(path.tokens_full),
    }


# ---------------------------------------------------------------------------
# message content, on demand


def load_messages(session: ViewedSession, ids: list[str]) -> dict[str, dict]:
    """The stored messages for ``ids`` (unknown ids are left out), read in one batch."""
    out: dict[str, dict] = {}
    if not ids:
        return out
    if is_store_session(session):
        # overlay ids name no stored message; other odd values are the front end's
        wanted = [mid for mid in ids if isinstance(mid, str) and not mid.startswith(OVERLAY_PREFIX)]
        return session.get_many(wanted)
    known = set(ids)
    msgs = session.get_history() if isinstance(session, Conversation) else session
    for m in msgs:
        if str(m.get("id")) in known:
            out[str(m.get("id"))] = m
    return out


def _short_json(value: object, limit: int = _JSON_LIMIT) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit:,} more characters)"
    return text


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit:,} more characters)"


def message_preview(message: dict, limit: int = _PREVIEW_CHARS) -> str:
    """One line saying what a message holds: its text, else its tool calls or part types.

    The opening message of a variant's run (``sessionkit.prototyping.compare``) starts
    with the variant's name in brackets, so a tree shows which branch is which.
    """
    meta = message.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    variant = labels.get("variant") if isinstance(labels, dict) else None
    if isinstance(variant, str) and variant:
        return f"[{variant}] " + preview(message, limit)
    return preview(message, limit)


def message_view(message: dict, *, tokens: int | None = None) -> MessageView:
    """A message condensed for display: text, reasoning, tool calls with input and output, files.

    Long texts and JSON are cut (the cut is said in the text) so one huge message
    cannot flood the front end; inline file data is never sent, only its type.
    """
    parts: list[PartView] = []
    for p in message.get("parts") or ():
        if not isinstance(p, dict):
            continue
        kind = str(p.get("type", ""))
        if kind == "text":
            parts.append({"type": "text", "text": _clip(str(p.get("text", "")), _TEXT_LIMIT)})
        elif kind == "reasoning":
            parts.append({"type": "reasoning", "text": _clip(str(p.get("text", "")), _TEXT_LIMIT)})
        elif kind.startswith("tool-"):
            item: ToolPartView = {
                "type": "tool",
                "name": kind[5:],
                "id": p.get("toolCallId"),
                "state": p.get("state"),
                "input": _clip(input_text(p["input"]), _TEXT_LIMIT) if "input" in p else None,
                "output": _clip(output_text(p["output"]), _TEXT_LIMIT) if "output" in p else None,
                "error": p.get("errorText"),
            }
            parts.append(item)
        elif kind == "file":
            url = p.get("url")
            parts.append(
                {
                    "type": "file",
                    "mediaType": p.get("mediaType"),
                    "name": p.get("filename") or p.get("name"),
                    "url": url if isinstance(url, str) and not url.startswith("data:") else None,
                }
            )
        else:
            parts.append({"type": "other", "kind": kind, "json": _short_json(p, 1_000)})
    meta = message.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    usage = meta.get("usage") if isinstance(meta.get("usage"), dict) else None
    view: MessageView = {
        "id": message.get("id"),
        "role": message.get("role"),
        "createdAt": message.get("createdAt"),
        "preview": message_preview(message),
        "parts": parts,
        "usage": usage,
        "run_id": meta.get("run_id"),
    }
    if tokens is not None:
        view["tokens"] = tokens
    return view


# ---------------------------------------------------------------------------
# branch diff


def branch_diff(session: ViewedSession, a_id: str, b_id: str, *, data: TreeData | None = None) -> BranchDiff:
    """Compare two branches from their fork point: messages, tokens, tool calls and cost.

    ``a_id`` and ``b_id`` are any two messages; each side is the path from the
    fork point (their deepest common ancestor, excluded) down to that message.
    Cost sums ``metadata.usage.cost_usd`` of the side's replies (what runs record).
    A reply (an assistant message) without a known price, with no usage at all or
    with ``cost_usd`` ``None``, makes the cost partial: ``cost_usd`` is then ``None``
    (an unknown cost is never reported as a sum), ``cost_known_usd`` is the sum of
    the known prices (``None`` when there is none), ``cost_known`` and
    ``cost_unknown`` count the priced and unpriced replies. ``usage_in`` and
    ``usage_out`` are ``None`` when no message on the side recorded usage;
    ``usage_known`` counts those that did.
    """
    data = data or tree_data(session)
    idx = data.index()
    if a_id not in idx or b_id not in idx:
        missing = a_id if a_id not in idx else b_id
        from ..errors import MessageNotFound

        raise MessageNotFound(f"message {missing!r} is not in session {data.session_id!r}")
    pa, pb = data.path_to(idx[a_id]), data.path_to(idx[b_id])
    common = 0
    while common < min(len(pa), len(pb)) and pa[common] == pb[common]:
        common += 1
    fork = pa[common - 1] if common else -1
    sides: dict[str, BranchSide] = {}
    for name, path in (("a", pa[common:]), ("b", pb[common:])):
        ids = [data.ids[i] for i in path]
        msgs = load_messages(session, ids)
        roles: dict[str, int] = {}
        tools = 0
        cost = 0.0
        priced = 0
        unpriced = 0
        with_usage = 0
        tin = tout = 0
        for i in path:
            role = data.role_of(i)
            roles[role] = roles.get(role, 0) + 1
            m = msgs.get(data.ids[i]) or {}
            tools += len(tool_parts(m))
            usage = (m.get("metadata") or {}).get("usage") if isinstance(m.get("metadata"), dict) else None
            if not isinstance(usage, dict):
                usage = None
            if usage is not None:
                with_usage += 1
                tin += int(usage.get("in") or 0)
                tout += int(usage.get("out") or 0)
            c = usage.get("cost_usd") if usage is not None else None
            if isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c):
                cost += float(c)
                priced += 1
            elif role == "assistant" or usage is not None:
                unpriced += 1
        sides[name] = {
            "leaf_id": data.ids[path[-1]] if path else (data.ids[fork] if fork >= 0 else None),
            "messages": len(path),
            "tokens": int(sum(data.tokens[i] for i in path)),
            "roles": roles,
            "tool_calls": tools,
            "usage_in": tin if with_usage else None,
            "usage_out": tout if with_usage else None,
            "usage_known": with_usage,
            "cost_usd": (cost if priced and not unpriced else None),
            "cost_known_usd": (cost if priced else None),
            "cost_known": priced,
            "cost_unknown": unpriced,
            "first_id": data.ids[path[0]] if path else None,
            "first_preview": message_preview(msgs[data.ids[path[0]]]) if path and data.ids[path[0]] in msgs else None,
        }
    return {
        "a_id": a_id,
        "b_id": b_id,
        "fork_id": data.ids[fork] if fork >= 0 else None,
        "shared_messages": common,
        "shared_tokens": int(sum(data.tokens[i] for i in pa[:common])),
        "a": sides["a"],
        "b": sides["b"],
        "tokens_delta": sides["b"]["tokens"] - sides["a"]["tokens"],
    }
