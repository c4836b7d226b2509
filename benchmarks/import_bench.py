"""Bulk import and analysis on each engine, measured in one run.

Rows: importing the tau-bench airline trajectories (OpenAI chat format, 200
trajectories, 5,308 messages) with ``sk.io.import_openai``; importing N synthetic
messages (1,000,000 by default: 10,000 sessions of 100, the shared workload of
``benchmarks/peers/workload.py``) with batched writes; and one analysis query
(messages and tokens per role, plus the deepest path) over them with
``store.sql`` (DuckDB SQL over the store's views).

    python benchmarks/import_bench.py              # 1,000,000 messages
    python benchmarks/import_bench.py --n 100000   # quicker

``--hh``: importing the Anthropic HH file of ``tests/data`` (2,312 pairs, one session
each) with ``sk.io.import_hh`` on each engine, as a ratio to raw inserts into the same
engine of the same rows (``session_id, id, parent_id, content``, the content being
``json.dumps`` of the message; one unique key on ``(session_id, id)``), read and split
from the same file, in transactions of 200 pairs: stdlib ``sqlite3`` (``executemany``),
DuckDB (one ``INSERT ... SELECT unnest(...)`` of column lists per transaction) and,
with ``--pg-url``, psycopg (``executemany``). The two sides run in turns, ``--rounds``
times each, each on a new file or schema; the ratio is the median round's.

    python benchmarks/import_bench.py --hh [--rounds 3] [--engines sqlite,duckdb,postgresql]

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
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
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
# The HH file against raw inserts of the same rows

HH = HERE.parent / "tests" / "data" / "hh-rlhf-harmless-base-test.jsonl.gz"
HH_GROUP = 200  # pairs per transaction, as import_hh writes them


def hh_rows() -> Iterator[list[tuple[str, str, str | None, str]]]:
    """The rows of the HH file, a group of pairs at a time: what import_hh stores, built
    directly (turns split as import_hh splits them, shared turns once, then the rejected
    and the chosen branch)."""
    import hashlib

    from sessionkit.io.hh import parse_turns

    group: list[tuple[str, str, str | None, str]] = []
    pairs = 0
    with gzip.open(HH, "rt", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            chosen, rejected = parse_turns(obj["chosen"]), parse_turns(obj["rejected"])
            sid = "hh-" + hashlib.sha256(obj["chosen"].encode() + b"\x00" + obj["rejected"].encode()).hexdigest()[:20]
            shared = 0
            while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
                shared += 1
            parent = None
            for i in range(shared):
                mid = f"p{i}"
                m = {"id": mid, "role": chosen[i][0], "parts": [{"type": "text", "text": chosen[i][1]}]}
                group.append((sid, mid, parent, json.dumps(m)))
                parent = mid
            fork = parent
            for prefix, turns, is_chosen in (("r", rejected, False), ("c", chosen, True)):
                parent = fork
                for i in range(shared, len(turns)):
                    mid = f"{prefix}{i}"
                    m = {
                        "id": mid,
                        "role": turns[i][0],
                        "parts": [{"type": "text", "text": turns[i][1]}],
                        "metadata": {"hh": {"chosen": is_chosen}},
                    }
                    group.append((sid, mid, parent, json.dumps(m)))
                    parent = mid
            pairs += 1
            if pairs % HH_GROUP == 0:
                yield group
                group = []
    if group:
        yield group


RAW_TABLE = (
    "CREATE TABLE m (session_id TEXT NOT NULL, id TEXT NOT NULL, parent_id TEXT, content TEXT NOT NULL, "
    "UNIQUE (session_id, id))"
)


def raw_sqlite(target: str) -> int:
    db = sqlite3.connect(target, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(RAW_TABLE)
    n = 0
    for rows in hh_rows():
        db.execute("BEGIN")
        db.executemany("INSERT OR IGNORE INTO m VALUES (?, ?, ?, ?)", rows)
        db.execute("COMMIT")
        n += len(rows)
    db.close()
    return n


def raw_duckdb(target: str) -> int:
    import duckdb

    db = duckdb.connect(target)
    db.execute(RAW_TABLE)
    n = 0
    for rows in hh_rows():
        db.execute("BEGIN TRANSACTION")
        db.execute(
            "INSERT INTO m SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]) ON CONFLICT DO NOTHING",
            [list(c) for c in zip(*rows)],
        )
        db.execute("COMMIT")
        n += len(rows)
    db.close()
    return n


def raw_postgresql(target: str) -> int:
    import psycopg

    url, schema = target.rsplit("#", 1)
    n = 0
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"CREATE SCHEMA {schema}")
        db.execute(f"SET search_path TO {schema}")
        db.execute(RAW_TABLE)
        for rows in hh_rows():
            with db.transaction(), db.cursor() as cur:
                cur.executemany("INSERT INTO m VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", rows)
            n += len(rows)
        db.execute(f"DROP SCHEMA {schema} CASCADE")
    return n


def hh_main(args) -> int:
    import statistics
    import urllib.parse

    raws = {"sqlite": raw_sqlite, "duckdb": raw_duckdb, "postgresql": raw_postgresql}
    names = iter(range(1_000_000))
    rows = []
    own: dict[str, float] = {}  # each engine's median import time
    with tempfile.TemporaryDirectory(prefix="sk-import-hh-") as d:
        for engine in args.engines.split(","):
            if engine == "postgresql" and not args.pg_url:
                print("  postgresql: skipped (no --pg-url)")
                continue
            times: dict[str, list[float]] = {"sessionkit": [], "raw": []}
            counts = set()
            for _ in range(args.rounds):
                k = next(names)
                if engine == "postgresql":
                    schema = f"hh_bench_{os.getpid()}_{k}"
                    sep = "&" if urllib.parse.urlsplit(args.pg_url).query else "?"
                    target, raw_target = f"{args.pg_url}{sep}schema={schema}", f"{args.pg_url}#{schema}_raw"
                else:
                    ext = {"sqlite": "db", "duckdb": "duckdb"}[engine]
                    target, raw_target = str(Path(d) / f"sk{k}.{ext}"), str(Path(d) / f"raw{k}.{ext}")
                store = sk.open_store(target)  # opened (schema made) outside the clock
                t = time.perf_counter()
                sk.io.import_hh(store, HH, progress=False)
                times["sessionkit"].append(time.perf_counter() - t)
                counts.add(store.stats()["messages"])
                store.close()
                if engine == "postgresql":
                    import psycopg

                    with psycopg.connect(args.pg_url, autocommit=True) as db:
                        db.execute(f"DROP SCHEMA {schema} CASCADE")
                t = time.perf_counter()
                counts.add(raws[engine](raw_target))
                times["raw"].append(time.perf_counter() - t)
                for p in Path(d).iterdir():
                    p.unlink()
            assert len(counts) == 1, f"{engine}: sessionkit and raw stored different row counts {counts}"
            ratios = sorted(a / b for a, b in zip(times["sessionkit"], times["raw"]))
            ratio = statistics.median(ratios)
            rows.append((engine, counts.pop(), ratio, ratios))
            own[engine] = statistics.median(times["sessionkit"])
            print(
                f"  {engine}: import_hh {ratio:.2f}x raw's time (rounds: {', '.join(f'{r:.2f}' for r in ratios)});"
                f" median {own[engine]:.2f} s"
            )
    print("\n| engine | HH messages | import_hh against raw inserts (median round) | rounds |\n|---|---:|---:|---|")
    for engine, n, ratio, ratios in rows:
        print(f"| {engine} | {n:,} | {ratio:.2f}x time | {', '.join(f'{r:.2f}x' for r in ratios)} |")
    if "sqlite" in own and "duckdb" in own:
        print(
            f"\nThe DuckDB engine's import against the SQLite engine's: {own['duckdb'] / own['sqlite']:.2f}x"
            f" ({own['duckdb']:.2f} s against {own['sqlite']:.2f} s, medians of the rounds)"
        )
    print(f"\nsessionkit {sk.__version__} from {Path(sk.__file__).parent.parent}, {os.cpu_count()} cores.")
    return 0


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
    ap.add_argument("--engines", default=None, help="default sqlite,duckdb (--hh: and postgresql)")
    ap.add_argument("--memory", action="store_true", help="measure each importer's peak memory instead")
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines per generated file (--memory)")
    ap.add_argument("--formats", default="openai,oasst,oasst-trees,hh,jsonl", help="importers to measure (--memory)")
    ap.add_argument("--hh", action="store_true", help="the HH file on each engine against raw inserts instead")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each side (--hh)")
    ap.add_argument("--pg-url", default=os.environ.get("SESSIONKIT_PG_URL"), help="PostgreSQL database (--hh)")
    args = ap.parse_args(argv)
    if args.hh:
        args.engines = args.engines or "sqlite,duckdb,postgresql"
        return hh_main(args)
    args.engines = args.engines or "sqlite,duckdb"
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
