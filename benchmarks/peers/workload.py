"""The benchmark workload: deterministic, realistic-looking conversation messages.

Every store receives the same logical messages, written in sessionkit's message shape
(docs/messages.md, the AI SDK's UIMessage) and converted by each adapter into the peer's own
record type.

- user messages carry ~200 bytes of text,
- assistant messages ~1 KB,
- every fifth message is an assistant turn with a tool call: ~250 bytes of text, a small
  JSON input and a ~2 KB JSON result.

Text is drawn from a fixed English vocabulary with a Zipf-like distribution from a fixed
seed, so full-text search has real words with realistic frequencies to find. Nothing here
reads the clock or the environment: the same arguments always give the same messages.
"""

from __future__ import annotations

import datetime as _dt
import json
import random
from functools import lru_cache

SEED = 20240611

# Words of a software-support / agent-tool domain, most frequent first. Function words
# come first so the text reads (roughly) like prose and the rarer domain words make
# selective search terms.
VOCAB = """
the to and a of is in that it for you this on with be can we will if as are not
your or at have from by was but so all an there do which what when they more one
then about need should would also use check other just first now like time how may
file run system data user change error test build request server service database
update config version value new version output input issue problem model step path
function call result return code line message table query index cache memory disk
network timeout retry deploy deployment deploying release branch commit merge review
log logs trace metric metrics alert dashboard latency throughput queue worker job task
schedule scheduler cluster node container image registry volume secret token account
permission role policy access key certificate domain proxy gateway endpoint route
handler middleware session cookie header payload response status client browser page
form field button event listener stream socket connection pool transaction lock
migration schema column row record backup restore snapshot replica primary shard
partition storage bucket object upload download archive compress encrypt decrypt hash
signature verify validate parse format encode decode serialize convert render template
report invoice payment order customer product price discount refund shipping address
flight booking reservation seat passenger baggage airport gateway cancellation itinerary
weather forecast temperature humidity sensor device battery firmware bluetooth signal
search ranking relevance embedding vector similarity summary summarize compaction
conversation history context window prompt instruction agent tool assistant reply
answer question explain example documentation tutorial guide reference manual note
warning failure success pending running completed cancelled interrupted blocked ready
quickly slowly carefully directly automatically manually recently usually probably
important critical minor major small large empty full missing duplicate invalid stale
morning evening yesterday tomorrow monday friday week month quarter year deadline
kubernetes postgres sqlite duckdb python javascript rust golang linux windows macos
terraform ansible docker nginx redis kafka spark airflow grafana prometheus jenkins
""".split()

# Deduplicate while keeping order (a few words are listed twice above).
_seen: set[str] = set()
VOCAB = [w for w in VOCAB if not (w in _seen or _seen.add(w))]

# Search terms: single words of middling frequency and two-word AND queries; all occur.
SEARCH_QUERIES = [
    "deployment",
    "migration",
    "timeout retry",
    "invoice refund",
    "kafka",
]

_STREAM_WORDS = 1 << 21  # 2M words: messages take windows of this stream


@lru_cache(maxsize=1)
def _stream() -> list[str]:
    rng = random.Random(SEED)
    weights = [1.0 / (rank + 1) ** 0.85 for rank in range(len(VOCAB))]
    return rng.choices(VOCAB, weights=weights, k=_STREAM_WORDS)


def _words(rng: random.Random, target_bytes: int) -> str:
    """Prose of about target_bytes: a window of the word stream, cut into sentences."""
    stream = _stream()
    start = rng.randrange(0, _STREAM_WORDS - 2000)
    out: list[str] = []
    size = 0
    i = start
    sentence_left = rng.randint(6, 16)
    capital = True
    while size < target_bytes:
        w = stream[i]
        i += 1
        if capital:
            w = w.capitalize()
            capital = False
        sentence_left -= 1
        if sentence_left == 0:
            w += "."
            sentence_left = rng.randint(6, 16)
            capital = True
        out.append(w)
        size += len(w) + 1
    text = " ".join(out)
    if not text.endswith("."):
        text += "."
    return text


def message(conversation: int, index: int) -> dict:
    """Message number `index` (0-based) of conversation `conversation`."""
    rng = random.Random((SEED * 1_000_003 + conversation) * 1_000_003 + index)
    mid = f"c{conversation}-m{index:06d}"
    # A fixed, increasing creation time so every store keeps the same timestamps.
    ms = 1_700_000_000_000 + conversation * 10_000_000 + index * 1_000
    secs, milli = divmod(ms, 1000)
    created = _dt.datetime.fromtimestamp(secs, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{milli:03d}Z"
    if index % 5 == 4:
        call_id = f"call_{conversation}_{index}"
        results = [
            {"title": _words(rng, 40), "snippet": _words(rng, 300), "score": round(rng.random(), 3)} for _ in range(5)
        ]
        return {
            "id": mid,
            "role": "assistant",
            "parts": [
                {"type": "text", "text": _words(rng, 250)},
                {
                    "type": "tool-search_docs",
                    "toolCallId": call_id,
                    "state": "output-available",
                    "input": {"query": _words(rng, 30), "limit": 5},
                    "output": {"results": results},
                },
            ],
            "createdAt": created,
        }
    role = "user" if index % 2 == 0 else "assistant"
    size = 200 if role == "user" else 1000
    return {
        "id": mid,
        "role": role,
        "parts": [{"type": "text", "text": _words(rng, size)}],
        "createdAt": created,
    }


def conversation(conversation_id: int, length: int, start: int = 0) -> list[dict]:
    return [message(conversation_id, i) for i in range(start, length)]


def text_of(msg: dict) -> str:
    """The searchable text of a message: its text parts (as sessionkit indexes them)."""
    return "\n".join(p["text"] for p in msg["parts"] if p.get("type") == "text")


def tool_part(msg: dict) -> dict | None:
    for p in msg["parts"]:
        if p["type"].startswith("tool-"):
            return p
    return None


def json_size(msg: dict) -> int:
    return len(json.dumps(msg, separators=(",", ":")).encode())


if __name__ == "__main__":  # a look at the sizes
    msgs = conversation(0, 1000)
    by_kind: dict[str, list[int]] = {}
    for m in msgs:
        kind = "tool" if tool_part(m) else m["role"]
        by_kind.setdefault(kind, []).append(json_size(m))
    for kind, sizes in by_kind.items():
        print(f"{kind:10s} n={len(sizes):4d} mean JSON bytes={sum(sizes) / len(sizes):7.0f}")
    print(json.dumps(msgs[4], indent=1)[:1500])
