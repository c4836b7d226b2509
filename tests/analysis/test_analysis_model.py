"""Random walks of writes against the analysis views, on every engine.

Each walk draws steps at random from a seed: appends (under the latest leaf, under an
earlier message, new roots), imports, updates, deletes of a leaf and of a session,
compactions, runs and events, transactions that commit and transactions that roll back
(each with queries inside), closing and opening the store again, deleting the store's
files and building a store again in the same place with the same ids, and a writer
process killed in the middle of a transaction. After every step every view is compared
with the Python reference (``assert_views_match``: the messages read through the public
API, decoded in Python), so the analysis cache is checked after each kind of change,
including the ones a cache could miss: a rollback, a store made again, a killed writer.

Each walk takes every kind of step at least once. The seeds are fixed: a failure names its
seed and steps, and runs again the same way.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import msg, with_tools
from test_analysis_views import assert_views_match

import sessionkit as sk

#: The walks of each engine: (seed, steps). A walk of 30 steps takes about five seconds.
WALKS = [(1, 30)]
#: How often each kind of step is drawn.
WEIGHTS = {
    "append": 6,
    "branch": 2,
    "root": 1,
    "import": 1,
    "update": 2,
    "delete_leaf": 1,
    "delete_session": 1,
    "compact": 1,
    "run": 1,
    "commit": 2,
    "rollback": 2,
    "reopen": 1,
    "recreate": 1,
    "killed": 1,
}
KINDS = [
    "sqlite-file",
    "sqlite-file-store-connection",
    "sqlite-memory",
    pytest.param("duckdb-file", marks=pytest.mark.slow),
    pytest.param("postgresql", marks=pytest.mark.postgres),
]


class Boom(Exception):
    pass


class Walk:
    """One store and the random steps taken on it."""

    def __init__(self, new_store, kind: str, rng: random.Random):
        self.kind = kind
        self.rng = rng
        self.store = new_store(kind)
        self.target = self.store.path
        self.n = 0
        self.killed_once = False
        self.text_of = lambda i: f"words {i} " + rng.choice(["alpha", "beta", "gamma delta", "é ✓"])

    # -- helpers --------------------------------------------------------------------
    def sessions(self) -> list[str]:
        return [info.id for info in self.store.list_sessions()]

    def new_id(self) -> str:
        self.n += 1
        return f"m{self.n}"

    def message(self):
        mid = self.new_id()
        m = msg(mid, self.text_of(self.n), self.rng.choice(["user", "assistant"]))
        return with_tools(m, "lookup") if self.rng.random() < 0.25 else m

    def session(self):
        return self.store.session(self.rng.choice(["s0", "s1", "s2"]))

    def any_message(self):
        """A (session, message id) of the store, or None."""
        choices = [(sid, node.id) for sid in self.sessions() for node in self.store.session(sid).tree().nodes]
        return self.rng.choice(choices) if choices else None

    def leaves(self):
        out = []
        for sid in self.sessions():
            nodes = self.store.session(sid).tree().nodes
            parents = {node.parent_id for node in nodes}
            out += [(sid, node.id) for node in nodes if node.id not in parents]
        return out

    def reopen(self):
        self.store.close()
        self.store = sk.open_store(self.target)

    # -- steps ----------------------------------------------------------------------
    def step(self, name: str) -> str:
        getattr(self, "do_" + name)()
        return name

    def do_append(self):
        self.session().append(self.message())

    def do_branch(self):
        picked = self.any_message()
        if picked is None:
            return self.do_append()
        self.store.session(picked[0]).append(self.message(), parent_id=picked[1])

    def do_root(self):
        self.session().append(self.message(), parent_id=None)

    def do_import(self):
        s = self.store.session(f"imported{self.rng.randrange(2)}")
        first, second = self.message(), self.message()
        s.import_many([(first, None, 1_700_000_000_000 + self.n), (second, first["id"], 1_700_000_000_500 + self.n)])

    def do_update(self):
        picked = self.any_message()
        if picked is None:
            return self.do_append()
        sid, mid = picked
        self.store.session(sid).update(msg(mid, f"rewritten {self.n}", "assistant"))

    def do_delete_leaf(self):
        leaves = self.leaves()
        if leaves:
            sid, leaf = self.rng.choice(leaves)
            self.store.session(sid).delete(leaf)

    def do_delete_session(self):
        sessions = self.sessions()
        if sessions:
            self.store.delete_session(self.rng.choice(sessions))

    def do_compact(self):
        sid = self.rng.choice(self.sessions() or ["s0"])
        path = [n.id for n in self.store.session(sid).tree().path()] if sid in self.sessions() else []
        if len(path) < 3:
            return self.do_append()
        self.store.session(sid).import_compaction(
            sk.Compaction(f"c{self.new_id()}", path[0], path[-2], "a summary", "2024-05-01T00:00:00.000Z", 900, 90)
        )

    def do_run(self):
        sid = self.rng.choice(["s0", "s1", "s2"])
        run_id = f"r{self.new_id()}"
        self.store.run_log.begin(sid, run_id, "go")
        self.store.run_log.append_events(
            sid, [{"run_id": run_id, "kind": "run.start"}, {"run_id": run_id, "kind": "x"}]
        )
        if self.rng.random() < 0.7:
            self.store.run_log.end(run_id, status="completed")

    def _writes(self):
        for _ in range(self.rng.randint(1, 3)):
            self.step(self.rng.choice(["append", "branch", "update", "run"]))

    def do_commit(self):
        with self.store.transaction():
            self._writes()
            self.store.sql("SELECT count(*) FROM messages")  # a query inside
        # (compared after the step)

    def do_rollback(self):
        before = self.store.sql("SELECT count(*) AS n FROM messages")["n"][0]
        with pytest.raises(Boom), self.store.transaction():
            self._writes()
            self.store.sql("SELECT id, text FROM messages")  # a query inside: reads the transaction's writes
            raise Boom
        assert self.store.sql("SELECT count(*) AS n FROM messages")["n"][0] == before

    def do_reopen(self):
        if self.kind.endswith("memory"):
            return self.do_append()
        self.reopen()

    def _remove(self):
        self.store.close()
        if self.kind == "postgresql":
            import psycopg

            schema = self.target.rsplit("schema=", 1)[1].split("&")[0]
            with psycopg.connect(self.target.split("?")[0], autocommit=True) as con:
                con.execute(f'DROP SCHEMA "{schema}" CASCADE')
        else:  # (a SQLite file's cache file stays beside it, as a user deleting the store leaves it)
            for suffix in ("", ".wal", "-wal", "-shm"):
                Path(self.target + suffix).unlink(missing_ok=True)
        self.store = sk.open_store(self.target)

    def do_recreate(self):
        """The store's files deleted and a store built again in the same place, twice: the
        same appends with other texts (the same ids, sequence numbers and change log: only
        the store's identity tells them apart), queried in between."""
        if self.kind.endswith("memory"):
            return self.do_append()
        n = self.n
        for word in ("before", "after"):
            self._remove()
            self.n = n
            s = self.store.session("s0")
            for _ in range(3):
                s.append(msg(self.new_id(), f"{word} {self.n}"))
            assert self.store.sql("SELECT list(text ORDER BY seq) AS t FROM messages")["t"][0].tolist() == [
                f"{word} {i}" for i in range(n + 1, n + 4)
            ]

    def do_killed(self):
        """A writer process killed inside a transaction, after its writes were made (none of
        them may appear); for DuckDB (one process per file) with this store closed."""
        if self.kind.endswith("memory") or self.killed_once:
            return self.do_append()
        self.killed_once = True
        if self.kind.startswith("duckdb"):
            self.store.close()
        code = (
            "import sys, sessionkit as sk\n"
            "st = sk.open_store(sys.argv[1])\n"
            "with st.transaction():\n"
            "    st.session('s0').append_many([{'id': f'killed{i}', 'role': 'user',"
            " 'parts': [{'type': 'text', 'text': 'never'}]} for i in range(5)])\n"
            "    print('written', flush=True)\n"
            "    sys.stdin.readline()\n"
        )
        proc = subprocess.Popen(
            [sys.executable, "-c", code, self.target], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "written"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if self.kind.startswith("duckdb"):
            self.store = sk.open_store(self.target)
        assert self.store.sql("SELECT count(*) AS n FROM messages WHERE id LIKE 'killed%'")["n"][0] == 0


@pytest.mark.slow  # slow: over a second; the fast suite leaves it out
@pytest.mark.parametrize("seed,steps", WALKS)
@pytest.mark.parametrize("kind", KINDS)
def test_random_writes_keep_every_view_equal_to_the_reference(new_store, monkeypatch, kind, seed, steps):
    if kind == "sqlite-file-store-connection":  # the cache reads through the store's connection, not ADBC
        from sessionkit.store.engines.sqlite import analysis as sqlite_source

        monkeypatch.setattr(sqlite_source, "_adbc_sqlite", lambda: None)
        kind = "sqlite-file"
    rng = random.Random(f"{kind}-{seed}")
    walk = Walk(new_store, kind, rng)
    names, weights = zip(*WEIGHTS.items())
    # every kind of step at least once, in a random order, then steps drawn by weight
    plan = rng.sample(names, len(names)) + rng.choices(names, weights, k=max(0, steps - len(names)))
    done = []
    try:
        for name in plan:
            done.append(walk.step(name))
            assert_views_match(walk.store)
    except BaseException as exc:
        raise AssertionError(f"seed {seed}, steps {done}") from exc
    finally:
        if not walk.store.closed:
            walk.store.close()
