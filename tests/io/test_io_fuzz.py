"""Fuzzing every importer: whatever the file holds, only MalformedInput comes out, and the
store holds exactly what the error says was stored.

Seeds are small valid files of each format (real OASST trees, HH pairs and tau-bench
tool calls from tests/data, a sessionkit export with branches and a compaction, OpenAI
chats as JSON lines, a JSON array and a ``{"messages": [...]}`` document, OASST flat
messages). Two sources of mutations:

* a deterministic corpus: the file cut at many places; bytes replaced by ones that break
  JSON or UTF-8; invalid UTF-8 inserted; a span deleted; lines dropped, doubled, swapped;
  the file gzipped then cut short, damaged or given a bad checksum; and at every level of
  a record, values replaced by every JSON type, ``NaN``/``Infinity``, ``1e400``, a
  5,000-digit number, lone surrogates and nesting 200 and 50,000 deep;
* hypothesis: random byte edits (replace, insert, delete, truncate, optionally gzipped),
  derandomized so a run is reproducible.

For each mutated file the importer either succeeds (the store reads back, what the importer
returns is what the store holds -- the chat's messages in order, or each session once --, and
importing the file again adds nothing and returns the same) or raises ``sk.io.MalformedInput``
naming the file and a line or record; then the store must hold exactly the records the error counts
(``MalformedInput.imported``), each whole: it equals a fresh store into which the first
``imported`` records of the same file were imported, and importing the original file
afterwards completes it. Any other exception fails the test.
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from pathlib import Path

import pytest
from helpers import chat_tool_call, import_file, result_ids

import sessionkit as sk

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

IMPORTERS = ("openai", "oasst", "hh", "jsonl")
MARK = "@@MARK@@"


# ---------------------------------------------------------------------------
# Seeds


CHAT = [
    {"role": "system", "content": "You are a travel agent."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Book SEA"},
            {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
        ],
    },
    {"role": "assistant", "content": None, "tool_calls": [chat_tool_call("c1", "search", {"to": "SEA", "n": 2})]},
    {"role": "tool", "tool_call_id": "c1", "content": '["HAT069"]'},
    {"role": "assistant", "content": "Found it.", "tool_calls": [chat_tool_call("c1", "book", {"f": "HAT069"})]},
    {"role": "tool", "tool_call_id": "c1", "content": "booked"},
    {"role": "assistant", "content": "Done — café ☕.", "reasoning_content": "easy", "name": "agent"},
]


def _jsonl(records) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


def _flat(trees) -> list[dict]:
    rows = []
    for tree in trees:
        stack = [(tree["prompt"], None)]
        while stack:
            node, parent = stack.pop()
            row = {k: v for k, v in node.items() if k != "replies"}
            row["parent_id"], row["message_tree_id"] = parent, tree["message_tree_id"]
            rows.append(row)
            stack.extend((r, node["message_id"]) for r in reversed(node["replies"]))
    return rows


def _export(tmp: Path) -> bytes:
    with sk.open_store(":memory:") as store:
        s = store.session("a")
        s.append(
            {
                "id": "r",
                "role": "user",
                "parts": [{"type": "text", "text": "root"}],
                "createdAt": "2024-01-01T00:00:00.000Z",
            }
        )
        for i in range(4):
            s.append(
                {
                    "id": f"m{i}",
                    "role": "assistant" if i % 2 else "user",
                    "parts": [{"type": "text", "text": f"turn {i} ünï"}],
                    "metadata": {"n": i},
                }
            )
        s.append({"id": "alt", "role": "assistant", "parts": [{"type": "text", "text": "branch"}]}, parent_id="m1")
        s.import_compaction(
            sk.store.Compaction(
                id="c1",
                from_id="r",
                to_id="m1",
                summary="the start",
                created_at="2024-01-02T00:00:00.000Z",
                tokens_before=9,
                tokens_after=3,
            )
        )
        store.session("b").append({"id": "x", "role": "user", "parts": [{"type": "text", "text": "other"}]})
        path = tmp / "export.jsonl"
        sk.io.export_jsonl(store, path)
        return path.read_bytes()


@pytest.fixture(scope="session")
def seeds(oasst_trees, hh_records, tau_records, tmp_path_factory) -> dict[str, tuple[str, bytes]]:
    """name -> (importer, file bytes)."""
    tmp = tmp_path_factory.mktemp("seeds")
    tau = next(r["traj"] for r in tau_records if len(r["traj"]) < 16)
    return {
        "openai-jsonl": ("openai", _jsonl(CHAT)),
        "openai-array": ("openai", json.dumps(CHAT, indent=1, ensure_ascii=False).encode("utf-8")),
        "openai-doc": ("openai", json.dumps({"model": "m", "messages": CHAT[:4]}, indent=1).encode("utf-8")),
        "openai-tau": ("openai", _jsonl(tau)),
        "oasst-trees": ("oasst", _jsonl(oasst_trees[:3])),
        "oasst-flat": ("oasst", _jsonl(_flat(oasst_trees[3:5]))),
        "hh": ("hh", _jsonl(hh_records[:4])),
        "jsonl": ("jsonl", _export(tmp)),
    }


# ---------------------------------------------------------------------------
# Mutations


def _deep(n: int) -> str:
    return "[" * n + "]" * n


RAW_VALUES = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e999",
    "1" * 5000,
    '"\\ud800"',
    '"a\\udfffb"',
    '{"\\udc00": 1}',
    _deep(200),
    _deep(50_000),
]
TYPED_VALUES = [None, 0, -1, 2**70, 1.5, "", "x", [], {}, True, [None], {"k": None}]


def _paths(value, limit: int, rng: random.Random) -> list[tuple]:
    """A sample of the JSON paths in ``value`` (every level is represented)."""
    out, stack = [], [(value, ())]
    while stack:
        node, path = stack.pop()
        if path:
            out.append(path)
        if isinstance(node, dict):
            stack.extend((v, path + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, path + (i,)) for i, v in enumerate(node))
    if len(out) <= limit:
        return out
    by_depth: dict[int, list] = {}
    for p in out:
        by_depth.setdefault(len(p), []).append(p)
    picked = [rng.choice(ps) for ps in by_depth.values()]  # each level at least once
    rest = [p for p in out if p not in picked]
    return picked + rng.sample(rest, max(0, limit - len(picked)))


def _replace(value, path: tuple, new):
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return copy


def _dump(value, pretty: bool) -> str:
    return json.dumps(value, indent=1 if pretty else None, ensure_ascii=False)


def _json_mutations(
    data: bytes, rng: random.Random, paths_per_record: int, max_records: int
) -> list[tuple[str, bytes]]:
    text = data.decode("utf-8")
    out = []
    try:  # one document (a JSON array, a {"messages"} object)
        docs = [(None, json.loads(text))]
        pretty = True
    except ValueError:
        lines = text.splitlines()
        docs = [(i, json.loads(line)) for i, line in enumerate(lines) if line.strip()]
        pretty = False
    if len(docs) > max_records:
        docs = sorted(rng.sample(docs, max_records), key=lambda d: d[0])
    for index, doc in docs:
        for path in _paths(doc, paths_per_record, rng):
            for new in rng.sample(TYPED_VALUES, 4) + rng.sample(RAW_VALUES, 3):
                if isinstance(new, str) and new in RAW_VALUES:
                    body = _dump(_replace(doc, path, MARK), pretty).replace(json.dumps(MARK), new)
                else:
                    body = _dump(_replace(doc, path, new), pretty)
                if index is None:
                    mutated = body
                else:
                    lines = text.splitlines()
                    lines[index] = body
                    mutated = "\n".join(lines) + "\n"
                out.append((f"json:{index}:{'/'.join(map(str, path))}={str(new)[:20]}", mutated.encode("utf-8")))
    return out


BREAKERS = [b"\xff", b"\x80", b"\x00", b'"', b"{", b"]", b"\\", b"\n", b",", b"\xed\xa0\x80", b"\xc3"]


def _byte_mutations(data: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    out = []
    size = len(data)
    for k in range(1, n + 1):  # cut at evenly spread places, and near the ends
        at = size * k // (n + 1)
        out.append((f"cut:{at}", data[:at]))
    out += [("cut:1", data[:1]), ("cut:-1", data[:-1]), ("cut:-2", data[:-2]), ("empty", b"")]
    for i in range(n):
        at = rng.randrange(size)
        b = BREAKERS[i % len(BREAKERS)]
        out.append((f"set:{at}={b!r}", data[:at] + b + data[at + 1 :]))
        at = rng.randrange(size)
        out.append((f"insert:{at}={b!r}", data[:at] + b + data[at:]))
    for _ in range(n // 2):
        at = rng.randrange(size)
        out.append((f"delete:{at}", data[:at] + data[at + rng.randint(1, 40) :]))
    lines = data.split(b"\n")
    if len(lines) > 2:
        for _ in range(3):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            out.append((f"drop-line:{i}", b"\n".join(lines[:i] + lines[i + 1 :])))
            out.append((f"double-line:{i}", b"\n".join(lines[: i + 1] + lines[i:])))
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            out.append((f"swap-lines:{i},{j}", b"\n".join(swapped)))
    out.append(("bom", b"\xef\xbb\xbf" + data))
    out.append(("crlf", data.replace(b"\n", b"\r\n")))
    return out


def _gzip_mutations(data: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    gz = gzip.compress(data, mtime=0)
    out = [("gzip", gz)]
    for k in range(1, n + 1):
        at = len(gz) * k // (n + 1)
        out.append((f"gzip-cut:{at}", gz[:at]))
    for _ in range(n // 2):
        at = rng.randrange(10, len(gz) - 8)
        out.append((f"gzip-flip:{at}", gz[:at] + bytes([gz[at] ^ 0x55]) + gz[at + 1 :]))
    out.append(("gzip-crc", gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:]))
    out.append(("gzip-length", gz[:-4] + bytes(4)))
    out.append(("gzip-trailing-garbage", gz + b"garbage"))
    out.append(("gzip-twice", gzip.compress(gz)))
    return out


def corpus(name: str, data: bytes, *, scale: int) -> list[tuple[str, bytes]]:
    """The deterministic mutations of one seed; ``scale`` sets how many of each kind."""
    rng = random.Random(zlib.crc32(name.encode()))
    return (
        _byte_mutations(data, rng, 6 * scale)
        + _gzip_mutations(data, rng, 3 * scale)
        + _json_mutations(data, rng, 3 * scale, 2 + scale)
    )


# ---------------------------------------------------------------------------
# Running an import and checking the store


def snapshot(store) -> dict:
    """Every session's messages (parent, role, parts, metadata; not the import time) and compactions."""
    out = {}
    for info in store.list_sessions():
        session = store.session(info.id)
        nodes = session.nodes()
        messages = session.get_many([n.id for n in nodes])
        assert len(messages) == len(nodes), "a message of the tree does not read back"
        ids = {n.id for n in nodes}
        assert all(n.parent_id is None or n.parent_id in ids for n in nodes), "a parent is missing"
        tree = {}
        for n in nodes:
            m = messages[n.id]
            tree[n.id] = (
                n.parent_id,
                m["role"],
                json.dumps(m["parts"], sort_keys=True),
                json.dumps(m.get("metadata"), sort_keys=True),
            )
        comps = tuple(sorted((c.id, c.from_id, c.to_id, c.summary) for c in session.compactions()))
        out[info.id] = (tree, comps)
    return out


def _text_lines(data: bytes) -> list[bytes]:
    """The non-blank lines of a file as an importer reads them (gzip undone)."""
    if data[:2] == b"\x1f\x8b":  # as much as inflates, as the importer read it (the header is
        inflate, out = zlib.decompressobj(wbits=-15), []  # 10 bytes: gzip.compress(mtime=0))
        try:
            for byte in range(10, len(data)):
                out.append(inflate.decompress(data[byte : byte + 1]))
        except zlib.error:
            pass
        data = b"".join(out)
    return [line for line in data.split(b"\n") if line.strip(b" \t\r\n")]


def _line_number(where: str) -> int | None:
    import re

    m = re.search(r"line (\d+)", where or "")
    return int(m.group(1)) if m else None


def check_case(kind: str, case: str, data: bytes, seed: bytes, open_store, folder: Path) -> str:
    """Import ``data`` with the ``kind`` importer and check the outcome; returns "ok" or "error"."""
    path = folder / "input.jsonl"
    path.write_bytes(data)
    store = open_store()
    try:
        try:
            result = import_file(kind, store, path)
        except sk.io.MalformedInput as exc:
            _check_failure(kind, case, data, seed, exc, store, open_store, folder, path)
            return "error"
        except BaseException as exc:  # the point of the test
            raise AssertionError(f"{kind} {case}: {type(exc).__name__}: {exc}") from exc
        _check_result(kind, case, result, store, fresh=True)
        before = snapshot(store)
        stats = store.stats()
        again = import_file(kind, store, path)  # idempotent
        assert store.stats()["messages"] == stats["messages"], f"{kind} {case}: importing again added messages"
        assert snapshot(store) == before
        _check_result(kind, case, again, store, fresh=False)
        assert result_ids(again) == result_ids(result), f"{kind} {case}: importing again reports other records"
        return "ok"
    finally:
        store.close()


def _check_result(kind: str, case: str, result, store, fresh: bool) -> None:
    """What a successful import returns is what the store holds: the OpenAI importer one result
    per message of the chat, in chain order (each inserted on a fresh store, none the second
    time); the others each session the file wrote to, once."""
    if kind == "openai":
        session = store.session("chat")
        chain = [m["id"] for m in session.get_history(compacted=False)] if len(session) else []
        assert result.ids == chain and len(result) == len(session), f"{kind} {case}: results are not the chain"
        assert [r.inserted for r in result] == [fresh] * len(result), f"{kind} {case}: wrong inserted flags"
        assert all(r.message == session.get(r.message["id"]) for r in result), f"{kind} {case}"
        return
    held = sorted(info.id for info in store.list_sessions())
    ids = result_ids(result)
    assert len(ids) == len(set(ids)), f"{kind} {case}: a session returned twice"
    assert sorted(ids) == held, f"{kind} {case}: returned sessions {ids} but the store holds {held}"
    assert all(s.store is store for s in result), f"{kind} {case}"


def _check_failure(kind, case, data, seed, exc, store, open_store, folder, path) -> None:
    assert exc.source == str(path), (case, exc.source)
    assert isinstance(exc.where, str) or exc.where is None, case
    assert isinstance(exc.imported, int) and exc.imported >= 0, (case, exc.imported)
    text = str(exc)
    assert text.startswith(str(path)) and exc.problem in text, (case, text)
    got = snapshot(store)
    if kind == "openai":
        # one chain, the first `imported` messages of the chat
        ((tree, _),) = got.values() if got else [({}, ())]
        assert len(tree) == exc.imported, (case, len(tree), exc.imported)
        roots = [mid for mid, (parent, *_) in tree.items() if parent is None]
        assert len(roots) == (1 if tree else 0), case
        assert (store.session("chat").path_length() if tree else 0) == len(tree), case
    elif case.startswith("oasst-flat"):
        assert len(got) == exc.imported, (case, len(got), exc.imported)
        for tree, _ in got.values():  # whole trees: one root
            assert sum(parent is None for parent, *_ in tree.values()) == 1, case
    else:
        # exactly the first `imported` records (lines) of the file, each whole
        lines = _text_lines(data)
        failed_at = _line_number(exc.where)
        prefix = lines[: exc.imported]
        other = folder / "prefix.jsonl"
        other.write_bytes(b"\n".join(prefix) + b"\n" if prefix else b"")
        fresh = open_store()
        try:
            if prefix:
                import_file(kind, fresh, other)
            assert got == snapshot(fresh), (case, "the store holds more or less than the records counted")
        finally:
            fresh.close()
        if failed_at is not None and data[:2] != b"\x1f\x8b":
            numbered = [i + 1 for i, line in enumerate(data.split(b"\n")) if line.strip(b" \t\r\n")]
            assert len(numbered) <= exc.imported or numbered[exc.imported] >= failed_at, (
                case,
                "records stored after the line at fault",
            )
            assert exc.imported == 0 or numbered[exc.imported - 1] < failed_at, case
    # importing the original file completes the import
    path.write_bytes(seed)
    import_file(kind, store, path)
    clean = open_store()
    try:
        import_file(kind, clean, path)
        want, have = snapshot(clean), snapshot(store)
        for sid, (tree, comps) in want.items():
            assert sid in have and set(tree) <= set(have[sid][0]), (case, sid)
            assert set(comps) <= set(have[sid][1]), (case, sid)
    finally:
        clean.close()


# ---------------------------------------------------------------------------
# The tests


def _opener(new_store, engine: str):
    return lambda: new_store(engine, memory=True)


SEED_NAMES = ["openai-jsonl", "openai-array", "openai-doc", "openai-tau", "oasst-trees", "oasst-flat", "hh", "jsonl"]


@pytest.mark.parametrize("name", SEED_NAMES)
def test_seeds_import_cleanly(name, seeds, new_store, tmp_path):
    kind, data = seeds[name]
    assert check_case(kind, name, data, data, _opener(new_store, "sqlite"), tmp_path) == "ok"


@pytest.mark.slow
@pytest.mark.parametrize("engine_name", ["duckdb", "postgresql"])
@pytest.mark.parametrize("name", SEED_NAMES)
def test_mutation_corpus_other_engines(engine_name, name, seeds, new_store, tmp_path):
    """Part of the corpus (every 14th case) on DuckDB and PostgreSQL, where rollback differs."""
    kind, seed = seeds[name]
    cases = corpus(name, seed, scale=1)[::14]
    for case, data in cases:
        check_case(kind, f"{name} {case}", data, seed, _opener(new_store, engine_name), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", SEED_NAMES)
def test_mutation_corpus_large(name, seeds, new_store, tmp_path):
    """The deterministic corpus on SQLite: only MalformedInput, and the store holds what it says."""
    kind, seed = seeds[name]
    cases = corpus(name, seed, scale=3)
    outcomes = {"ok": 0, "error": 0}
    for case, data in cases:
        outcomes[check_case(kind, f"{name} {case}", data, seed, _opener(new_store, "sqlite"), tmp_path)] += 1
    assert outcomes["error"] > len(cases) // 4  # the corpus does break things
    print(f"{name}: {len(cases)} cases, {outcomes}")


@st.composite
def _edits(draw):
    name = draw(st.sampled_from(SEED_NAMES))
    ops = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["set", "insert", "delete", "truncate"]),
                st.floats(0, 1),
                st.binary(min_size=1, max_size=6),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return name, ops, draw(st.booleans())


def _apply(data: bytes, ops, gz: bool) -> bytes:
    for op, where, payload in ops:
        at = int(where * len(data))
        if op == "set":
            data = data[:at] + payload + data[at + len(payload) :]
        elif op == "insert":
            data = data[:at] + payload + data[at:]
        elif op == "delete":
            data = data[:at] + data[at + len(payload) :]
        else:
            data = data[:at]
    return gzip.compress(data, mtime=0) if gz else data


def _fuzz(seeds, new_store, tmp_path_factory, edit) -> None:
    name, ops, gz = edit
    kind, seed = seeds[name]
    folder = tmp_path_factory.mktemp("fuzz", numbered=True)
    check_case(kind, f"{name} {ops} gz={gz}", _apply(seed, ops, gz), seed, _opener(new_store, "sqlite"), folder)


_SETTINGS = dict(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# a quick pass on every seed; test_random_byte_edits_many is the long fuzzing run
@settings(max_examples=100, **_SETTINGS)
@given(edit=_edits())
@pytest.mark.slow
def test_random_byte_edits(seeds, new_store, tmp_path_factory, edit):
    _fuzz(seeds, new_store, tmp_path_factory, edit)


@pytest.mark.slow
@settings(max_examples=400, **_SETTINGS)
@given(edit=_edits())
def test_random_byte_edits_many(seeds, new_store, tmp_path_factory, edit):
    _fuzz(seeds, new_store, tmp_path_factory, edit)
