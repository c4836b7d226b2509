"""How stores, sessions, paths, trees and search hits print in a terminal."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import sessionkit as sk
from sessionkit.messages import estimate_tokens
from sessionkit.parts import fold_lines, input_text, output_text, overlay_info, text_of

from ._common import _MAX_INDENT, _clip, _count, _inline_size, _json, _preview, _print_table, _sid, _size, _when

_STAT_ORDER = ("sessions", "messages", "compactions", "blobs", "indexed_messages", "runs", "events")


def _file_sizes(store: sk.Store) -> dict:
    """The database file's size on disk and its write-ahead log's, for a store in a local file.

    The write-ahead log (SQLite's ``-wal``, DuckDB's ``.wal``) holds recent writes until a
    checkpoint folds them into the file; it is reported beside the size, not in it.
    """
    path = store.path
    if not path or path == ":memory:" or not os.path.isfile(path):
        return {}
    wal = path + ("-wal" if store.settings.engine == "sqlite" else ".wal")
    return {"file_bytes": os.path.getsize(path), "wal_bytes": os.path.getsize(wal) if os.path.isfile(wal) else 0}


def _info_report(store: sk.Store, target: str) -> dict:
    stats = store.stats()
    return {
        "store": store.path or target,
        "engine": store.settings.engine,
        "schema_version": stats.get("schema_version"),
        **stats,
        **_file_sizes(store),
    }


def _render_info(store: sk.Store, target: str, out: TextIO) -> None:
    report = _info_report(store, target)
    rows = [
        ("store", str(report["store"])),
        ("engine", str(report["engine"])),
        ("schema", "-" if report["schema_version"] is None else str(report["schema_version"])),
        ("size", _size(report.get("file_bytes", report.get("bytes", 0)))),
    ]
    if report.get("wal_bytes"):
        rows.append(
            (
                "wal",
                f"{_size(report['wal_bytes'])} write-ahead log (recent writes, folded into the file "
                "at the next checkpoint)",
            )
        )
    for key in _STAT_ORDER:
        if key not in report:
            continue
        value = f"{report[key]:,}"
        if key == "blobs":
            value += f" ({_size(report.get('blob_bytes', 0))})"
        if key == "indexed_messages":
            key = "indexed"
            value += (
                " messages in the search index"
                if report["indexed_messages"]
                else " (the search index is built by the first search)"
            )
        rows.append((key, value))
    shown = set(_STAT_ORDER) | {"store", "bytes", "blob_bytes", "engine", "schema_version", "file_bytes", "wal_bytes"}
    rows += [(k, str(v)) for k, v in sorted(report.items()) if k not in shown]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}", file=out)


def _ls_rows(store: sk.Store) -> list[list[str]]:
    return [
        [_sid(i.id), f"{i.message_count:,}", _when(i.created_at), _when(i.updated_at)] for i in store.list_sessions()
    ]


def _render_ls(store: sk.Store, target: str, out: TextIO) -> None:
    rows = _ls_rows(store)
    if not rows:
        print(f"no sessions in {target}", file=out)
        return
    _print_table(["SESSION", "MESSAGES", "CREATED (UTC)", "UPDATED (UTC)"], rows, out, right=(1,))


def _render_output(value: Any, out: TextIO, *, all_output: bool, what: str = "output") -> None:
    """A tool's output (or, with ``what="input"``, its input: parts.input_text) as readable
    text (parts.output_text), folded past FOLD_LINES lines."""
    text = input_text(value) if what == "input" else output_text(value)
    shown, hidden = (text, 0) if all_output else fold_lines(text)
    lines = shown.split("\n")
    if len(lines) == 1 and not hidden:
        print(f"    {what}: {' ' if what == 'input' else ''}{lines[0]}", file=out)
        return
    print(f"    {what}:", file=out)
    for line in lines:
        print(f"      {line}", file=out)
    if hidden:
        print(f"      … {_count(hidden, 'more line')} (--all-output shows them)", file=out)


def _render_part(part: Any, out: TextIO, *, all_output: bool = False) -> None:
    if not isinstance(part, dict):
        print(f"  [part] {_clip(_json(part))}", file=out)
        return
    ptype = str(part.get("type", ""))
    if ptype == "text":
        print(part.get("text", ""), file=out)
    elif ptype == "reasoning":
        lines = str(part.get("text", "")).splitlines() or [""]
        print(f"  (reasoning) {lines[0]}", file=out)
        for line in lines[1:]:
            print(f"              {line}", file=out)
    elif ptype.startswith("tool-") or ptype == "dynamic-tool":
        name = ptype[5:] if ptype.startswith("tool-") else part.get("toolName", "?")
        bits = [b for b in (part.get("state"), part.get("toolCallId")) if b]
        print(f"  tool {name}" + (f"  ({', '.join(map(str, bits))})" if bits else ""), file=out)
        if "input" in part:
            _render_output(part["input"], out, all_output=all_output, what="input")
        if "output" in part:
            _render_output(part["output"], out, all_output=all_output)
        if part.get("errorText"):
            print(f"    error:  {_clip(str(part['errorText']))}", file=out)
    elif ptype == "file":
        label = " ".join(str(x) for x in (part.get("mediaType"), part.get("filename")) if x)
        size = _inline_size(part)
        where = f"{_size(size)} inline" if size is not None else _clip(str(part.get("url", "")), 100)
        print(f"  file {label or '?'}  ({where})", file=out)
    elif ptype == "step-start":
        return
    else:
        print(f"  [{ptype}] {_clip(_json({k: v for k, v in part.items() if k != 'type'}))}", file=out)


def _label_heading(label: sk.Label) -> str:
    """``label TAG  (on the branch ending here · rating 0.75 · code: tool_error@1 · by ana)``."""
    bits = []
    if label.target == "branch":
        bits.append("on the branch ending here")
    if label.rating is not None:
        bits.append(f"rating {label.rating:g}")
    if label.source != "human" or label.scorer:
        bits.append(f"{label.source}: {label.scorer}" if label.scorer else label.source)
    if label.author:
        bits.append(f"by {label.author}")
    return f"  label {label.tag}" + (f"  ({' · '.join(bits)})" if bits else "")


def _render_labels(labels: Sequence[sk.Label], out: TextIO) -> None:
    """A message's labels and those of the branch ending at it, each with its note and a scorer's rationale."""
    for label in labels:
        print(_label_heading(label), file=out)
        for what, text in (("note", label.note), ("rationale", label.rationale)):
            if text:
                lines = output_text(text).split("\n")
                print(f"    {what}: {lines[0]}", file=out)
                for line in lines[1:]:
                    print(f"      {line}", file=out)


def _labels_by_message(labels: Iterable[sk.Label]) -> dict[str, list[sk.Label]]:
    """Labels grouped by the message they are on, message labels before branch labels, each in the order added."""
    out: dict[str, list[sk.Label]] = {}
    for label in sorted(labels, key=lambda x: x.target == "branch"):  # (a stable sort)
        out.setdefault(label.message_id, []).append(label)
    return out


def _render_message(
    message: dict, out: TextIO, *, note: str = "", all_output: bool = False, labels: Sequence[sk.Label] = ()
) -> None:
    bits = [
        str(message.get("role", "?")),
        str(message.get("id", "?")),
        _when(message.get("createdAt")),
        f"{estimate_tokens(message):,} tokens",
    ]
    if note:
        bits.append(note)
    print("── " + " · ".join(bits), file=out)
    for part in message.get("parts") or ():
        _render_part(part, out, all_output=all_output)
    _render_labels(labels, out)
    print(file=out)


def _span(info: dict) -> str:
    return f"{info.get('from_id')} … {info.get('to_id')}"


def _entry_end(message: dict) -> str:
    """The id a path entry ends at: a summary stands for its range, which ends at ``to_id``."""
    info = overlay_info(message)
    return str(info.get("to_id")) if info is not None else message["id"]


def _newest(session: sk.Session, leaf: str | None, compacted: bool, n: int) -> tuple[str | None, list[dict]]:
    """The newest ``n`` entries of a path, oldest first, and the id the first of them follows.

    Walks from the leaf up and stops there: no older message is read.
    """
    tail = list(itertools.islice(session.history(leaf_id=leaf, compacted=compacted, newest_first=True), n + 1))
    tail.reverse()
    before = _entry_end(tail[0]) if len(tail) > n else None
    return before, tail[-n:]


def _render_path(
    session: sk.Session,
    out: TextIO,
    *,
    leaf_id: str | None,
    full: bool,
    last: int | None = None,
    all_output: bool = False,
) -> None:
    """Print the path to ``leaf_id`` (default: the latest leaf) as a chat.

    Without ``full``: what the model sees, each compaction summary in place of its range.
    With ``full``: every stored message, the compacted ranges marked where they start and end.
    A message with siblings says which branch it is. A footer gives message and token counts.
    """
    latest = session.latest_leaf()
    if latest is None:
        print(f"session {_sid(session.session_id)} is empty", file=out)
        return
    leaf = leaf_id if leaf_id is not None else latest["id"]
    session.path_length(leaf)  # an unknown leaf fails here, before anything is printed
    comps: dict[Any, sk.Compaction] = {c.id: c for c in session.compactions()}  # looked up by metadata values
    applied: list[dict] = []
    if full and comps:  # which ranges the model would not see: a first pass keeping only summary metadata
        applied = [info for m in session.history(leaf_id=leaf) if (info := overlay_info(m)) is not None]
    begins = {a["from_id"]: a for a in applied}
    ends = {a["to_id"]: a for a in applied}

    print(
        f"session {_sid(session.session_id)} · path to {leaf}{' (latest leaf)' if leaf == latest['id'] else ''}"
        f" · {'full history' if full else 'as the model sees it'}",
        file=out,
    )
    print(file=out)
    raw_count = 0
    raw_tokens = 0
    parent: str | None = None
    entries: Iterable[dict] = session.history(leaf_id=leaf, compacted=not full)
    tail: list[dict] = []
    if last is not None:
        parent, tail = _newest(session, leaf, not full, last)
        entries = tail
        if parent is not None:
            print(
                f"… earlier entries not shown: the path holds {_count(session.path_length(leaf), 'message')}; "
                f"these are the newest {len(tail):,} (--last {last})",
                file=out,
            )
            print(file=out)
    # the labels of the messages shown (with --last: of those only), grouped by message
    labels = _labels_by_message(session.labels([m["id"] for m in tail]) if last is not None else session.labels())
    for message in entries:
        info = overlay_info(message)
        if info is not None:  # a summary standing in for a range (model view only)
            applied.append(info)
            comp = comps.get(info.get("id"))
            after = comp.tokens_after if comp else estimate_tokens(message)
            print(
                f"══ compaction {str(info.get('id'))[:8]} · summary of {info.get('messages')} messages "
                f"({_span(info)}) · {info.get('tokens_before', 0):,} → {after:,} tokens ══",
                file=out,
            )
            print(text_of(message), file=out)
            print("══ end of summary; the messages after it are kept word for word ══", file=out)
            print(file=out)
            raw_count += int(info.get("messages") or 0)
            raw_tokens += int(info.get("tokens_before") or 0)
            parent = info.get("to_id")
            continue
        mid = message["id"]
        if mid in begins:
            a = begins[mid]
            print(
                f"══ compacted range begins · compaction {str(a['id'])[:8]} shows the model one summary "
                f"instead of the next {a.get('messages')} messages ({_span(a)}) ══",
                file=out,
            )
            print(file=out)
        note = ""
        if parent is not None:
            siblings = [s["id"] for s in session.branches(parent)]
            if len(siblings) > 1:
                others = [s for s in siblings if s != mid]
                listed = ", ".join(others[:5]) + (", …" if len(others) > 5 else "")
                note = f"branch {siblings.index(mid) + 1} of {len(siblings)} (also: {listed})"
        _render_message(message, out, note=note, all_output=all_output, labels=labels.get(mid, []))
        if mid in ends:
            print(f"══ compacted range ends · compaction {str(ends[mid]['id'])[:8]} ══", file=out)
            print(file=out)
        raw_count += 1
        raw_tokens += estimate_tokens(message)
        parent = mid
    if last is not None:
        shown = f"{len(tail):,} {'entry' if len(tail) == 1 else 'entries'}"
        print(
            f"{shown} shown of a path of "
            f"{_count(session.path_length(leaf), 'message')}; the model sees ~{session.context_tokens(leaf):,} "
            "tokens of it.",
            file=out,
        )
    elif applied:
        seen_count = raw_count - sum(int(a.get("messages") or 0) - 1 for a in applied)
        print(
            f"{_count(raw_count, 'message')} (~{raw_tokens:,} tokens) on this path; the model sees "
            f"{seen_count:,} (~{session.context_tokens(leaf):,} tokens): "
            f"{_count(len(applied), 'compaction')} applied." + ("" if full else " Add --full to see every message."),
            file=out,
        )
    else:
        print(f"{_count(raw_count, 'message')} (~{raw_tokens:,} tokens) on this path.", file=out)


class _Tree:
    """A session's message tree from the root of the shown path, drawn from ``session.tree()``.

    A session can hold several roots (``append(..., parent_id=None)``); messages under
    other roots than the shown path's are counted rather than drawn.
    """

    def __init__(self, session: sk.Session, leaf_id: str | None):
        self.session = session
        tree = session.tree()
        self.leaf = leaf_id if leaf_id is not None else tree.latest_id
        self.is_latest = tree.latest_id is not None and self.leaf == tree.latest_id
        path = session.path(self.leaf) if self.leaf is not None else None
        self.path = [n.id for n in path.nodes] if path is not None else []
        self.on_path = set(self.path)
        self.parent: dict[str, str | None] = {}
        self.children: dict[str, list[str]] = {}
        self.depth: dict[str, int] = {}
        self.order: list[str] = []
        self.roots: list[str] = []
        if self.path:
            self._walk(tree, self.path[0])
        self.messages: dict[str, dict] = session.get_many(self.order)
        self.unreachable = len(tree) - len(self.order)
        self.compactions = [placed.compaction for placed in tree.compactions]
        self.applied: set[str] = {span.compaction.id for span in path.spans} if path is not None else set()
        self.labels = {c.id: f"c{i + 1}" for i, c in enumerate(self.compactions)}
        self.tagged = _labels_by_message(session.labels())  # the labels of each message
        self.covered: dict[str, list[str]] = {}
        self.sizes: dict[str, int | None] = {}
        for placed in tree.compactions:
            comp = placed.compaction
            ids = placed.ids if placed.ids and placed.ids[0] in self.depth else ()
            self.sizes[comp.id] = len(ids) if ids else None
            for mid in ids:
                self.covered.setdefault(mid, []).append(self.labels[comp.id])

    def _walk(self, tree, root: str) -> None:
        # Depth first, children oldest first, without recursion (paths can be very long).
        self.roots.append(root)
        self.parent[root] = None
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            mid, depth = stack.pop()
            self.depth[mid] = depth
            self.order.append(mid)
            kids = [k.id for k in tree.children(mid)]
            self.children[mid] = kids
            for kid in reversed(kids):
                self.parent[kid] = mid
                stack.append((kid, depth + 1))

    def branch_points(self) -> int:
        return sum(1 for kids in self.children.values() if len(kids) > 1)

    def render(self, out: TextIO) -> None:
        n = len(self.messages) + self.unreachable
        bp = self.branch_points()
        nc = len(self.compactions)
        print(
            f"session {_sid(self.session.session_id)}: {_count(n, 'message')}, {_count(bp, 'branch point')}, "
            f"{_count(nc, 'compaction')}",
            file=out,
        )
        print(
            f"* marks the path to {self.leaf}{' (latest leaf)' if self.is_latest else ''}; "
            "<n branches> marks a branch point",
            file=out,
        )
        if self.compactions:
            print("compactions, oldest first ([cN] tags the messages each one covers):", file=out)
            for comp in self.compactions:
                label = self.labels[comp.id]
                size = self.sizes[comp.id]
                if comp.id in self.applied:
                    state = "applied on the * path"
                else:
                    newer = [
                        self.labels[c.id]
                        for c in self.compactions
                        if c.from_id == comp.from_id and c.id in self.applied
                    ]
                    state = f"superseded by {newer[0]} (same start, newer)" if newer else "not on the * path"
                print(
                    f"  {label}  {comp.id[:8]}  {comp.from_id} … {comp.to_id}  "
                    f"{'?' if size is None else size} messages  "
                    f"{comp.tokens_before:,} → {comp.tokens_after:,} tokens  {state}",
                    file=out,
                )
        print(file=out)
        stack: list[tuple[str, str, str]] = [(r, "", "") for r in reversed(self.roots)]
        while stack:
            mid, prefix, cont = stack.pop()
            msg = self.messages[mid]
            kids = self.children[mid]
            tags = ""
            if len(kids) > 1:
                tags += f"  <{len(kids)} branches>"
            if mid in self.covered:
                tags += "  [" + " ".join(self.covered[mid]) + "]"
            if mid in self.tagged:
                names = [x.tag + (" (branch)" if x.target == "branch" else "") for x in self.tagged[mid]]
                tags += "  labels: " + ", ".join(names)
            mark = "* " if mid in self.on_path else "  "
            role = str(msg.get("role", "?"))
            if len(prefix) > _MAX_INDENT:  # deeply nested branches: keep the nearest levels visible
                prefix = "…" + prefix[-(_MAX_INDENT - 1) :]
            print(f"{mark}{prefix}{mid}  {role}: {_preview(msg)}{tags}", file=out)
            if len(kids) == 1:
                stack.append((kids[0], cont, cont))
            else:
                for i in range(len(kids) - 1, -1, -1):
                    last = i == len(kids) - 1
                    stack.append((kids[i], cont + ("└── " if last else "├── "), cont + ("    " if last else "│   ")))
        if self.unreachable:
            print(
                f"({_count(self.unreachable, 'more message')} sit under other roots of this session, "
                f"which cannot be reached from {self.roots[0]!r}; show --leaf ID shows their paths)",
                file=out,
            )

    def as_json(self) -> dict:
        return {
            "session": self.session.session_id,
            "leaf": self.leaf,
            "path": self.path,
            "compactions": [
                {
                    "id": c.id,
                    "from_id": c.from_id,
                    "to_id": c.to_id,
                    "summary": c.summary,
                    "created_at": c.created_at,
                    "tokens_before": c.tokens_before,
                    "tokens_after": c.tokens_after,
                    "messages": self.sizes[c.id],
                    "applied": c.id in self.applied,
                }
                for c in self.compactions
            ],
            "nodes": [
                {
                    "id": mid,
                    "parent_id": self.parent[mid],
                    "depth": self.depth[mid],
                    "children": self.children[mid],
                    "on_path": mid in self.on_path,
                    "compactions": [c.id for c in self.compactions if self.labels[c.id] in self.covered.get(mid, ())],
                    "message": self.messages[mid],
                    "labels": [x.to_dict() for x in self.tagged.get(mid, ())],
                }
                for mid in self.order
            ],
            "unreachable": self.unreachable,
        }


def _render_hits(hits: list, query: str, out: TextIO) -> None:
    if not hits:
        print(f"no matches for {query!r}", file=out)
        return
    print(f"{len(hits)} hit{'' if len(hits) == 1 else 's'} for {query!r}, best first:", file=out)
    for hit in hits:
        print(file=out)
        print(f"{_sid(hit.session_id)} / {hit.id} · {hit.role} · score {hit.score:.3g}", file=out)
        print(f"    {' '.join(hit.snippet.split())}", file=out)
