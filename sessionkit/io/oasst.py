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
becomes the creation time. Replies are written depth first in file order, so
the latest leaf is the last reply of the last branch.
"""

from __future__ import annotations

from typing import Any

from ..errors import MessageTooLarge
from ._common import MalformedInput, Progress, WriteGroups, as_path, count_lines, iter_jsonl

__all__ = ["import_oasst"]

_ROLES = {"prompter": "user", "assistant": "assistant"}
_STRUCTURAL = {"message_id", "parent_id", "text", "role", "replies"}


def _convert(node: dict, where: str, source: str, extra: dict | None = None) -> tuple[dict, Any]:
    mid = node.get("message_id")
    if not isinstance(mid, str) or not mid:
        raise MalformedInput(source, where, "message has no 'message_id'")
    role = node.get("role")
    if not isinstance(role, str) or not role:
        raise MalformedInput(source, where, f"message {mid!r} has no 'role'")
    text = node.get("text")
    if not isinstance(text, str):
        raise MalformedInput(source, where, f"message {mid!r} has no 'text' string")
    meta = {k: v for k, v in node.items() if k not in _STRUCTURAL}
    if extra:
        meta.update(extra)
    message = {
        "id": mid,
        "role": _ROLES.get(role, role),
        "parts": [{"type": "text", "text": text}],
        "metadata": {"oasst": meta},
    }
    return message, node.get("created_date")


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
    stack: list[tuple[dict, str | None, str]] = [(prompt, None, "prompt")]
    while stack:  # depth first, replies in file order
        node, parent, path = stack.pop()
        if not isinstance(node, dict):
            raise MalformedInput(source, where, f"{path} is not an object")
        message, created = _convert(node, f"{where} ({path})", source, extra if parent is None else None)
        if message["id"] in seen:
            raise MalformedInput(source, where, f"message id {message['id']!r} appears twice in tree {tree_id!r}")
        seen.add(message["id"])
        items.append((message, parent, created))
        replies = node.get("replies") or []
        if not isinstance(replies, list):
            raise MalformedInput(source, where, f"{path}.replies is not a list")
        for k in range(len(replies) - 1, -1, -1):
            stack.append((replies[k], message["id"], f"{path}.replies[{k}]"))
    return tree_id, items


def _flat_items(tree_id: str, rows: list[tuple[str, dict]], source: str) -> list:
    """Order a tree's flat messages parents first (file order among siblings)."""
    converted = {}
    children: dict[str | None, list[str]] = {}
    for where, row in rows:
        message, created = _convert(row, where, source)
        mid = message["id"]
        if mid in converted:
            raise MalformedInput(source, where, f"message id {mid!r} appears twice in tree {tree_id!r}")
        parent = row.get("parent_id")
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


def import_oasst(store, path: Any, *, session_prefix: str = "oasst-", progress: Any = None) -> list:
    """Import OpenAssistant trees: one session per tree (``session_prefix + message_tree_id``).

    Returns the sessions in file order. Idempotent (ids are the OASST message ids);
    each tree is written in one transaction. ``progress``: ``None`` shows a bar only in
    a terminal or notebook, ``True``/``False`` force it, a callable gets ``(done, total)``
    lines. Malformed input raises :class:`MalformedInput` naming the line. Trees are
    written in groups of 200 per transaction; an error keeps the groups before it.
    """
    path = as_path(path)
    source = str(path)
    sessions = []
    flat: dict[str, list[tuple[str, dict]]] = {}
    total = count_lines(path)
    with Progress(progress, total=total, desc=f"importing {path.name}", unit="lines") as bar, \
            WriteGroups(store) as groups:
        for lineno, obj in iter_jsonl(path):
            where = f"line {lineno}"
            if not isinstance(obj, dict):
                raise MalformedInput(source, where, "expected a JSON object (an OASST tree or message)")
            if "prompt" in obj:
                tree_id, items = _tree_items(obj, where, source)
                groups.begin()
                sessions.append(_write(store, session_prefix + tree_id, items, source, where))
                groups.done()
            elif "message_id" in obj:
                tree = obj.get("message_tree_id")
                if not isinstance(tree, str) or not tree:
                    raise MalformedInput(source, where, "message has no 'message_tree_id'")
                flat.setdefault(tree, []).append((where, obj))
            else:
                raise MalformedInput(source, where, "neither an OASST tree ('prompt') nor a message ('message_id')")
            bar.update()
        for tree_id, rows in flat.items():
            items = _flat_items(tree_id, rows, source)
            groups.begin()
            sessions.append(_write(store, session_prefix + tree_id, items, source, rows[0][0]))
            groups.done()
    unique = list({id(s): s for s in sessions}.values())
    return unique


def _write(store, session_id: str, items: list, source: str, where: str):
    session = store.session(session_id)
    try:
        session.import_many(items)
    except MessageTooLarge:
        raise
    except (ValueError, TypeError, LookupError) as exc:
        raise MalformedInput(source, where, f"cannot import tree into session {session_id!r}: {exc}") from exc
    return session
