"""What the conformance suite's modules share: message builders and checks."""

from __future__ import annotations

import base64
import hashlib
import re

import sessionkit as sk

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def msg(mid: str, text: str = "", role: str = "user", **extra) -> dict:
    """A text message."""
    m = {"id": mid, "role": role, "parts": [{"type": "text", "text": text or f"text of {mid}"}]}
    m.update(extra)
    return m


def chain(session, n: int, prefix: str = "m", text=None) -> list[str]:
    ids = []
    for i in range(n):
        mid = f"{prefix}{i}"
        role = "user" if i % 2 == 0 else "assistant"
        session.append(msg(mid, text(i) if text else f"message number {i}", role))
        ids.append(mid)
    return ids


def ids_of(messages) -> list[str]:
    return [m["id"] for m in messages]


def strip_created(m: dict) -> dict:
    return {k: v for k, v in m.items() if k != "createdAt"}


def snapshot_store(store, session_ids=("", "s", "t")) -> dict:
    """Everything observable about some sessions, to check that a failed write changed nothing."""
    out = {}
    for sid in session_ids:
        s = store.session(sid)
        out[sid] = {
            "len": len(s),
            "history": s.get_history(compacted=False),
            "compactions": s.compactions(),
        }
    stats = store.stats()
    out["stats"] = {k: stats[k] for k in ("sessions", "messages", "compactions", "blobs")}
    return out


def b64_payload(n: int, seed: str = "x") -> tuple[bytes, str]:
    raw = hashlib.sha256(seed.encode()).digest() * (n // 32 + 1)
    raw = raw[:n]
    return raw, base64.b64encode(raw).decode("ascii")


def summary_fn(from_id, to_id, summary="SUMMARY"):
    def fn(messages, ctx):
        return sk.CompactionResult(from_id, to_id, summary)

    return fn
