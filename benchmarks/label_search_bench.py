"""Search filtered by branch labels against the same search filtered by message labels.

One SQLite store, one session: a chain of N messages, every one matching the query;
L labels of one tag on messages of the chain, and L labels of another tag on the
branches ending at the same messages. Printed: ``store.search(q, labels=<branch tag>)``
as a ratio of ``store.search(q, labels=<message tag>)``, measured in the same run (best
of ``--repeat``), with the hits of each.

    python benchmarks/label_search_bench.py                 # 3,000 messages, 1,000 labels of each kind
    python benchmarks/label_search_bench.py --n 10000 --labels 3000
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3_000, help="messages in the chain")
    parser.add_argument("--labels", type=int, default=1_000, help="labels of each kind")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each search; the best counts")
    args = parser.parse_args()
    import sessionkit as sk

    with tempfile.TemporaryDirectory() as tmp:
        store = sk.open_store(str(Path(tmp) / "labels.db"))
        session = store.session("s")
        session.append_many(
            {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"deploy step {i}"}]}
            for i in range(args.n)
        )
        picked = random.Random(7).sample(range(args.n), args.labels)
        for i in picked:
            session.add_label(f"m{i}", "msg")
            session.add_label(f"m{i}", "branch", target="branch")

        def best(tag: str) -> tuple[float, int]:
            times, hits = [], 0
            for _ in range(args.repeat):
                t = time.perf_counter()
                hits = len(store.search("deploy", limit=args.n, labels=tag))
                times.append(time.perf_counter() - t)
            return min(times), hits

        message_time, message_hits = best("msg")
        branch_time, branch_hits = best("branch")
        print(f"{args.n:,} messages, {args.labels:,} labels of each kind")
        print(f"search, message labels: {message_time * 1000:.1f} ms, {message_hits:,} hits")
        print(
            f"search, branch labels: {branch_time * 1000:.1f} ms, {branch_hits:,} hits"
            f" = {branch_time / message_time:.2f}x the message-label search"
        )
        store.close()


if __name__ == "__main__":
    main()
