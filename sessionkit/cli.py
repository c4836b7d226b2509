"""The ``sessionkit`` command: look inside a store from a terminal.

::

    sessionkit info chats.db                  engine, schema version, counts and sizes
    sessionkit ls chats.db                    sessions, newest activity first
    sessionkit show chats.db SESSION          the latest path as a chat, as the model sees it
    sessionkit show chats.db SESSION --full   the same path with every compacted message
    sessionkit show chats.db SESSION --tree   the whole tree, one line per message
    sessionkit search chats.db "deploy"       full-text search across sessions
    sessionkit demo                           build a demo store and print a guided tour
    sessionkit import / export                transcripts in and out (sessionkit.io)
    sessionkit serve                          the HTTP server (sessionkit.server)
    sessionkit lab [STORE]                    the tour notebooks (and STORE) in JupyterLab

It reads stores through the library's public API, so what it prints is what a program
reading the store would see. Read commands never create a store: they open it with
``open_store(..., create=False)``, so a missing file, or another program's database, is an
error and is left as it was.
Every failure is one line on stderr (``sessionkit: error: ...``) and a non-zero exit
status; ``--json`` on ``info``, ``ls``, ``show`` and ``search`` prints machine-readable output.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import itertools
import json
import os
import shlex
import sys
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

import sessionkit as sk
from sessionkit.messages import estimate_tokens
from sessionkit.parts import one_line, overlay_info, part_kinds, text_of

__all__ = ["main", "build_parser", "CommandError"]

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


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line becomes one line on stderr instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


# ---------------------------------------------------------------------------
# Small formatting helpers


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


# ---------------------------------------------------------------------------
# Opening stores and sessions


def _local_path(target: str) -> str | None:
    """The file a store target names (``:memory:`` for in-memory), or None for a server URL."""
    lower = target.lower()
    for scheme in ("sqlite:///", "duckdb:///"):
        if lower.startswith(scheme):
            return target[len(scheme):] or ":memory:"
    if "://" in target:
        return None
    return target


@contextlib.contextmanager
def _existing_store(target: str) -> Iterator[sk.Store]:
    """Open a store that must already exist: read commands never create or change a file."""
    try:
        store = sk.open_store(target, create=False)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        yield store
    finally:
        store.close()


def _existing_session(store: sk.Store, session_id: str, target: str) -> sk.Session:
    """The session, or a CommandError naming the sessions that do exist."""
    session = store.session(session_id)
    if len(session) == 0:
        known = [info.id for info in store.list_sessions()]
        if known:
            listed = ", ".join(_sid(k) for k in known[:6]) + (", …" if len(known) > 6 else "")
            hint = f" (it has: {listed})"
        else:
            hint = " (it holds no sessions)"
        raise CommandError(f"no session {session_id!r} in {target}{hint}")
    return session


def _optional_module(module: str, command: str):
    """Import a part of sessionkit that may be absent from this installation."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module or module.startswith(exc.name + ".")):
            raise CommandError(
                f"'{PROG} {command}' needs the {module} module, which this installation of sessionkit does not have"
            ) from exc
        raise CommandError(f"'{PROG} {command}' cannot load {module}: {exc}") from exc
    except ImportError as exc:  # a missing extra (sessionkit.MissingDependency names it)
        raise CommandError(f"'{PROG} {command}' cannot load {module}: {exc}") from exc


def _function(module, name: str, command: str):
    fn = getattr(module, name, None)
    if not callable(fn):
        raise CommandError(f"'{PROG} {command}' needs {module.__name__}.{name}, which this installation does not have")
    return fn


# ---------------------------------------------------------------------------
# info and ls


_STAT_ORDER = ("sessions", "messages", "compactions", "blobs", "indexed_messages", "runs", "events")


def _file_sizes(store: sk.Store) -> dict:
    """The database file's size on disk and its write-ahead log's, for a store in a local file.

    The write-ahead log (SQLite's ``-wal``, DuckDB's ``.wal``) holds recent writes until a
    checkpoint folds them into the file; it is reported beside the size, not in it.
    """
    path = store.path
    if not path or path == ":memory:" or not os.path.isfile(path):
        return {}
    wal = path + ("-wal" if store.engine == "sqlite" else ".wal")
    return {"file_bytes": os.path.getsize(path), "wal_bytes": os.path.getsize(wal) if os.path.isfile(wal) else 0}


def _info_report(store: sk.Store, target: str) -> dict:
    stats = store.stats()
    return {"store": store.path or target, "engine": store.engine,
            "schema_version": stats.get("schema_version"), **stats, **_file_sizes(store)}


def _render_info(store: sk.Store, target: str, out: TextIO) -> None:
    report = _info_report(store, target)
    rows = [("store", str(report["store"])), ("engine", str(report["engine"])),
            ("schema", "-" if report["schema_version"] is None else str(report["schema_version"])),
            ("size", _size(report.get("file_bytes", report.get("bytes", 0))))]
    if report.get("wal_bytes"):
        rows.append(("wal", f"{_size(report['wal_bytes'])} write-ahead log (recent writes, folded into the file "
                            "at the next checkpoint)"))
    for key in _STAT_ORDER:
        if key not in report:
            continue
        value = f"{report[key]:,}"
        if key == "blobs":
            value += f" ({_size(report.get('blob_bytes', 0))})"
        if key == "indexed_messages":
            key = "indexed"
            value += " messages in the search index" if report["indexed_messages"] else \
                " (the search index is built by the first search)"
        rows.append((key, value))
    shown = set(_STAT_ORDER) | {"store", "bytes", "blob_bytes", "engine", "schema_version", "file_bytes", "wal_bytes"}
    rows += [(k, str(v)) for k, v in sorted(report.items()) if k not in shown]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}", file=out)


def cmd_info(args, out: TextIO) -> int:
    """Engine, schema version and the store's counts and sizes."""
    with _existing_store(args.store) as store:
        if args.json:
            print(_json(_info_report(store, args.store)), file=out)
        else:
            _render_info(store, args.store, out)
    return 0


def _ls_rows(store: sk.Store) -> list[list[str]]:
    return [[_sid(i.id), f"{i.message_count:,}", _when(i.created_at), _when(i.updated_at)]
            for i in store.list_sessions()]


def _print_table(header: list[str], rows: list[list[str]], out: TextIO, *, right: tuple[int, ...] = ()) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip(), file=out)


def _render_ls(store: sk.Store, target: str, out: TextIO) -> None:
    rows = _ls_rows(store)
    if not rows:
        print(f"no sessions in {target}", file=out)
        return
    _print_table(["SESSION", "MESSAGES", "CREATED (UTC)", "UPDATED (UTC)"], rows, out, right=(1,))


def cmd_ls(args, out: TextIO) -> int:
    """Sessions holding messages, newest activity first."""
    with _existing_store(args.store) as store:
        if args.json:
            print(_json([{"id": i.id, "message_count": i.message_count, "created_at": i.created_at,
                          "updated_at": i.updated_at} for i in store.list_sessions()]), file=out)
        else:
            _render_ls(store, args.store, out)
    return 0


# ---------------------------------------------------------------------------
# show: a path as a chat


def _render_part(part: Any, out: TextIO) -> None:
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
            print(f"    input:  {_clip(_json(part['input']))}", file=out)
        if "output" in part:
            print(f"    output: {_clip(_json(part['output']))}", file=out)
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


def _render_message(message: dict, out: TextIO, *, note: str = "") -> None:
    bits = [str(message.get("role", "?")), str(message.get("id", "?")), _when(message.get("createdAt")),
            f"{estimate_tokens(message):,} tokens"]
    if note:
        bits.append(note)
    print("── " + " · ".join(bits), file=out)
    for part in message.get("parts") or ():
        _render_part(part, out)
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


def _render_path(session: sk.Session, out: TextIO, *, leaf_id: str | None, full: bool,
                 last: int | None = None) -> None:
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

    print(f"session {_sid(session.session_id)} · path to {leaf}{' (latest leaf)' if leaf == latest['id'] else ''}"
          f" · {'full history' if full else 'as the model sees it'}", file=out)
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
            print(f"… earlier entries not shown: the path holds {_count(session.path_length(leaf), 'message')}; "
                  f"these are the newest {len(tail):,} (--last {last})", file=out)
            print(file=out)
    for message in entries:
        info = overlay_info(message)
        if info is not None:  # a summary standing in for a range (model view only)
            applied.append(info)
            comp = comps.get(info.get("id"))
            after = comp.tokens_after if comp else estimate_tokens(message)
            print(f"══ compaction {str(info.get('id'))[:8]} · summary of {info.get('messages')} messages "
                  f"({_span(info)}) · {info.get('tokens_before', 0):,} → {after:,} tokens ══", file=out)
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
            print(f"══ compacted range begins · compaction {str(a['id'])[:8]} shows the model one summary "
                  f"instead of the next {a.get('messages')} messages ({_span(a)}) ══", file=out)
            print(file=out)
        note = ""
        if parent is not None:
            siblings = [s["id"] for s in session.branches(parent)]
            if len(siblings) > 1:
                others = [s for s in siblings if s != mid]
                listed = ", ".join(others[:5]) + (", …" if len(others) > 5 else "")
                note = f"branch {siblings.index(mid) + 1} of {len(siblings)} (also: {listed})"
        _render_message(message, out, note=note)
        if mid in ends:
            print(f"══ compacted range ends · compaction {str(ends[mid]['id'])[:8]} ══", file=out)
            print(file=out)
        raw_count += 1
        raw_tokens += estimate_tokens(message)
        parent = mid
    if last is not None:
        shown = f"{len(tail):,} {'entry' if len(tail) == 1 else 'entries'}"
        print(f"{shown} shown of a path of "
              f"{_count(session.path_length(leaf), 'message')}; the model sees ~{session.context_tokens(leaf):,} "
              "tokens of it.", file=out)
    elif applied:
        seen_count = raw_count - sum(int(a.get("messages") or 0) - 1 for a in applied)
        print(f"{_count(raw_count, 'message')} (~{raw_tokens:,} tokens) on this path; the model sees "
              f"{seen_count:,} (~{session.context_tokens(leaf):,} tokens): "
              f"{_count(len(applied), 'compaction')} applied." + ("" if full else " Add --full to see every message."),
              file=out)
    else:
        print(f"{_count(raw_count, 'message')} (~{raw_tokens:,} tokens) on this path.", file=out)


def _write_json_array(items, out: TextIO) -> None:
    """Stream a JSON array, one item at a time (paths can be long)."""
    out.write("[")
    count = 0
    for item in items:
        out.write(("," if count else "") + "\n  " + _json(item))
        count += 1
    out.write("\n]\n" if count else "]\n")


# ---------------------------------------------------------------------------
# show --tree: the whole tree


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
        print(f"session {_sid(self.session.session_id)}: {_count(n, 'message')}, {_count(bp, 'branch point')}, "
              f"{_count(nc, 'compaction')}", file=out)
        print(f"* marks the path to {self.leaf}{' (latest leaf)' if self.is_latest else ''}; "
              "<n branches> marks a branch point", file=out)
        if self.compactions:
            print("compactions, oldest first ([cN] tags the messages each one covers):", file=out)
            for comp in self.compactions:
                label = self.labels[comp.id]
                size = self.sizes[comp.id]
                if comp.id in self.applied:
                    state = "applied on the * path"
                else:
                    newer = [self.labels[c.id] for c in self.compactions
                             if c.from_id == comp.from_id and c.id in self.applied]
                    state = f"superseded by {newer[0]} (same start, newer)" if newer else "not on the * path"
                print(f"  {label}  {comp.id[:8]}  {comp.from_id} … {comp.to_id}  "
                      f"{'?' if size is None else size} messages  "
                      f"{comp.tokens_before:,} → {comp.tokens_after:,} tokens  {state}", file=out)
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
            mark = "* " if mid in self.on_path else "  "
            role = str(msg.get("role", "?"))
            if len(prefix) > _MAX_INDENT:  # deeply nested branches: keep the nearest levels visible
                prefix = "…" + prefix[-(_MAX_INDENT - 1):]
            print(f"{mark}{prefix}{mid}  {role}: {_preview(msg)}{tags}", file=out)
            if len(kids) == 1:
                stack.append((kids[0], cont, cont))
            else:
                for i in range(len(kids) - 1, -1, -1):
                    last = i == len(kids) - 1
                    stack.append((kids[i], cont + ("└── " if last else "├── "), cont + ("    " if last else "│   ")))
        if self.unreachable:
            print(f"({_count(self.unreachable, 'more message')} sit under other roots of this session, "
                  f"which cannot be reached from {self.roots[0]!r}; show --leaf ID shows their paths)", file=out)

    def as_json(self) -> dict:
        return {
            "session": self.session.session_id,
            "leaf": self.leaf,
            "path": self.path,
            "compactions": [
                {"id": c.id, "from_id": c.from_id, "to_id": c.to_id, "summary": c.summary,
                 "created_at": c.created_at, "tokens_before": c.tokens_before, "tokens_after": c.tokens_after,
                 "messages": self.sizes[c.id], "applied": c.id in self.applied}
                for c in self.compactions
            ],
            "nodes": [
                {"id": mid, "parent_id": self.parent[mid], "depth": self.depth[mid],
                 "children": self.children[mid], "on_path": mid in self.on_path,
                 "compactions": [c.id for c in self.compactions if self.labels[c.id] in self.covered.get(mid, ())],
                 "message": self.messages[mid]}
                for mid in self.order
            ],
            "unreachable": self.unreachable,
        }


def cmd_show(args, out: TextIO) -> int:
    """A path as a chat (compaction applied unless --full), or the whole tree with --tree."""
    with _existing_store(args.store) as store:
        session = _existing_session(store, args.session, args.store)
        if args.leaf is not None:
            session.path_length(args.leaf)  # sessionkit.MessageNotFound for an unknown id
        if args.tree and args.last is not None:
            raise CommandError("--last applies to the path view, not to --tree")
        if args.tree:
            tree = _Tree(session, args.leaf)
            if args.json:
                print(_json(tree.as_json()), file=out)
            else:
                tree.render(out)
        elif args.json:
            if args.last is None:
                _write_json_array(session.history(leaf_id=args.leaf, compacted=not args.full), out)
            else:
                _write_json_array(_newest(session, args.leaf, not args.full, args.last)[1], out)
        else:
            _render_path(session, out, leaf_id=args.leaf, full=args.full, last=args.last)
    return 0


# ---------------------------------------------------------------------------
# search


def _render_hits(hits: list, query: str, out: TextIO) -> None:
    if not hits:
        print(f"no matches for {query!r}", file=out)
        return
    print(f"{len(hits)} hit{'' if len(hits) == 1 else 's'} for {query!r}, best first:", file=out)
    for hit in hits:
        print(file=out)
        print(f"{_sid(hit.session_id)} / {hit.id} · {hit.role} · score {hit.score:.3g}", file=out)
        print(f"    {' '.join(hit.snippet.split())}", file=out)


def cmd_search(args, out: TextIO) -> int:
    """Full-text search; any query string is valid (an empty one finds nothing)."""
    with _existing_store(args.store) as store:
        if args.session is not None:
            _existing_session(store, args.session, args.store)
        hits = store.search(args.query, session_id=args.session, limit=args.limit)
    if args.json:
        print(_json([{"id": h.id, "session_id": h.session_id, "role": h.role, "content": h.content,
                      "snippet": h.snippet, "score": h.score} for h in hits]), file=out)
    else:
        _render_hits(hits, args.query, out)
    return 0


# ---------------------------------------------------------------------------
# demo


def cmd_demo(args, out: TextIO) -> int:
    """Build the demo store (in --store or a new temporary folder) and print a guided tour."""
    from ._demo import build_demo_store

    if args.store is not None:
        path = args.store
        local = _local_path(path)
        if local is not None and local != ":memory:" and os.path.exists(local):
            raise CommandError(f"{path!r} already exists; the demo writes a new store: choose another path")
        if local == ":memory:":
            raise CommandError("the demo needs a store file to explore afterwards, not an in-memory store")
    else:
        path = os.path.join(tempfile.mkdtemp(prefix="sessionkit-demo-"), "demo.db")
    store = build_demo_store(path)
    with store:
        _tour(store, path, out)
    return 0


class _Indented:
    """A text stream that prefixes every non-empty line written to ``out`` (for the tour)."""

    def __init__(self, out: TextIO, prefix: str):
        self._out = out
        self._prefix = prefix
        self._at_start = True

    def write(self, text: str) -> int:
        for line in text.splitlines(keepends=True):
            if self._at_start and line not in ("\n", "\r\n"):
                self._out.write(self._prefix)
            self._out.write(line)
            self._at_start = line.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self._out.flush()


def _tour(store: sk.Store, path: str, out: TextIO) -> None:
    """Print the guided tour of a demo store, each step with the command that prints it."""
    from ._demo import DEPLOY_SESSION, MIGRATION_SESSION, WEATHER_SESSION

    q = shlex.quote(path)
    body = cast(TextIO, _Indented(out, "   "))  # the renderers only print() to it
    stats = store.stats()

    def w(text: str = "") -> None:
        print(text, file=out)

    def step(n: int, title: str, command: str) -> None:
        w()
        w(f"{n}. {title}")
        w(f"   $ {PROG} {command}")
        w()

    w(f"sessionkit demo: {_count(stats['sessions'], 'session')}, {_count(stats['messages'], 'message')}, "
      f"{_count(stats['compactions'], 'compaction')}, {_count(stats['blobs'], 'blob')}; written to")
    w(f"   {path}")

    step(1, "The sessions, newest activity first", f"ls {q}")
    _render_ls(store, path, body)

    step(2, "A regenerated reply is a sibling branch; both branches go on", f"show {q} {DEPLOY_SESSION} --tree")
    _Tree(store.session(DEPLOY_SESSION), None).render(body)

    migration = store.session(MIGRATION_SESSION)
    step(3, "A long chat, compacted as it grew: what the model sees", f"show {q} {MIGRATION_SESSION}")
    _render_path(migration, body, leaf_id=None, full=False)

    step(4, "The full history is still stored: every message, the compacted ranges tagged",
         f"show {q} {MIGRATION_SESSION} --tree")
    _Tree(migration, None).render(body)

    step(5, f"A tool call with its result, and a file stored out of the row as a blob "
            f"({_size(stats['blob_bytes'])})", f"show {q} {WEATHER_SESSION}")
    _render_path(store.session(WEATHER_SESSION), body, leaf_id=None, full=False)

    query = "deploying"
    step(6, "Search: stemmed ('deploying' finds deploy and deployment), every branch and compacted range",
         f"search {q} {query} --limit 5")
    _render_hits(store.search(query, limit=5), query, body)

    step(7, "What the store holds", f"info {q}")
    _render_info(store, path, body)

    w()
    w("Explore further:")
    for command, why in (
        (f"show {q} {DEPLOY_SESSION} --leaf a2", "the older branch, as a chat"),
        (f"show {q} {MIGRATION_SESSION} --full", "every message, the compacted ranges marked"),
        (f"show {q} {WEATHER_SESSION} --json", "the messages as stored (UIMessage JSON)"),
        (f"search {q} '\"logical replication\"'", "a phrase"),
        (f"search {q} cutover --session {MIGRATION_SESSION} --limit 3", "one session only"),
        ("--help", "every command"),
    ):
        w(f"   {PROG} {command}")
        w(f"       {why}")


# ---------------------------------------------------------------------------
# import, export, serve: delegate to sessionkit.io and sessionkit.server


#: --format -> importer; sessionkit.io.FORMATS lists the same (and detects them when --format is left out)
_IMPORTERS = {"openai": "import_openai", "oasst": "import_oasst", "hh": "import_hh", "jsonl": "import_jsonl",
              "openai-agents": "import_openai_agents", "langgraph": "import_langgraph", "adk": "import_adk",
              "claude-code": "import_claude_code", "swe-agent": "import_swe_agent", "inspect": "import_inspect"}


#: formats whose sessions take no prefix, and why
_NO_PREFIX = {"openai": "the file goes into one session, named with --session",
              "jsonl": "a sessionkit export keeps the session ids it was written with"}


def _session_from_file(path: str) -> str:
    """Default session id for an OpenAI chat file: its name without .gz/.jsonl/.json."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


@contextlib.contextmanager
def _merge_warnings(category: type[Warning]) -> Iterator[None]:
    """An import's merge warnings as ``sessionkit: warning: ...`` lines on stderr (others as Python shows them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, category):
                    print(f"{PROG}: warning: {' '.join(str(w.message).split())}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def cmd_import(args, out: TextIO) -> int:
    """Import a transcript file (creates the store when it does not exist)."""
    folders = (None, "claude-code", "swe-agent")  # the formats whose FILE may be a folder
    io = _optional_module("sessionkit.io", "import")
    # Before any store is opened (or created): a missing path, or a folder where a file goes,
    # is a usage error saying which (in the words of the importers' sessionkit.UsageError).
    if not os.path.exists(args.file):
        raise CommandError(f"{args.file!r} does not exist")
    if os.path.isdir(args.file) and args.format not in folders:
        raise CommandError(f"{args.file!r} is a folder, not a file (--format {args.format} reads a file)")
    if not os.path.isdir(args.file) and not os.path.isfile(args.file):
        raise CommandError(f"{args.file!r} is not a regular file")
    pattern = {"claude-code": ".jsonl", "swe-agent": ".traj"}.get(args.format or "")
    if pattern and os.path.isdir(args.file) and not any(p.is_file() for p in Path(args.file).rglob("*" + pattern)):
        raise CommandError(f"{args.file!r} is a folder without {pattern} files")
    if args.format is None:
        try:
            args.format = _function(io, "detect_format", "import")(args.file)
        except ValueError as exc:  # MalformedInput: no importer recognises the file
            raise CommandError(f"{exc}; name it with --format (one of {', '.join(sorted(_IMPORTERS))})") from None
    if args.session is not None and args.format != "openai":
        raise CommandError(f"--session applies to --format openai only; {args.format} files name their own sessions")
    options = {}
    if args.session_prefix is not None:
        if args.format in _NO_PREFIX:
            raise CommandError(f"--session-prefix does not apply to --format {args.format}: {_NO_PREFIX[args.format]}")
        options["session_prefix"] = args.session_prefix
    fn = _function(io, _IMPORTERS[args.format], "import")
    local = _local_path(args.store)
    existing = local not in (None, ":memory:") and os.path.isfile(local) and os.path.getsize(local) > 0
    # An existing file must already be a sessionkit store (as for info and ls): importing into
    # another program's database would add sessionkit's tables to it.
    opened = _existing_store(args.store) if existing else sk.open_store(args.store)
    with opened as store, _merge_warnings(io.SessionMergeWarning):
        before = store.stats()
        if args.format == "openai":
            session_id = args.session if args.session is not None else _session_from_file(args.file)
            fn(store.session(session_id), args.file)
            where = f"session {_sid(session_id)} of {args.store}"
        else:
            fn(store, args.file, **options)
            where = args.store
        after = store.stats()
    added_m = after["messages"] - before["messages"]
    added_s = after["sessions"] - before["sessions"]
    print(f"imported {args.file} ({args.format}) into {where}: {_count(added_m, 'new message')}, "
          f"{_count(added_s, 'new session')} (the store holds {_count(after['messages'], 'message')} in "
          f"{_count(after['sessions'], 'session')})", file=out)
    return 0


def cmd_export(args, out: TextIO) -> int:
    """Export a store or one session, to JSONL or to a folder of Parquet files."""
    io = _optional_module("sessionkit.io", "export")
    with _existing_store(args.store) as store:
        session = _existing_session(store, args.session, args.store) if args.session is not None else None
        if args.format == "parquet":
            fn = _function(io, "export_parquet", "export")
            if session is None:
                fn(store, args.path)
            else:
                fn(store, args.path, session_ids=[session.session_id])
        else:
            _function(io, "export_jsonl", "export")(session if session is not None else store, args.path)
        if session is not None:
            what = f"session {_sid(session.session_id)} ({_count(len(session), 'message')})"
        else:
            stats = store.stats()
            what = f"{_count(stats['sessions'], 'session')} ({_count(stats['messages'], 'message')})"
    print(f"exported {what} to {args.path} ({args.format})", file=out)
    return 0


def cmd_lab(args, out: TextIO) -> int:
    """Copy the tour notebooks to a folder and open them in JupyterLab (with STORE in a notebook of its own)."""
    lab = importlib.import_module("sessionkit._lab")
    if args.store is not None:
        with _existing_store(args.store) as store:  # a missing file or another program's database fails here
            target = store.path or args.store
    dest = Path(args.dir).expanduser().resolve()
    if dest.exists() and not dest.is_dir():
        raise CommandError(f"{dest} is a file, not a folder for the notebooks")
    try:
        copied, kept = lab.copy_tour(dest)
    except lab.LabError as exc:
        raise CommandError(str(exc)) from exc
    print(f"tour notebooks in {dest}: {_count(len(copied), 'file')} copied"
          + (f", {_count(len(kept), 'file')} already there kept as they are" if kept else ""), file=out)
    first = None
    if args.store is not None:
        first = lab.store_notebook(dest, str(target)).name
        print(f"{first} opens {target}", file=out)
    out.flush()
    options = argparse.Namespace(notebooks=str(dest), port=args.port, token=None, no_browser=args.no_browser,
                                 prepare_only=False, settings_dir=None, timeout=args.timeout, first=first)
    return int(lab.run(options))


def _agent_spec(spec: str) -> tuple[str, str]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(f"--agent must look like module:attribute (for example myapp.agents:support), got {spec!r}")
    return module_name, attr


def _load_agent(spec: str):
    """``module:attr`` -> the object, importing from the current folder first (as uvicorn does)."""
    _agent_spec(spec)
    from sessionkit.agent import load_agent

    try:
        agent = load_agent(spec)
    except ValueError as exc:
        raise CommandError(f"--agent: {exc}") from exc
    if isinstance(agent, sk.Agent):
        return agent
    module_name, attr = _agent_spec(spec)
    if isinstance(agent, type) or callable(agent):
        kind = "a class" if isinstance(agent, type) else "a function"
        raise CommandError(
            f"--agent {spec} names {kind}, not an agent: create the agent in {module_name} "
            f"(for example support = {attr}(...)) and pass that name (--agent {module_name}:support)"
        )
    raise CommandError(f"--agent {spec} is a {type(agent).__name__}, not a sessionkit Agent (sk.Agent(...))")


def cmd_serve(args, out: TextIO) -> int:
    """Serve an agent over HTTP; the bearer token comes from SESSIONKIT_TOKEN, never from argv."""
    _agent_spec(args.agent)  # a malformed spec fails before anything is loaded
    token = os.environ.get("SESSIONKIT_TOKEN", "")
    if not token:
        raise CommandError("set SESSIONKIT_TOKEN to the bearer token clients must send (16 characters or more)")
    if len(token) < 16:
        raise CommandError("SESSIONKIT_TOKEN is shorter than 16 characters")
    server = _optional_module("sessionkit.server", "serve")
    serve = _function(server, "serve", "serve")
    try:
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CommandError("uvicorn is not installed; install it with: pip install 'sessionkit[server]'") from exc
    if args.workers > 1 and not str(args.store).lower().startswith(
            ("postgresql://", "postgres://", "postgresql+psycopg://")):
        raise CommandError("--workers above 1 needs a PostgreSQL store (postgresql://...): "
                           "a SQLite or DuckDB store is served by one process")
    _load_agent(args.agent)  # a name that cannot be loaded fails here, with its reason
    serve(args.agent, args.store, token=token, host=args.host, port=args.port, workers=args.workers,
          timeout_keep_alive=args.timeout_keep_alive, timeout_request=args.timeout_request,
          timeout_graceful_shutdown=args.timeout_graceful_shutdown,
          limit_concurrency=args.limit_concurrency or None)
    return 0


# ---------------------------------------------------------------------------
# The parser


def _number(convert: Any, what: str, fits: Any, bounds: str) -> Any:
    """An argparse ``type``: ``convert`` the text, refuse what is not ``what`` or not within ``bounds``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{text!r} {bounds}")
        return value

    return parse


_positive_int = _number(int, "a whole number", lambda v: v >= 1, "must be 1 or more")
_seconds = _number(float, "a number of seconds", lambda v: 0 < v < 86_400 * 366,
                   "must be a positive number of seconds")
_count_or_zero = _number(int, "a whole number", lambda v: v >= 0, "must be 0 or more")
_port = _number(int, "a port number", lambda v: 0 <= v <= 65535, "is not a port number (0-65535)")


_STORE_HELP = "store file or URL: chats.db, data.duckdb, sqlite:///path, duckdb:///path, postgresql://..."


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``sessionkit`` command (one subparser per command)."""
    parser = _Parser(
        prog=PROG,
        description="Look inside sessionkit conversation stores: sessions, trees, compactions, search.",
        epilog=f"Try '{PROG} demo' for a tour; '{PROG} COMMAND --help' describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {sk.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("info", help="engine, schema version, counts and sizes of a store",
                       description="Show the engine, schema version, counts and sizes of a store.")
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("ls", help="list sessions, newest activity first",
                       description="List the sessions of a store (id, messages, first and last message time, "
                                   "UTC), newest activity first.")
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser(
        "show", help="a conversation path as a chat, or the whole tree",
        description="Show the path from the root to a leaf (default: the latest leaf) as a chat: roles, text, "
                    "tool calls with input and output, files, and compaction summaries where the model sees them. "
                    "--full shows every stored message with the compacted ranges marked; --tree shows the whole "
                    "tree, one line per message.")
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("session", metavar="SESSION", help='session id ("" is the default session)')
    p.add_argument("--leaf", metavar="ID", help="show the path to this message instead of the latest leaf")
    p.add_argument("--last", metavar="N", type=_positive_int,
                   help="only the newest N entries of the path (reads no older message)")
    p.add_argument("--tree", action="store_true",
                   help="the whole tree: branch points, the path (marked *), compaction ranges")
    p.add_argument("--full", action="store_true",
                   help="every message, compaction not applied (--tree always shows every message)")
    p.add_argument("--json", action="store_true",
                   help="print the messages as JSON (with --tree: nodes with parent, children and message)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "search", help="full-text search over messages",
        description='Full-text search over text parts, best first. Words match case-insensitively with English '
                    'stemming, all words must occur, "double quotes" ask for a phrase. Any string is a valid '
                    'query.')
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("query", metavar="QUERY", help="words and \"phrases\"")
    p.add_argument("--session", metavar="S", help="search this session only")
    p.add_argument("--limit", metavar="N", type=_positive_int, default=10, help="at most N hits (default 10)")
    p.add_argument("--json", action="store_true", help="print a JSON array of hits")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser(
        "demo", help="build a demo store and print a guided tour",
        description="Build a demo store (branches, a compacted long chat, a tool call, a file) offline and print "
                    "a short tour of it with the commands to explore further.")
    p.add_argument("--store", metavar="PATH",
                   help="where to write the demo store (a new file; default: a new temporary folder)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "lab", help="open the tour notebooks (and a store) in JupyterLab",
        description="Copy the tour notebooks and their data to a folder (default ./sessionkit-tour; notebooks "
                    "already there are kept), build the demo store they use, and open them in JupyterLab on "
                    "127.0.0.1. With STORE, a notebook your-store.ipynb opens that store first. Needs the "
                    "notebook extra: pip install 'sessionkit[notebook]'. Ctrl-C stops JupyterLab.")
    p.add_argument("store", metavar="STORE", nargs="?", help="a store to open next to the tour (" + _STORE_HELP + ")")
    p.add_argument("--dir", default="sessionkit-tour", metavar="FOLDER",
                   help="where the notebooks go (default: ./sessionkit-tour)")
    p.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: 8888 or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for JupyterLab to answer")
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser(
        "import", help="import transcripts (OpenAI chat, OpenAssistant, HH, sessionkit JSONL, agent frameworks)",
        description="Import a transcript file into a store (created if missing). Imports are idempotent: "
                    "importing the same file again adds nothing.")
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("file", metavar="FILE", help="the file to import (or a folder of coding-agent session logs)")
    p.add_argument("--format", choices=sorted(_IMPORTERS),
                   help="openai: chat messages (JSON array or JSONL); oasst: OpenAssistant trees; "
                        "hh: Anthropic HH pairs; jsonl: a sessionkit export; openai-agents: an OpenAI Agents SDK "
                        "session database; langgraph: a LangGraph SqliteSaver database; adk: a Google ADK session "
                        "database; claude-code: a coding-agent session log (a .jsonl file or a project folder); "
                        "swe-agent: SWE-agent trajectories (a .traj file or a folder); inspect: an inspect-ai "
                        "eval log (.eval or .json). "
                        "Left out: told from the file")
    p.add_argument("--session", metavar="ID",
                   help="session to import into (--format openai only; default: the file name without extension)")
    p.add_argument("--session-prefix", metavar="PREFIX",
                   help="put PREFIX before every session id the file names, to keep the sessions of several "
                        "sources apart in one store (every format but openai and jsonl; default: the "
                        "importer's own, e.g. 'oasst-' and 'hh-', none for the agent frameworks)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("export", help="export a store or a session to JSONL or Parquet",
                       description="Export a store (or one session) to sessionkit JSONL, or a store to a folder "
                                   "of Parquet files.")
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("path", metavar="PATH", help="the JSONL file, or the folder for Parquet")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="default: jsonl")
    p.add_argument("--session", metavar="ID", help="export this session only")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "serve", help="serve an agent over HTTP",
        description="Serve an agent over HTTP (sessionkit.server). Clients authenticate with "
                    "'Authorization: Bearer TOKEN' where TOKEN is read from the SESSIONKIT_TOKEN environment "
                    "variable (16 characters or more), never from the command line.")
    p.add_argument("--store", required=True, metavar="PATH", help=_STORE_HELP)
    p.add_argument("--agent", required=True, metavar="MODULE:ATTR",
                   help="the sessionkit.Agent to serve, e.g. myapp.agents:support (imported from the current folder)")
    p.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    p.add_argument("--port", type=_port, default=8000, help="default: 8000")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="worker processes (default: 1); above 1 needs a PostgreSQL store, which they share")
    p.add_argument("--timeout-keep-alive", type=_seconds, default=5.0, metavar="S",
                   help="close an idle keep-alive connection after S seconds (default: 5)")
    p.add_argument("--timeout-request", type=_seconds, default=30.0, metavar="S",
                   help="a client must send a whole request, headers and body, within S seconds "
                        "(default: 30); slower ones are disconnected")
    p.add_argument("--timeout-graceful-shutdown", type=_seconds, default=10.0, metavar="S",
                   help="on SIGTERM/Ctrl-C, wait at most S seconds for open requests (default: 10)")
    p.add_argument("--limit-concurrency", type=_count_or_zero, default=1000, metavar="N",
                   help="answer 503 beyond N open connections (default: 1000; 0: no limit)")
    p.set_defaults(func=cmd_serve)
    return parser


# ---------------------------------------------------------------------------


def _tolerant_stdout() -> None:
    """Never fail on a character the terminal's encoding lacks (message text can be anything)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):
                reconfigure(errors="backslashreplace")


def _fail(message: str, status: int = EXIT_FAILED) -> int:
    line = " ".join(str(message).split()) or "failed"
    print(f"{PROG}: error: {line}", file=sys.stderr)
    return status


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc)
    return text if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the ``sessionkit`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    _tolerant_stdout()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else 0
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args, sys.stdout) or 0)
    except CommandError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep the interpreter's final flush quiet too.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except (sk.SessionKitError, ValueError, LookupError, OSError) as exc:
        return _fail(_describe(exc))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or a driver error nobody converted: still one line, unless debugging
        if os.environ.get("SESSIONKIT_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {_describe(exc)} (set SESSIONKIT_DEBUG=1 for the traceback)")
