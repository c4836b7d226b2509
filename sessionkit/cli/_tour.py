"""``sessionkit demo``: a demo store and a guided tour of it in the terminal."""

from __future__ import annotations

import os
import shlex
import tempfile
from typing import TextIO, cast

import sessionkit as sk

from ._commands import _local_path
from ._common import PROG, CommandError, _count, _size
from ._render import _render_hits, _render_info, _render_ls, _render_path, _Tree


def cmd_demo(args, out: TextIO) -> int:
    """Build the demo store (in --store or a new temporary folder) and print a guided tour."""
    from .._demo import build_demo_store

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
    from .._demo import DEPLOY_SESSION, MIGRATION_SESSION, WEATHER_SESSION

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

    w(
        f"sessionkit demo: {_count(stats['sessions'], 'session')}, {_count(stats['messages'], 'message')}, "
        f"{_count(stats['compactions'], 'compaction')}, {_count(stats['blobs'], 'blob')}; written to"
    )
    w(f"   {path}")

    step(1, "The sessions, newest activity first", f"ls {q}")
    _render_ls(store, path, body)

    step(2, "A regenerated reply is a sibling branch; both branches go on", f"show {q} {DEPLOY_SESSION} --tree")
    _Tree(store.session(DEPLOY_SESSION), None).render(body)

    migration = store.session(MIGRATION_SESSION)
    step(3, "A long chat, compacted as it grew: what the model sees", f"show {q} {MIGRATION_SESSION}")
    _render_path(migration, body, leaf_id=None, full=False)

    step(
        4,
        "The full history is still stored: every message, the compacted ranges tagged",
        f"show {q} {MIGRATION_SESSION} --tree",
    )
    _Tree(migration, None).render(body)

    step(
        5,
        f"A tool call with its result, and a file stored out of the row as a blob ({_size(stats['blob_bytes'])})",
        f"show {q} {WEATHER_SESSION}",
    )
    _render_path(store.session(WEATHER_SESSION), body, leaf_id=None, full=False)

    query = "deploying"
    step(
        6,
        "Search: stemmed ('deploying' finds deploy and deployment), every branch and compacted range",
        f"search {q} {query} --limit 5",
    )
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
