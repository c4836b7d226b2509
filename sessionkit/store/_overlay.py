"""The compaction overlay: which compactions apply to a path, and what a read shows in their place."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .. import parts as _parts
from ._values import Compaction, Node, TreeNode

if TYPE_CHECKING:  # (annotations only: the modules import each other)
    from ._engine import Engine

_T = TypeVar("_T")


def _tree_node(n: Node) -> TreeNode:
    return TreeNode(n.id, n.parent_id, n.depth, n.role, n.tokens, n.bytes, n.created_at, n.seq)


def _unwrap(mid: str, comps: dict[str, Compaction], which: str) -> str:
    if not isinstance(mid, str) or not mid:
        raise ValueError(f"CompactionResult.{which} must be a message id")
    if mid.startswith(_parts.OVERLAY_PREFIX):
        comp = comps.get(mid[len(_parts.OVERLAY_PREFIX) :])
        if comp is not None:
            return comp.from_id if which == "from_id" else comp.to_id
    return mid


def _choose_ranges(comps: list[tuple[int, Compaction]], pos: dict[str, int]) -> list[tuple[int, int, Compaction]]:
    """Compactions applying to a path: whole range on it; among overlapping ones the newest wins.

    ``pos`` maps message ids to their positions on the path (root = 0); the result is
    ``(start, end, compaction)`` in path order. This is the one place that decides
    what a compaction covers on a path: reads, thresholds and :meth:`Session.path`
    all come here.
    """
    chosen: list[tuple[int, int, Compaction]] = []
    for _, comp in sorted(comps, key=lambda sc: sc[0], reverse=True):
        a, b = pos.get(comp.from_id), pos.get(comp.to_id)
        if a is None or b is None or a > b:
            continue
        if any(not (b < s or a > e) for s, e, _ in chosen):
            continue
        chosen.append((a, b, comp))
    chosen.sort(key=lambda r: r[0])
    return chosen


class _PathAbove:
    """The path above a leaf, read lazily (nodes only, a page at a time), and which
    compactions apply to it where: the rule of :func:`_choose_ranges` (a compaction's
    whole range on the path; among overlapping ones the newest wins), decided only
    for the compactions near the depths asked about."""

    def __init__(self, eng: Engine, sid: str, leaf: Node, comps: list[tuple[int, Compaction]]):
        self.leaf = leaf
        ids = {c.from_id for _, c in comps} | {c.to_id for _, c in comps}
        self.ends = {n.id: n for n in eng.nodes_by_id(sid, sorted(ids))}
        # candidates: both ends stored, the range above the leaf and the right way up
        self.comps = []
        for seq, c in comps:
            a, b = self.ends.get(c.from_id), self.ends.get(c.to_id)
            if a is not None and b is not None and a.depth <= b.depth <= leaf.depth:
                self.comps.append((seq, c, a.depth, b.depth))
        self._nodes: list[Node] = []  # leaf first
        self._pages = (n for page in eng.walk_pages(sid, leaf, None, False) for n, _ in page)
        self._chosen: dict[str, bool] = {}

    def at(self, depth: int) -> Node | None:
        """The path's node at ``depth`` (None when the path ends before it)."""
        want = self.leaf.depth - depth
        while len(self._nodes) <= want:
            node = next(self._pages, None)
            if node is None:
                return None
            self._nodes.append(node)
        return self._nodes[want]

    def _on_path(self, c: Compaction, lo: int, hi: int) -> bool:
        top, bottom = self.at(lo), self.at(hi)
        return top is not None and bottom is not None and top.id == c.from_id and bottom.id == c.to_id

    def _applies(self, seq: int, c: Compaction, lo: int, hi: int) -> bool:
        done = self._chosen.get(c.id)
        if done is None:
            done = self._on_path(c, lo, hi) and not any(
                s > seq and not (top > hi or bottom < lo) and self._applies(s, o, top, bottom)
                for s, o, top, bottom in self.comps
            )
            self._chosen[c.id] = done
        return done

    def span_at(self, depth: int) -> Compaction | None:
        """The compaction whose summary stands for the message at ``depth``, if any."""
        for seq, c, lo, hi in self.comps:
            if lo <= depth <= hi and self._applies(seq, c, lo, hi):
                return c
        return None


def _model_tokens(tokens: Sequence[int], ranges: Iterable[tuple[int, int, Compaction]]) -> int:
    """Tokens of a path as the model sees it: each applied range counts as its summary."""
    total = sum(tokens)
    for start, end, comp in ranges:
        total -= sum(tokens[start : end + 1])
        total += comp.tokens_after
    return total


def _overlay(comp: Compaction, count: int) -> dict[str, Any]:
    """The message a compaction shows as on read (docs/compaction.md)."""
    return _parts.overlay_message(
        id=comp.id,
        from_id=comp.from_id,
        to_id=comp.to_id,
        summary=comp.summary,
        created_at=comp.created_at,
        messages=count,
        tokens_before=comp.tokens_before,
    )


def _chunks(seq: Iterable[_T], size: int) -> Iterator[list[_T]]:
    it = iter(seq)
    while True:
        chunk = list(itertools.islice(it, size))
        if not chunk:
            return
        yield chunk
