#!/usr/bin/env python3
"""Run one workload through sessionkit and the session stores people use today.

    benchmarks/peers/setup.sh                       # once: builds benchmarks/peers/.venv
    benchmarks/peers/.venv/bin/python benchmarks/peers/run.py --quick
    benchmarks/peers/.venv/bin/python benchmarks/peers/run.py          # full size

Each store runs in its own subprocesses (one for the timed phases, one to build the
large conversation, one to read it back for the memory probe), one store after another,
so no two stores compete for the machine and one crashing store leaves the others'
rows intact. The result is a Markdown table with ratios to sessionkit (SQLite).
See README.md beside this file for what each column measures.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The repository this script lives in: its sessionkit is the one measured.
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402

SIZES = {
    "quick": dict(
        single=1_000,
        convs=50,
        conv_len=20,
        mem=2_000,
        append_budget=5.0,
        read_reps=5,
        recent_reps=50,
        conv_reads=50,
        search_reps=3,
        read_budget=3.0,
        complete_budget=10.0,
        mem_budget=10.0,
        child_timeout=120,
    ),
    "full": dict(
        single=10_000,
        convs=1_000,
        conv_len=20,
        mem=100_000,
        append_budget=40.0,
        read_reps=5,
        recent_reps=200,
        conv_reads=200,
        search_reps=5,
        read_budget=8.0,
        complete_budget=45.0,
        mem_budget=90.0,
        child_timeout=900,
    ),
}

DEFAULT_ORDER = [
    "sessionkit",
    "sessionkit-duckdb",
    "sqlite3",
    "duckdb",
    "openai-sqlite",
    "openai-advanced",
    "langchain",
    "langgraph",
    "adk",
]


# ==================================================================================
# Child side: runs inside the peers' virtualenv, one store per process
# ==================================================================================
def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text[:160]


def _dir_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _journal_mode(folder: Path) -> str | None:
    """The journal mode recorded in the store's SQLite file, if it is one."""
    for p in sorted(folder.iterdir()):
        if p.suffix in (".db", ".sqlite", ".sqlite3") and p.is_file():
            try:
                with open(p, "rb") as fh:
                    head = fh.read(20)
                if not head.startswith(b"SQLite format 3"):
                    continue
                # bytes 18/19 are 2 in WAL mode, 1 for a rollback journal
                return "wal" if head[18] == 2 else "rollback journal"
            except OSError:
                return None
    return None


async def _timed_reads(fn, reps: int, budget: float) -> tuple[list[float], object]:
    times: list[float] = []
    out = None
    stop = time.perf_counter() + budget
    for _ in range(reps):
        t = time.perf_counter()
        out = await fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() > stop:
            break
    return times, out


def _ms(times: list[float]) -> dict:
    return {"ms": statistics.median(times) * 1000, "reps": len(times)}


async def _cell(res: dict, key: str, coro) -> None:
    """Run one measurement; a failure fills the cell with its error, not the run."""
    try:
        res["cells"][key] = await coro
    except Exception as exc:  # any peer failure becomes a table cell
        res["cells"][key] = {"error": _short(exc)}
        res.setdefault("tracebacks", {})[key] = traceback.format_exc()


async def _bulk(peer, conv: str, msgs: list[dict], budget: float) -> int:
    """Bulk-load msgs in the peer's chunks until done or past `budget` seconds; returns
    how many were loaded."""
    chunk = peer.bulk_chunk or max(1, len(msgs))
    stop = time.perf_counter() + budget
    loaded = 0
    for i in range(0, len(msgs), chunk):
        await peer.bulk_load(conv, msgs[i : i + chunk])
        loaded += len(msgs[i : i + chunk])
        if time.perf_counter() > stop:
            break
    return loaded


async def child_bench(peer_key: str, folder: Path, cfg: dict) -> dict:
    from adapters import PEERS

    cls = PEERS[peer_key]
    res: dict = {"key": peer_key, "name": cls.name, "cells": {}, "notes": []}
    n_single, budget = cfg["single"], cfg["append_budget"]

    # ---------------- phase A: one conversation of n_single messages ----------------
    single = workload.conversation(0, n_single)
    conv = "conv-0"
    dir_a = folder / "single"
    dir_a.mkdir(parents=True, exist_ok=True)
    peer = cls()
    res["durability"] = peer.durability
    try:
        peer.open(dir_a)
    except Exception as exc:
        res["error"] = _short(exc)
        res["traceback"] = traceback.format_exc()
        return res
    res["durability"] = peer.durability
    res["search_kind"] = peer.search_kind if peer.has_search else ""
    res["recent_kind"] = peer.recent_kind
    try:
        res["versions"] = peer.versions()
    except Exception:
        res["versions"] = {}

    async def append_single() -> dict:
        marks: list[float] = []
        start = time.perf_counter()
        deadline = start + budget
        done = 0
        for m in single:
            await peer.append(conv, m)
            done += 1
            if done % 10 == 0:
                marks.append(time.perf_counter() - start)
            if time.perf_counter() > deadline:
                break
        secs = time.perf_counter() - start
        out = {"rate": done / secs, "count": done, "of": n_single, "secs": secs}
        if len(marks) >= 20:
            tenth = len(marks) // 10
            first = (tenth * 10) / marks[tenth - 1]
            last = (tenth * 10) / (marks[-1] - marks[-1 - tenth])
            out["rate_first_tenth"], out["rate_last_tenth"] = first, last
        return out

    async def rest_of_phase_a() -> None:
        await _cell(res, "append_single", append_single())
        appended = res["cells"]["append_single"].get("count", 0)
        await peer.aclose()
        if appended:
            res["cells"]["bytes_single"] = {
                "bytes_per_msg": _dir_bytes(dir_a) / appended,
                "count": appended,
            }
        else:
            res["cells"]["bytes_single"] = {"error": "no message stored"}
        res["journal_mode"] = _journal_mode(dir_a)

        peer.open(dir_a)
        if 0 < appended < n_single:
            t = time.perf_counter()
            try:
                loaded = await _bulk(peer, conv, single[appended:], cfg["complete_budget"])
            except Exception as exc:
                loaded = 0
                res["notes"].append(f"bulk completion failed: {_short(exc)}")
            size = appended + loaded
            res["single_size"] = size
            res["notes"].append(
                f"the 1-conversation append phase stopped at its {budget:.0f} s cap after "
                f"{appended:,} of {n_single:,} messages (the rate is over those); "
                f"{loaded:,} more were bulk-loaded, untimed, in {time.perf_counter() - t:.0f} s, "
                + (
                    f"so reads and search ran on all {n_single:,}"
                    if size == n_single
                    else f"until the {cfg['complete_budget']:.0f} s cap: reads and search ran on {size:,}"
                )
            )

        # Records the peer keeps for this conversation (a tool turn is 2-3 of them in some).
        expected = sum(peer._records.get(conv, [])) or n_single

        async def read_full() -> dict:
            times, out = await _timed_reads(lambda: peer.read_all(conv), cfg["read_reps"], cfg["read_budget"])
            r = _ms(times)
            r["returned"] = len(out)
            if len(out) != expected:
                res["notes"].append(f"full read returned {len(out):,} records, expected {expected:,}")
            return r

        async def read_recent() -> dict:
            times, out = await _timed_reads(lambda: peer.read_recent(conv, 20), cfg["recent_reps"], cfg["read_budget"])
            r = _ms(times)
            r["returned"] = len(out)
            return r

        await _cell(res, "read_full", read_full())
        await _cell(res, "read_recent", read_recent())

        async def search() -> dict:
            if not peer.has_search:
                return {"na": "no search API"}
            # First search on a store that has never searched: sessionkit builds its index
            # inside that call (docs/search.md); the raw rows build theirs in prepare_search.
            t = time.perf_counter()
            await peer.prepare_search(conv)
            await peer.search(conv, workload.SEARCH_QUERIES[0])
            first = time.perf_counter() - t
            per_query: dict[str, float] = {}
            hits: dict[str, int] = {}
            all_times: list[float] = []
            for q in workload.SEARCH_QUERIES:
                times, out = await _timed_reads(
                    lambda q=q: peer.search(conv, q), cfg["search_reps"], cfg["read_budget"]
                )
                per_query[q] = round(statistics.median(times) * 1000, 3)
                hits[q] = len(out)
                all_times.append(statistics.median(times))
            return {
                "ms": statistics.median(all_times) * 1000,
                "first_ms": first * 1000,
                "per_query_ms": per_query,
                "hits": hits,
            }

        await _cell(res, "search", search())
        try:
            await peer.aclose()
        except Exception:
            pass

    async def phase_b() -> None:
        # ---------------- phase B: many short conversations ----------------
        n_convs, conv_len = cfg["convs"], cfg["conv_len"]
        many = [[workload.message(c + 1, i) for i in range(conv_len)] for c in range(n_convs)]
        dir_b = folder / "many"
        dir_b.mkdir(parents=True, exist_ok=True)
        peer_b = cls()
        peer_b.open(dir_b)

        async def append_many() -> dict:
            start = time.perf_counter()
            deadline = start + budget
            done = convs_done = 0
            for c, msgs in enumerate(many):
                cid = f"conv-{c + 1}"
                for m in msgs:
                    await peer_b.append(cid, m)
                    done += 1
                if hasattr(peer_b, "release"):
                    peer_b.release(cid)
                convs_done += 1
                if time.perf_counter() > deadline:
                    break
            secs = time.perf_counter() - start
            return {"rate": done / secs, "count": done, "of": n_convs * conv_len, "convs": convs_done, "secs": secs}

        await _cell(res, "append_many", append_many())
        done_convs = res["cells"]["append_many"].get("convs", 0)
        await peer_b.aclose()
        if done_convs:
            res["cells"]["bytes_many"] = {
                "bytes_per_msg": _dir_bytes(dir_b) / (done_convs * conv_len),
                "count": done_convs * conv_len,
            }
        else:
            res["cells"]["bytes_many"] = {"error": "no message stored"}

        peer_b = cls()
        peer_b.open(dir_b)
        stored_convs = done_convs
        if 0 < done_convs < n_convs:
            t = time.perf_counter()
            stop = t + cfg["complete_budget"]
            for c in range(done_convs, n_convs):
                cid = f"conv-{c + 1}"
                await peer_b.bulk_load(cid, many[c])
                if hasattr(peer_b, "release"):
                    peer_b.release(cid)
                stored_convs += 1
                if time.perf_counter() > stop:
                    break
            res["many_size"] = stored_convs
            res["notes"].append(
                f"the {n_convs:,}x{conv_len} append phase stopped at its {budget:.0f} s cap after "
                f"{done_convs:,} conversations; {stored_convs - done_convs:,} more were bulk-loaded, "
                f"untimed, in {time.perf_counter() - t:.0f} s; the reads ran on a store of "
                f"{stored_convs:,} conversations"
            )

        async def read_conv() -> dict:
            rng = random.Random(7)
            picks = [f"conv-{rng.randrange(stored_convs) + 1}" for _ in range(cfg["conv_reads"])]
            times: list[float] = []
            stop = time.perf_counter() + cfg["read_budget"]
            returned = 0
            for cid in picks:
                t = time.perf_counter()
                out = await peer_b.read_all(cid)
                if hasattr(peer_b, "release"):
                    peer_b.release(cid)
                times.append(time.perf_counter() - t)
                returned = len(out)
                if time.perf_counter() > stop:
                    break
            r = _ms(times)
            r["returned"] = returned
            return r

        await _cell(res, "read_conv", read_conv())
        try:
            await peer_b.aclose()
        except Exception:
            pass

    for phase, cols, fn in (
        ("A", ("append_single", "bytes_single", "read_full", "read_recent", "search"), rest_of_phase_a),
        ("B", ("append_many", "bytes_many", "read_conv"), phase_b),
    ):
        try:
            await fn()
        except Exception as exc:  # the cells not yet filled say why
            for col in cols:
                res["cells"].setdefault(col, {"error": _short(exc)})
            res.setdefault("tracebacks", {})["phase " + phase] = traceback.format_exc()
    return res


async def child_membuild(peer_key: str, folder: Path, cfg: dict) -> dict:
    from adapters import PEERS

    peer = PEERS[peer_key]()
    folder.mkdir(parents=True, exist_ok=True)
    peer.open(folder)
    msgs = workload.conversation(99, cfg["mem"])
    t = time.perf_counter()
    loaded = await _bulk(peer, "conv-big", msgs, cfg["mem_budget"])
    secs = time.perf_counter() - t
    await peer.aclose()
    return {"secs": secs, "bytes": _dir_bytes(folder), "messages": loaded}


def _rss_kb() -> tuple[int, int]:
    text = Path("/proc/self/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", text).group(1))
    hwm = int(re.search(r"VmHWM:\s+(\d+)", text).group(1))
    return rss, hwm


async def child_memread(peer_key: str, folder: Path, cfg: dict) -> dict:
    from adapters import PEERS

    peer = PEERS[peer_key]()
    peer.open(folder)
    gc.collect()
    # Reset the peak-RSS mark so the figure is the peak during the read alone.
    Path("/proc/self/clear_refs").write_text("5")
    base, _ = _rss_kb()
    t = time.perf_counter()
    count = 0
    for _ in await peer.iter_all("conv-big"):
        count += 1
    secs = time.perf_counter() - t
    _, peak = _rss_kb()
    await peer.aclose()
    return {"growth_mb": (peak - base) / 1024, "count": count, "secs": secs, "base_mb": base / 1024}


def child_main(args: argparse.Namespace) -> None:
    cfg = json.loads(args.config)
    fn = {"bench": child_bench, "membuild": child_membuild, "memread": child_memread}[args.child]
    try:
        out = asyncio.run(fn(args.peer, Path(args.folder), cfg))
    except Exception as exc:
        out = {"error": _short(exc), "traceback": traceback.format_exc()}
    Path(args.result).write_text(json.dumps(out, default=str))


# ==================================================================================
# Parent side: runs the children and prints the table
# ==================================================================================
def _python() -> str:
    venv = HERE / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def run_child(kind: str, peer: str, folder: Path, cfg: dict, env: dict, log: Path) -> dict:
    result = folder.parent / f"{peer}-{kind}.json"
    cmd = [
        _python(),
        str(HERE / "run.py"),
        "--child",
        kind,
        "--peer",
        peer,
        "--folder",
        str(folder),
        "--config",
        json.dumps(cfg),
        "--result",
        str(result),
    ]
    t = time.perf_counter()
    try:
        with open(log, "a") as fh:
            fh.write(f"\n=== {peer} {kind}\n")
            fh.flush()
            proc = subprocess.run(cmd, env=env, stdout=fh, stderr=fh, timeout=cfg["child_timeout"])
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {cfg['child_timeout']} s"}
    if not result.exists():
        return {"error": f"child exited {proc.returncode} without a result (see {log})"}
    out = json.loads(result.read_text())
    out["wall_secs"] = time.perf_counter() - t
    return out


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, AttributeError):
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores{mem}; {platform.system()} {platform.release()}; "
        f"Python {platform.python_version()}; SQLite {sqlite3.sqlite_version}"
    )


# ---------------------------------------------------------------- formatting helpers
def _fmt_num(v: float, kind: str) -> str:
    if kind == "rate":
        return f"{v:,.0f}"
    if kind == "ms":
        if v >= 100:
            return f"{v:,.0f}"
        if v >= 10:
            return f"{v:.1f}"
        if v >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    if kind == "bytes":
        return f"{v:,.0f}"
    if kind == "mb":
        return f"{v:,.1f}"
    return str(v)


COLUMNS = [
    # key, value field, kind, header
    ("append_single", "rate", "rate", "append, 1 conv (msg/s)"),
    ("append_many", "rate", "rate", "append, {convs}x{conv_len} (msg/s)"),
    ("read_full", "ms", "ms", "full read {single} (ms)"),
    ("read_recent", "ms", "ms", "recent 20 (ms)"),
    ("read_conv", "ms", "ms", "open+read a {conv_len}-msg conv (ms)"),
    ("bytes_single", "bytes_per_msg", "bytes", "bytes/msg, 1 conv"),
    ("bytes_many", "bytes_per_msg", "bytes", "bytes/msg, {convs}x{conv_len}"),
    ("mem", "growth_mb", "mb", "peak RSS growth reading {mem} (MB)"),
    ("search", "ms", "ms", "search (ms)"),
]


RAW_KEYS = {"sqlite3", "duckdb"}
SK_KEYS = {"sessionkit", "sessionkit-duckdb"}


def targets(results: list[dict]) -> list[str]:
    """sessionkit ahead of every peer on append rate and recent-window read at equal
    durability, and within 2x of raw sqlite3 on both."""
    by_key = {r["key"]: r for r in results}
    sk = by_key.get("sessionkit")

    def val(r, key, field):
        c = (r or {}).get("cells", {}).get(key) or {}
        return c.get(field)

    if sk is None or sk.get("error"):
        return ["- sessionkit (SQLite) has no figures in this run: nothing to check."]
    lines = []
    checks = [
        ("append_single", "rate", "append, 1 conversation", True),
        ("append_many", "rate", "append, many conversations", True),
        ("read_recent", "ms", "recent 20", False),
    ]
    for key, field, label, higher_better in checks:
        mine = val(sk, key, field)
        if mine is None:
            lines.append(f"- {label}: sessionkit has no figure")
            continue
        behind = []
        for r in results:
            if r["key"] in RAW_KEYS | SK_KEYS:
                continue
            theirs = val(r, key, field)
            if theirs is None:
                continue
            if (theirs > mine) if higher_better else (theirs < mine):
                behind.append(f"{r['name']} ({_fmt_num(theirs, 'rate' if higher_better else 'ms')})")
        verdict = "ahead of every peer" if not behind else "behind " + ", ".join(behind)
        raw = val(by_key.get("sqlite3"), key, field)
        if raw:
            ratio = mine / raw if higher_better else raw / mine
            verdict += f"; {ratio:.2f}x raw sqlite3 ({'within' if ratio >= 0.5 else 'NOT within'} 2x)"
        lines.append(f"- {label}: sessionkit {_fmt_num(mine, 'rate' if higher_better else 'ms')}, {verdict}")
    return lines + duckdb_targets(by_key)


def duckdb_targets(by_key: dict) -> list[str]:
    """The DuckDB engine against raw DuckDB (appends at least 0.8x its rate, a full path read
    within 2x its time) and its recent window within 2x of the SQLite engine's time; with
    rounds, each round's ratio too (the two stores of a round ran one right after the other)."""
    mine, raw, sqlite_sk = (by_key.get(k) for k in ("sessionkit-duckdb", "duckdb", "sessionkit"))
    if mine is None or mine.get("error"):
        return []
    lines = ["", "The DuckDB engine:"]
    checks = [
        ("append_single", "rate", "append, 1 conversation", raw, "raw DuckDB's rate", ">=", 0.8),
        ("append_many", "rate", "append, many conversations", raw, "raw DuckDB's rate", ">=", 0.8),
        ("read_full", "ms", "full path read", raw, "raw DuckDB's time", "<=", 2.0),
        ("read_recent", "ms", "recent 20", sqlite_sk, "the SQLite engine's time", "<=", 2.0),
    ]
    for key, field, label, other, other_name, sense, bound in checks:
        a = mine.get("cells", {}).get(key) or {}
        b = (other or {}).get("cells", {}).get(key) or {}
        if a.get(field) is None or b.get(field) is None or (other or {}).get("error"):
            lines.append(f"- {label}: no figure for both stores")
            continue
        ratio = judged = a[field] / b[field]
        per_round = ""
        if a.get("rounds") and b.get("rounds") and len(a["rounds"]) == len(b["rounds"]):
            # Judged on the median of the rounds' own ratios: each pairs two runs made
            # side by side, where a ratio of two medians may pair runs minutes apart.
            ratios = [x / y for x, y in zip(a["rounds"], b["rounds"])]
            judged = statistics.median(ratios)
            listed = ", ".join(f"{r:.2f}x" for r in ratios)
            per_round = f"; each round: {listed}, their median {judged:.2f}x"
        met = judged >= bound if sense == ">=" else judged <= bound
        lines.append(
            f"- {label}: {ratio:.2f}x {other_name} (medians){per_round}; target {sense} {bound:g}x: "
            f"{'met' if met else 'NOT met'}"
        )
    return lines


def render(results: list[dict], cfg: dict, args: argparse.Namespace, total_secs: float) -> str:
    base = next((r for r in results if r["key"] == "sessionkit"), None)

    def value(r: dict, key: str, field: str):
        c = r.get("cells", {}).get(key)
        if isinstance(c, dict) and field in c:
            return c[field]
        return None

    notes: list[str] = []

    def note(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    header = ["store"] + [h.format(**cfg) for _, _, _, h in COLUMNS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        row = [r["name"]]
        for key, field, kind, _ in COLUMNS:
            if r.get("error"):
                row.append("error" if key != COLUMNS[0][0] else f"error: {r['error']}")
                continue
            c = r.get("cells", {}).get(key)
            if c is None:
                row.append("not run")
                continue
            if "error" in c:
                row.append(f"error: {c['error']}"[:90])
                continue
            if "na" in c:
                row.append(c["na"])
                continue
            v = c[field]
            text = _fmt_num(v, kind)
            bv = value(base, key, field) if base and r is not base else None
            if bv:
                text += f" ({v / bv:.2f}x)"
            marks = ""
            if key in ("append_single", "bytes_single") and c.get("count", 0) < cfg["single"]:
                marks += note(
                    f"{r['name']}: measured over the first {c['count']:,} of {cfg['single']:,} "
                    f"messages (time cap); the 1-conversation rate and bytes/msg are for that size"
                )
            if key == "append_single" and "rate_first_tenth" in c and c.get("count", 0) < cfg["single"]:
                # a capped phase: say how the rate moved, since the full count was not reached
                if c["rate_last_tenth"] / c["rate_first_tenth"] < 0.7:
                    marks += note(
                        f"{r['name']}: appends slow down as the conversation grows: "
                        f"{c['rate_first_tenth']:,.0f} msg/s over the first tenth of the phase, "
                        f"{c['rate_last_tenth']:,.0f} msg/s over the last"
                    )
            if key in ("append_many", "bytes_many") and c.get("count", 0) < cfg["convs"] * cfg["conv_len"]:
                marks += note(
                    f"{r['name']}: measured over the first {c['count']:,} of "
                    f"{cfg['convs'] * cfg['conv_len']:,} messages (time cap)"
                )
            if key == "search" and r.get("search_kind"):
                marks += note(
                    f"{r['name']} search: {r['search_kind']}; first search (incl. any index build) "
                    f"{c['first_ms']:,.1f} ms; hits per query {c['hits']}"
                )
            if key == "read_recent" and r.get("recent_kind", "").startswith("no windowed"):
                marks += note(f"{r['name']}: {r['recent_kind']}")
            if key == "mem" and c.get("short"):
                marks += note(
                    f"{r['name']}: building the memory probe's conversation stopped at its "
                    f"{cfg['mem_budget']:.0f} s cap: it read {c['short']:,} messages, not {cfg['mem']:,}"
                )
            if key == "read_conv" and r.get("many_size", cfg["convs"]) < cfg["convs"]:
                marks += note(
                    f"{r['name']}: the store held {r['many_size']:,} conversations, not "
                    f"{cfg['convs']:,}, when it was read (append and bulk-load caps)"
                )
            if key in ("read_full", "read_recent", "search") and r.get("single_size", cfg["single"]) < cfg["single"]:
                marks += note(
                    f"{r['name']}: the long conversation held {r['single_size']:,} messages, "
                    f"not {cfg['single']:,}, when it was read (append and bulk-load caps)"
                )
            row.append(text + (" " + marks if marks else ""))
        lines.append("| " + " | ".join(row) + " |")

    out = [
        f"## Session stores side by side ({args.mode} mode)",
        "",
        f"Machine: {getattr(args, 'machine', None) or machine()}.",
        f"Command: `{args.command_line}`; total {total_secs / 60:.1f} min"
        + (
            f"; load average {args.load[0]:.1f} at the start, {args.load[1]:.1f} at the end."
            if getattr(args, "load", None)
            else "."
        ),
        "Ratios in brackets are this row divided by sessionkit (SQLite): above 1 is more "
        "msg/s, but also more ms, bytes and MB.",
        "",
        *lines,
        "",
    ]
    if notes:
        out += [f"{i + 1}. {n}" for i, n in enumerate(notes)] + [""]
    out += [
        "### Durability and versions",
        "",
        "| store | durability | journal on disk | versions |",
        "|---|---|---|---|",
    ]
    for r in results:
        vers = ", ".join(f"{k} {v}" for k, v in (r.get("versions") or {}).items())
        out.append(f"| {r['name']} | {r.get('durability', '?')} | {r.get('journal_mode') or 'n/a'} | {vers} |")
    extra = [r for r in results if r.get("other_notes")]
    if extra:
        out += ["", "### Notes per store", ""]
        for r in extra:
            for n in r["other_notes"]:
                out.append(f"- {r['name']}: {n}")
    out += ["", "### Targets of the peer comparison", ""] + targets(results)
    return "\n".join(out) + "\n"


#: The value each cell's rounds are listed by (in ``"rounds"``), for per-round ratios.
ROUND_FIELDS = {
    "append_single": "rate",
    "append_many": "rate",
    "read_full": "ms",
    "read_recent": "ms",
    "read_conv": "ms",
    "search": "ms",
}


def merge_rounds(runs: list[dict]) -> dict:
    """One result from several rounds of a store: each numeric field of a cell is its median
    over the rounds that measured it; ``rounds`` lists the round values of the cell's figure."""
    good = [r for r in runs if not r.get("error")]
    if len(runs) == 1 or not good:
        return runs[0]
    merged = dict(good[0], cells={})
    keys = {k for r in good for k in r.get("cells", {})}
    for key in sorted(keys):
        cells = [r["cells"][key] for r in good if key in r.get("cells", {})]
        ok = [c for c in cells if isinstance(c, dict) and "error" not in c and "na" not in c]
        if not ok:
            merged["cells"][key] = cells[0]
            continue
        cell = dict(ok[0])
        for field, first in ok[0].items():
            if isinstance(first, (int, float)) and not isinstance(first, bool):
                values = [c[field] for c in ok if isinstance(c.get(field), (int, float))]
                cell[field] = statistics.median(values)
        if key in ROUND_FIELDS:
            cell["rounds"] = [c.get(ROUND_FIELDS[key]) for c in ok]
        merged["cells"][key] = cell
    notes = [n for r in good for n in r.get("notes", [])]
    merged["notes"] = list(dict.fromkeys(notes)) + [f"median of {len(good)} rounds"]
    return merged


def parent_main(args: argparse.Namespace) -> None:
    cfg = dict(SIZES[args.mode])
    for k in ("single", "convs", "mem"):
        v = getattr(args, k.replace("-", "_"), None)
        if v:
            cfg[k] = v
    if args.append_budget:
        cfg["append_budget"] = args.append_budget
    from adapters import PEERS  # only the names, no third-party import

    peers = args.peers.split(",") if args.peers else DEFAULT_ORDER
    for p in peers:
        if p not in PEERS:
            sys.exit(f"unknown peer {p!r}; choose from {', '.join(DEFAULT_ORDER)}")
    work = Path(tempfile.mkdtemp(prefix="sk-peers-", dir=args.workdir))
    log = work / "children.log"
    # The children import sessionkit from this checkout (its root first on PYTHONPATH),
    # not from wherever the peers' virtualenv installed it; nothing else of the caller's
    # PYTHONPATH reaches them.
    env = dict(os.environ, PEERS_SYNC=args.durability, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    results = []
    print(f"work folder {work} (log: {log})", file=sys.stderr)
    rounds = max(1, args.rounds)
    timed: dict[str, list[dict]] = {p: [] for p in peers}
    # Rounds go through the stores in turn (a, b, c, a, b, c, ...): a store compared with
    # another ran beside it in every round, so a machine that slows down for a while
    # weighs on both, and each cell is the median over the rounds.
    for i in range(rounds):
        for p in peers:
            label = f"round {i + 1} of {rounds}" if rounds > 1 else "timed phases"
            print(f"{p}: {label} ...", file=sys.stderr, flush=True)
            folder = work / (p if rounds == 1 else f"{p}-r{i + 1}")
            timed[p].append(run_child("bench", p, folder, cfg, env, log))
            if not args.keep:
                shutil.rmtree(folder, ignore_errors=True)
    for p in peers:
        t = time.perf_counter()
        res = merge_rounds(timed[p])
        res.setdefault("key", p)
        res.setdefault("name", PEERS[p].name)
        res.setdefault("cells", {})
        res["other_notes"] = res.pop("notes", [])
        if not res.get("error") and not args.skip_memory:
            print(f"{p}: building {cfg['mem']:,} messages for the memory probe ...", file=sys.stderr, flush=True)
            build = run_child("membuild", p, work / f"{p}-mem", cfg, env, log)
            if build.get("error"):
                res["cells"]["mem"] = {"error": "build: " + build["error"]}
            else:
                mem = run_child("memread", p, work / f"{p}-mem", cfg, env, log)
                res["cells"]["mem"] = mem
                if not mem.get("error"):
                    if build["messages"] < cfg["mem"]:
                        res["cells"]["mem"]["short"] = build["messages"]
                    res["other_notes"].append(
                        f"memory probe: {build['messages']:,} messages ({mem['count']:,} records) "
                        f"built in {build['secs']:.0f} s "
                        f"({build['bytes'] / 1e6:,.0f} MB on disk), read in {mem['secs']:.1f} s"
                    )
        elif args.skip_memory:
            res["cells"]["mem"] = {"na": "skipped (--skip-memory)"}
        results.append(res)
        if not args.keep:
            for d in (work / p, work / f"{p}-mem"):
                shutil.rmtree(d, ignore_errors=True)
        print(f"{p}: done in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    total = time.perf_counter() - started
    args.load = (load_start, os.getloadavg()[0])
    table = render(results, cfg, args, total)
    print(table)
    if args.out:
        Path(args.out).write_text(table)
    if args.json:
        meta = {
            "mode": args.mode,
            "command_line": args.command_line,
            "total_secs": total,
            "load": args.load,
            "machine": machine(),
        }
        Path(args.json).write_text(json.dumps({"config": cfg, "meta": meta, "results": results}, indent=1, default=str))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        default="full",
        help="small sizes (1,000 / 50x20 / 2,000; 5 s caps), about two minutes",
    )
    ap.add_argument("--peers", help="comma-separated subset: " + ",".join(DEFAULT_ORDER))
    ap.add_argument("--single", type=int, help="messages in the one long conversation")
    ap.add_argument("--convs", type=int, help="number of 20-message conversations")
    ap.add_argument("--mem", type=int, help="messages in the memory-probe conversation (full: 100,000)")
    ap.add_argument("--append-budget", type=float, help="seconds cap of each append phase per store")
    ap.add_argument(
        "--durability",
        choices=["normal", "full"],
        default="normal",
        help="SQLite synchronous level for every SQLite store (default: normal, with WAL)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="timed phases this many times per store, the stores in turn; cells are medians",
    )
    ap.add_argument("--skip-memory", action="store_true", help="skip the memory probe")
    ap.add_argument("--workdir", help="where the stores are created (default: the system temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the stores and the log afterwards")
    ap.add_argument("--out", help="also write the Markdown to this file")
    ap.add_argument("--json", help="also write every measurement as JSON to this file")
    ap.add_argument("--render", metavar="JSON", help="print the table again from a --json file, run nothing")
    ap.add_argument("--child", choices=["bench", "membuild", "memread"], help=argparse.SUPPRESS)
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args)
        return
    if args.render:
        data = json.loads(Path(args.render).read_text())
        meta = data.get("meta", {})
        args.mode = meta.get("mode", "?")
        args.command_line = meta.get("command_line", "?")
        args.load = meta.get("load")
        args.machine = meta.get("machine")
        sys.stdout.write(render(data["results"], data["config"], args, meta.get("total_secs", 0.0)))
        return
    args.command_line = "python benchmarks/peers/run.py " + " ".join(sys.argv[1:])
    parent_main(args)


if __name__ == "__main__":
    main()
