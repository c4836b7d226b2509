"""Bulk import and analysis on each engine, measured in one run.

Rows: importing the tau-bench airline trajectories (OpenAI chat format, 200
trajectories, 5,308 messages) with ``sk.io.import_openai``; importing N synthetic
messages (1,000,000 by default: 10,000 sessions of 100, the shared workload of
``benchmarks/peers/workload.py``) with batched writes; and one analysis query
(messages and tokens per role, plus the deepest path) over them with
``store.sql`` (DuckDB SQL over the store's views).

    python benchmarks/import_bench.py              # 1,000,000 messages
    python benchmarks/import_bench.py --n 100000   # quicker

``--memory``: the peak memory of each importer on a generated file of ``--lines``
lines (1,000,000 by default), each import in a process of its own writing a SQLite
file: the growth of the peak resident set (``VmHWM``) over the process's size
before the import, and the import's rate.

    python benchmarks/import_bench.py --memory                       # 1,000,000 lines each
    python benchmarks/import_bench.py --memory --lines 100000 --formats openai,jsonl
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE / "peers"))

from workload import message  # noqa: E402

import sessionkit as sk  # noqa: E402

TAU = HERE.parent / "tests" / "data" / "gpt-4o-airline.json.gz"
QUERY = """
SELECT role, count(*) AS messages, sum(tokens) AS tokens, max(depth) + 1 AS deepest_path
FROM messages GROUP BY role ORDER BY messages DESC
"""


def tau_import(store) -> tuple[int, float]:
    records = json.loads(gzip.decompress(TAU.read_bytes()))
    t = time.perf_counter()
    for i, rec in enumerate(records):
        sk.io.import_openai(store.session(f"tau-{rec['task_id']}-{rec['trial']}-{i}"), rec["traj"])
    return sum(len(r["traj"]) for r in records), time.perf_counter() - t


def synthetic_import(store, n: int, per_session: int = 100) -> float:
    t = time.perf_counter()
    for conv in range(n // per_session):
        parent = None
        batch = []
        for i in range(per_session):
            m = message(conv, i)
            batch.append((m, parent, None))
            parent = m["id"]
        store.session(f"s{conv}").import_many(batch)
    return time.perf_counter() - t


# ---------------------------------------------------------------------------
# Peak memory of each importer on a large generated file

WORDS = (
    "the to and a of is in that it for you this on with be can we will if as are not your or at "
    "flight booking seat refund order customer deploy server error retry cache query index log "
    "weather forecast summary context window prompt agent tool reply answer question"
).split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def gen_openai(path: Path, lines: int) -> None:
    """One chat of ``lines`` JSON lines: user, assistant with a tool call, its result, assistant."""
    rng = random.Random(1)
    with open(path, "w", encoding="utf-8") as out:
        i = 0
        while i < lines:
            k = i % 4
            if k == 0:
                rec = {"role": "user", "content": _text(rng, 30)}
            elif k == 1:
                args = json.dumps({"query": _text(rng, 3), "limit": rng.randint(1, 9)})
                rec = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"call_{i}", "type": "function", "function": {"name": "search", "arguments": args}}
                    ],
                }
            elif k == 2:
                rec = {"role": "tool", "tool_call_id": f"call_{i - 1}", "content": _text(rng, 40)}
            else:
                rec = {"role": "assistant", "content": _text(rng, 60)}
            out.write(json.dumps(rec) + "\n")
            i += 1


def gen_oasst(path: Path, lines: int) -> None:
    """Flat OASST messages, trees of 10 (a prompt, replies that branch), a tree's lines together."""
    rng = random.Random(2)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            tree, k = divmod(i, 10)
            parent = None if k == 0 else f"{tree}-{(k - 1) // 2}"
            rec = {
                "message_id": f"{tree}-{k}",
                "parent_id": parent,
                "message_tree_id": f"tree-{tree}",
                "role": "prompter" if k % 2 == 0 else "assistant",
                "text": _text(rng, 40),
                "lang": "en",
                "created_date": f"2023-02-{1 + tree % 28:02d}T10:00:{k:02d}.000Z",
                "rank": k % 3,
            }
            out.write(json.dumps(rec) + "\n")


def gen_oasst_trees(path: Path, lines: int) -> None:
    """OASST trees, one per line (a prompt, two replies, one reply to the first): one session each."""
    rng = random.Random(3)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            node = [
                {
                    "message_id": f"{i}-{k}",
                    "role": "assistant" if k % 2 else "prompter",
                    "text": _text(rng, 25),
                    "replies": [],
                }
                for k in range(4)
            ]
            node[0]["replies"] = [node[1], node[2]]
            node[1]["replies"] = [node[3]]
            out.write(json.dumps({"message_tree_id": f"tree-{i}", "prompt": node[0]}) + "\n")


def gen_hh(path: Path, lines: int) -> None:
    """HH pairs: two shared turns, then a chosen and a rejected reply."""
    rng = random.Random(4)
    with open(path, "w", encoding="utf-8") as out:
        for i in range(lines):
            head = f"\n\nHuman: {_text(rng, 15)} {i}\n\nAssistant: {_text(rng, 25)}\n\nHuman: {_text(rng, 10)}"
            rec = {
                "chosen": head + f"\n\nAssistant: {_text(rng, 30)}",
                "rejected": head + f"\n\nAssistant: {_text(rng, 30)}",
            }
            out.write(json.dumps(rec) + "\n")


def gen_jsonl(path: Path, lines: int) -> None:
    """A sessionkit JSONL export: sessions of 100 messages, one chain each, a session's lines together."""
    rng = random.Random(5)
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "sessionkit", "version": 1, "exported_at": "2025-01-01T00:00:00.000Z"}) + "\n")
        for i in range(lines - 1):
            sid, k = divmod(i, 100)
            msg = {
                "id": f"m{k}",
                "role": "user" if k % 2 == 0 else "assistant",
                "parts": [{"type": "text", "text": _text(rng, 40)}],
                "createdAt": "2025-01-01T00:00:00.000Z",
            }
            parent = None if k == 0 else f"m{k - 1}"
            out.write(
                json.dumps(
                    {
                        "type": "message",
                        "session_id": f"s{sid}",
                        "parent_id": parent,
                        "created_at": "2025-01-01T00:00:00.000Z",
                        "message": msg,
                    }
                )
                + "\n"
            )


GENERATORS = {
    "openai": gen_openai,
    "oasst": gen_oasst,
    "oasst-trees": gen_oasst_trees,
    "hh": gen_hh,
    "jsonl": gen_jsonl,
}

_CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import sessionkit as sk
import sessionkit.io


def rss(field):
    # kB from /proc/self/status: VmHWM is the peak of this process image (ru_maxrss also
    # counts the parent's peak, inherited across fork and exec)
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


fmt, path, db = sys.argv[2], sys.argv[3], sys.argv[4]
store = sk.open_store(db)
try:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak starts again from the current size
    before = rss("VmRSS")
except OSError:
    before = rss("VmHWM")
t = time.perf_counter()
if fmt == "openai":
    result = sk.io.import_openai(store.session("chat"), path)
elif fmt.startswith("oasst"):
    result = sk.io.import_oasst(store, path)
else:
    result = getattr(sk.io, "import_" + fmt)(store, path)
seconds = time.perf_counter() - t
peak = rss("VmHWM")
stats = store.stats()
# what the import returned (tests/io/test_io_memory.py checks it against the store)
returned = len(result)
last = result[-1]
last = last.message["id"] if fmt == "openai" else last.session_id
store.close()
print(json.dumps({"growth_mb": (peak - before) / 1024, "before_mb": before / 1024, "seconds": seconds,
                  "messages": stats["messages"], "sessions": stats["sessions"], "returned": returned,
                  "last": last}))
"""


def measure_import(fmt: str, path: Path, db: Path, repo: Path = HERE.parent) -> dict:
    """Import ``path`` with the ``fmt`` importer in a fresh process; its peak memory growth and rate."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(repo), fmt, str(path), str(db)], capture_output=True, text=True, timeout=3600
    )
    if out.returncode:
        raise RuntimeError(f"importing {fmt} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_main(args) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="sk-import-mem-") as d:
        for fmt in args.formats.split(","):
            path = Path(d) / f"{fmt}.jsonl"
            GENERATORS[fmt](path, args.lines)
            size = path.stat().st_size
            got = measure_import(fmt, path, Path(d) / f"{fmt}.db")
            rows.append((fmt, size, got))
            print(
                f"  {fmt}: {args.lines:,} lines, {size / 1e6:,.0f} MB, peak growth {got['growth_mb']:,.1f} MB, "
                f"{got['messages']:,} messages in {got['sessions']:,} sessions, {got['seconds']:,.0f} s",
                flush=True,
            )
            for p in Path(d).iterdir():
                p.unlink()
    print(
        "\n| importer | lines | file | messages | sessions | peak memory growth | time | messages/s |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for fmt, size, got in rows:
        print(
            f"| {fmt} | {args.lines:,} | {size / 1e6:,.0f} MB | {got['messages']:,} | {got['sessions']:,} | "
            f"{got['growth_mb']:,.1f} MB | {got['seconds']:,.0f} s | {got['messages'] / got['seconds']:,.0f} |"
        )
    print(f"\nsessionkit {sk.__version__}, {os.cpu_count()} cores, SQLite file store.")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="synthetic messages (default 1,000,000)")
    ap.add_argument("--engines", default="sqlite,duckdb")
    ap.add_argument("--memory", action="store_true", help="measure each importer's peak memory instead")
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines per generated file (--memory)")
    ap.add_argument("--formats", default="openai,oasst,oasst-trees,hh,jsonl", help="importers to measure (--memory)")
    args = ap.parse_args(argv)
    if args.memory:
        return memory_main(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sk-import-") as d:
        for engine in args.engines.split(","):
            ext = {"sqlite": "db", "duckdb": "duckdb"}[engine]
            store = sk.open_store(Path(d) / f"tau.{ext}")
            n_tau, t_tau = tau_import(store)
            store.close()
            store = sk.open_store(Path(d) / f"big.{ext}")
            t_big = synthetic_import(store, args.n)
            size = sum(p.stat().st_size for p in Path(d).glob(f"big.{ext}*"))
            t = time.perf_counter()
            df = store.sql(QUERY)
            t_q = time.perf_counter() - t
            assert int(df["messages"].sum()) == args.n
            store.close()
            rows.append((engine, n_tau / t_tau, args.n / t_big, t_q, size / args.n))
            print(
                f"  {engine}: tau {n_tau / t_tau:,.0f} msg/s, synthetic {args.n / t_big:,.0f} msg/s, "
                f"query {t_q:.1f} s, {size / args.n:,.0f} B/msg",
                flush=True,
            )
            for p in Path(d).iterdir():
                p.unlink()
    base = rows[0]
    print(
        f"\n| engine | tau-bench import | {args.n:,} synthetic messages import | analysis query over "
        f"{args.n:,} | file bytes per message |\n|---|---:|---:|---:|---:|"
    )
    for engine, a, b, q, s in rows:
        print(
            f"| {engine} | {a:,.0f} msg/s ({a / base[1]:.2f}x) | {b:,.0f} msg/s ({b / base[2]:.2f}x) | "
            f"{q:.1f} s ({q / base[3]:.2f}x) | {s:,.0f} B ({s / base[4]:.2f}x) |"
        )
    print(f"\nsessionkit {sk.__version__}, {os.cpu_count()} cores; ratios are against the first engine.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
