"""OpenAssistant (OASST) message trees -> one session per tree, every branch kept.

Two export shapes are read, one JSON object per line (gzip allowed):

* trees: ``{"message_tree_id", "tree_state", "prompt": {message_id, text, role,
  ..., "replies": [<same shape>, ...]}}`` (the ``*_tree.jsonl`` files);
* flat messages: ``{"message_id", "parent_id", "message_tree_id", "text", "role", ...}``
  (the ``*_messages.jsonl`` files); a tree's messages may come in any order.

Each message keeps its OASST ``message_id`` as its id; ``prompter`` becomes
``user``; ``text`` becomes one text part; every other field of the source
message (``lang``, ``rank``, ``review_result``, ``synthetic``, ``emojis``,
``labels``...) is kept in ``metadata["oasst"]``; ``created_date``, when present,
becomes the creation time (it must be an ISO 8601 time). Replies are written
depth first in file order, so the latest leaf is the last reply of the last branch.

Trees are read without recursion, so a tree thousands of replies deep imports like
any other. A file of trees is read once, a line at a time. A file of flat messages
is read twice: once to check every line and find where each tree's messages end,
once to write each tree as soon as its last message has been read (one tree in
memory at a time when, as in the OASST exports, a tree's messages come together).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any, cast

from .. import messages as _msg
from ..errors import MalformedInput
from ..store import Session
from ._common import Batches, SessionList, check_file_import, sessions_result, watching_roots
from ._progress import Progress, wants_total
from ._reading import as_path, count_lines, iter_jsonl

__all__ = ["import_oasst"]

_ROLES = {"prompter": "user", "assistant": "assistant"}
_STRUCTURAL = {"message_id", "parent_id", "text", "role", "replies"}


class _Bad(Exception):
    """A message of the wrong shape; the caller adds where it is."""


def _convert(node: dict, extra: dict | None = None) -> tuple[dict, Any]:
    mid = node.get("message_id")
    if not isinstance(mid, str) or not mid:
        raise _Bad("message has no 'message_id'")
    role = node.get("role")
    if not isinstance(role, str) or not role:
        raise _Bad(f"message {mid!r} has no 'role'")
    text = node.get("text")
    if not isinstance(text, str):
        raise _Bad(f"message {mid!r} has no 'text' string")
    created = node.get("created_date")
    if created is not None:
        if not isinstance(created, str):
            raise _Bad(f"message {mid!r}: 'created_date' must be an ISO 8601 time string, got {type(created).__name__}")
        try:
            created = _msg.to_iso(created)
        except ValueError:
            raise _Bad(f"message {mid!r}: 'created_date' is not an ISO 8601 time: {created[:60]!r}") from None
    meta = {k: v for k, v in node.items() if k not in _STRUCTURAL}
    if extra:
        meta.update(extra)
    message = {
        "id": mid,
        "role": _ROLES.get(role, role),
        "parts": [{"type": "text", "text": text}],
        "metadata": {"oasst": meta},
    }
    return message, created


def _convert_at(node: dict, source: str, where: str, extra: dict | None = None) -> tuple[dict, Any]:
    try:
        return _convert(node, extra)
    except _Bad as exc:
        raise MalformedInput(source, where, str(exc)) from None


def _render(link: tuple | None) -> str:
    """The path of a node: ``link`` is ``(parent link, reply index)``, None for the prompt;
    kept as links so a deep tree does not build a long string per node."""
    steps = []
    while link is not None:
        link, k = link
        steps.append(k)
    steps.reverse()
    if len(steps) > 8:
        head = "".join(f".replies[{k}]" for k in steps[:3])
        tail = "".join(f".replies[{k}]" for k in steps[-3:])
        return f"prompt{head}...{tail} ({len(steps)} replies deep)"
    return "prompt" + "".join(f".replies[{k}]" for k in steps)


def _tree_items(tree: dict, where: str, source: str) -> tuple[str, list]:
    tree_id = tree.get("message_tree_id")
    prompt = tree.get("prompt")
    if not isinstance(prompt, dict):
        raise MalformedInput(source, where, "tree has no 'prompt' object")
    if not isinstance(tree_id, str) or not tree_id:
        tree_id = prompt.get("message_id")
        if not isinstance(tree_id, str) or not tree_id:
            raise MalformedInput(source, where, "tree has no 'message_tree_id'")
    extra = {k: v for k, v in tree.items() if k != "prompt"}
    items: list[tuple[dict, str | None, Any]] = []
    seen: set[str] = set()
    stack: list[tuple[Any, str | None, tuple | None]] = [(prompt, None, None)]
    while stack:  # depth first, replies in file order, without recursion
        node, parent, link = stack.pop()
        if not isinstance(node, dict):
            raise MalformedInput(source, where, f"{_render(link)} is not an object")
        try:
            message, created = _convert(node, extra if parent is None else None)
        except _Bad as exc:
            raise MalformedInput(source, f"{where} ({_render(link)})", str(exc)) from None
        if message["id"] in seen:
            raise MalformedInput(source, where, f"message id {message['id']!r} appears twice in tree {tree_id!r}")
        seen.add(message["id"])
        items.append((message, parent, created))
        replies = node.get("replies") or []
        if not isinstance(replies, list):
            raise MalformedInput(source, where, f"{_render(link)}.replies is not a list")
        for k in range(len(replies) - 1, -1, -1):
            stack.append((replies[k], message["id"], (link, k)))
    return tree_id, items


def _flat_items(tree_id: str, rows: list[tuple[str, dict]], source: str) -> list:
    """Order a tree's flat messages parents first (file order among siblings)."""
    converted = {}
    children: dict[str | None, list[str]] = {}
    for where, row in rows:
        message, created = _convert_at(row, source, where)
        mid = message["id"]
        if mid in converted:
            raise MalformedInput(source, where, f"message id {mid!r} appears twice in tree {tree_id!r}")
        parent = row.get("parent_id")
        if parent is not None and not isinstance(parent, str):
            raise MalformedInput(source, where, f"message {mid!r}: 'parent_id' must be a string or null")
        converted[mid] = (message, parent, created, where)
        children.setdefault(parent, []).append(mid)
    for mid, (_, parent, _, where) in converted.items():
        if parent is not None and parent not in converted:
            raise MalformedInput(
                source, where, f"message {mid!r} has parent {parent!r}, which is not in tree {tree_id!r}"
            )
    roots = children.get(None, [])
    if not roots:
        raise MalformedInput(source, rows[0][0], f"tree {tree_id!r} has no root message (parent_id null)")
    items = []
    stack = list(reversed(roots))
    while stack:
        mid = stack.pop()
        message, parent, created, _ = converted[mid]
        items.append((message, parent, created))
        stack.extend(reversed(children.get(mid, [])))
    if len(items) != len(converted):  # only possible with a parent cycle
        raise MalformedInput(source, None, f"tree {tree_id!r} has messages not reachable from its root")
    return items


def import_oasst(store, path: Any, *, session_prefix: str = "oasst-", progress: Any = None) -> Sequence[Session]:
    """Import OpenAssistant trees: one session per tree (``session_prefix + message_tree_id``).

    Returns the sessions in file order (of each tree's first line): a ``list``, past
    10,000 sessions a :class:`~sessionkit.io.SessionList` (read like a list, ids packed). Idempotent (ids
    are the OASST message ids); trees are written in groups of 200 per transaction.
    ``progress``: ``None`` shows a bar only in a terminal or notebook,
    ``True``/``False`` force it, a callable gets ``(done, total)`` lines.
    Malformed input raises :class:`MalformedInput` naming the line; a tree is stored
    whole or not at all, the trees written before the problem stay stored (the error
    says how many), and importing the corrected file again completes the import.
    """
    check_file_import(store, session_prefix, progress)
    path = as_path(path)
    source = str(path)
    first_lines = array("q")  # the line each session's tree starts on, for the order returned
    flat: dict[str, list[int]] = {}  # tree id -> [first line, last line] of its flat messages
    total = count_lines(path) if wants_total(progress) else None

    def keep(session, line: int) -> None:
        if sessions.append_new(session.session_id):
            first_lines.append(line)

    with (
        watching_roots(store, source) as watch,
        SessionList(store) as sessions,
        Progress(progress, total=total, desc=f"importing {path.name}", unit="lines") as bar,
        Batches(store, source=source, unit="trees") as batches,
    ):
        for lineno, obj, nbytes in iter_jsonl(path, deep=True):
            where = f"line {lineno}"
            if not isinstance(obj, dict):
                raise MalformedInput(source, where, "expected a JSON object (an OASST tree or message)")
            if "prompt" in obj:
                tree_id, items = _tree_items(obj, where, source)
                session = store.session(session_prefix + tree_id)
                batches.write_record(where, session, items, "tree", watch=watch, nbytes=nbytes)
                keep(session, lineno)
            elif "message_id" in obj:
                tree = obj.get("message_tree_id")
                if not isinstance(tree, str) or not tree:
                    raise MalformedInput(source, where, "message has no 'message_tree_id'")
                _convert_at(obj, source, where)  # checked now, written in the second pass
                parent = obj.get("parent_id")
                if parent is not None and not isinstance(parent, str):
                    raise MalformedInput(source, where, "'parent_id' must be a string or null")
                span = flat.get(tree)
                if span is None:
                    flat[tree] = [lineno, lineno]
                else:
                    span[1] = lineno
            else:
                raise MalformedInput(source, where, "neither an OASST tree ('prompt') nor a message ('message_id')")
            bar.update()
        if flat:
            rows: dict[str, list[tuple[str, dict]]] = {}  # trees whose last message is still to come
            for lineno, obj, nbytes in iter_jsonl(path, deep=True):
                if not isinstance(obj, dict) or "prompt" in obj:
                    continue
                tree = obj.get("message_tree_id")
                span = flat.get(tree) if isinstance(tree, str) else None
                if span is None:  # only when the file changed between the two passes
                    raise MalformedInput(source, f"line {lineno}", "the file changed while it was being imported")
                tree_id = cast(str, tree)  # a key of flat
                rows.setdefault(tree_id, []).append((f"line {lineno}", obj))
                first, last = span
                if lineno == last:
                    tree_rows = rows.pop(tree_id)
                    items = _flat_items(tree_id, tree_rows, source)
                    session = store.session(session_prefix + tree_id)
                    batches.write_record(
                        f"line {lineno}", session, items, "tree", watch=watch, nbytes=nbytes, at=tree_rows[0][0]
                    )
                    keep(session, first)
    if flat:  # the trees of flat messages were written at their last line: put them at their first
        return sessions_result(sessions.ordered(first_lines))
    return sessions_result(sessions)
