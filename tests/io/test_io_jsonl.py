"""sessionkit JSONL: trees, compactions, metadata and write order survive a round trip."""

from __future__ import annotations

import base64
import json

import pytest
from helpers import msg

import sessionkit as sk


def _lines(path):
    """Every line of an export but the header (which carries the export time)."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows[0]["format"] == "sessionkit" and rows[0]["version"] == sk.io.jsonl.FORMAT_VERSION == 5
    return rows[1:]


def _build_compacted(store):
    """A session with branches, metadata, an out-of-row payload and two compactions."""
    s = store.session("compacted")
    payload = base64.b64encode(bytes(range(256)) * 20).decode()
    s.append(msg("u1", "first question " * 20, "user", metadata={"tag": "a"}))
    s.append(msg("a1", "first answer " * 20, "assistant"))
    s.append(
        {
            "id": "u2",
            "role": "user",
            "parts": [
                {"type": "text", "text": "look at this"},
                {"type": "file", "mediaType": "application/octet-stream", "data": payload},
            ],
        }
    )
    s.append(msg("a2", "second answer " * 20, "assistant"))
    s.append(msg("u3", "third", "user"))
    s.append(msg("alt", "a sibling of u2", "user"), parent_id="a1")
    s.append(msg("alt-a", "answer on the other branch", "assistant"))
    plan = iter([("u1", "a2", "summary one"), ("compaction:", "u3", "summary two")])

    def fn(messages, ctx):
        frm, to, text = next(plan)
        if frm == "compaction:":
            frm = messages[0]["id"]
        return sk.CompactionResult(frm, to, text)

    s.on_compaction(fn)
    c1 = s.compact(leaf_id="u3")
    c2 = s.compact(leaf_id="u3")
    assert c1 is not None and c2 is not None
    return s


def test_round_trip_of_the_real_data(loaded, tmp_path, make_store):
    src = loaded["store"]
    engine = loaded["engine"]
    first = tmp_path / "all.jsonl.gz"
    picked = None
    if engine == "duckdb":  # see DUCKDB_SAMPLE in conftest.py: a selection of sessions there
        picked = [s.session_id for s in loaded["oasst"][:15] + loaded["tau"][:10] + loaded["hh"][:20]]
    counts = sk.io.export_jsonl(src, first, session_ids=picked)
    infos = [i for i in src.list_sessions() if picked is None or i.id in picked]
    assert counts["messages"] == sum(i.message_count for i in infos)
    if picked is None:
        assert counts["messages"] == src.stats()["messages"]
    assert counts["sessions"] == len(infos)
    dst = make_store(engine, tmp_path, "copy")
    sessions = sk.io.import_jsonl(dst, first)
    assert len(sessions) == counts["sessions"]
    second = tmp_path / "again.jsonl"
    sk.io.export_jsonl(dst, second)
    # same messages, parents, creation times and write order, line for line
    assert _lines(second) == _lines(first)
    assert [(i.id, i.message_count, i.created_at, i.updated_at) for i in dst.list_sessions()] == [
        (i.id, i.message_count, i.created_at, i.updated_at) for i in infos
    ]
    for s in loaded["oasst"][:10] + loaded["tau"][:10] + loaded["hh"][:10]:
        copy = dst.session(s.session_id)
        assert copy.latest_leaf() == s.latest_leaf()
        assert copy.get_history() == s.get_history()
    # importing again adds nothing
    sk.io.import_jsonl(dst, first)
    assert dst.stats()["messages"] == counts["messages"]


def test_compactions_and_payloads_survive(engine, make_store, tmp_path):
    src = make_store(engine)
    s = _build_compacted(src)
    path = tmp_path / "c.jsonl"
    counts = sk.io.export_jsonl(s, path)
    assert counts == {
        "sessions": 1,
        "messages": 7,
        "compactions": 2,
        "labels": 0,
        "runs": 0,
        "events": 0,
        "embeddings": 0,
        "datasets": 0,
    }
    targets = ["sqlite", "duckdb"]
    for target in targets:  # also across engines
        dst = make_store(target)
        (copy,) = sk.io.import_jsonl(dst, path)
        assert copy.compactions() == s.compactions()
        for leaf in ("u3", "alt-a"):
            assert copy.get_history(leaf_id=leaf) == s.get_history(leaf_id=leaf)
            assert copy.get_history(leaf_id=leaf, compacted=False) == s.get_history(leaf_id=leaf, compacted=False)
        assert copy.latest_leaf()["id"] == "alt-a"
        assert copy.get("u2") == s.get("u2")
        assert dst.stats()["blobs"] == 1
        sk.io.import_jsonl(dst, path)  # idempotent, compactions included
        assert len(copy.compactions()) == 2 and len(copy) == 7


def test_store_export_keeps_cross_session_write_order(store, tmp_path, make_store, engine):
    a, b = store.session("a"), store.session("b")
    a.append(msg("1", "a1", "user"))
    b.append(msg("1", "b1", "user"))
    a.append(msg("2", "a2", "assistant"))
    path = tmp_path / "order.jsonl"
    sk.io.export_jsonl(store, path)
    assert [(r["session_id"], r["message"]["id"]) for r in _lines(path)] == [("a", "1"), ("b", "1"), ("a", "2")]
    dst = make_store(engine)
    sk.io.import_jsonl(dst, path)
    assert [i.id for i in dst.list_sessions()] == [i.id for i in store.list_sessions()] == ["a", "b"]


def test_session_export_holds_only_that_session(store, tmp_path):
    store.session("a").append(msg("1", "a", "user"))
    store.session("b").append(msg("1", "b", "user"))
    path = tmp_path / "one.jsonl"
    assert sk.io.export_jsonl(store.session("b"), path)["messages"] == 1
    assert {r["session_id"] for r in _lines(path)} == {"b"}


@pytest.mark.parametrize(
    "lines, where, words",
    [
        (['{"format": "sessionkit", "version": 99}'], "line 1", "newer than this sessionkit reads"),
        (
            ['{"type": "message", "session_id": "s", "parent_id": null, "message": {"id": "m", "parts": []}}'],
            "line 1",
            "'role' is missing",
        ),
        (
            [
                '{"type": "message", "session_id": "s", "parent_id": null, "message": {"id": "m", "role": "user", "parts": []}}',  # noqa: E501
                '{"type": "message", "session_id": "s", "parent_id": "ghost", "message": {"id": "n", "role": "user", "parts": []}}',  # noqa: E501
            ],
            "line 2",
            "parent 'ghost'",
        ),
        (['{"type": "snapshot"}'], "line 1", "unknown line type"),
        (['{"type": {}}'], "line 1", "the record's type is a dict, not a string"),
        (['{"type": ["message"]}'], "line 1", "the record's type is a list, not a string"),
        (['{"type": "compaction", "session_id": "s", "compaction": {"id": "c"}}'], "line 1", "invalid compaction"),
        (
            [
                '{"type": "message", "session_id": "s", "parent_id": null, "message": {"id": "m", "role": "user", "parts": []}}',  # noqa: E501
                '{"type": "compaction", "session_id": "s", "compaction": {"id": "c", "from_id": "m", "to_id": "zz", '
                '"summary": "x", "created_at": "2024-01-01T00:00:00.000Z", "tokens_before": 1, "tokens_after": 1}}',
            ],
            "line 2",
            "'zz' is not in session",
        ),
        (["not json"], "line 1", "not valid JSON"),
        (['{"type": "label", "session_id": "s"}'], "line 1", "needs 'session_id' and a 'label' object"),
        (
            [
                '{"type": "message", "session_id": "s", "parent_id": null, "message": {"id": "m", "role": "user", "parts": []}}',  # noqa: E501
                '{"type": "label", "session_id": "s", "label": {"id": "l1", "message_id": "zz", "tag": "x"}}',
            ],
            "line 2",
            "'zz' is not in session",
        ),
        (
            [
                '{"type": "message", "session_id": "s", "parent_id": null, "message": {"id": "m", "role": "user", "parts": []}}',  # noqa: E501
                '{"type": "label", "session_id": "s", "label": {"id": "l1", "message_id": "m", "tag": ""}}',
            ],
            "line 2",
            "invalid label",
        ),
        (['{"type": "run", "session_id": "s"}'], "line 1", "run line needs 'session_id' and a 'run' object"),
        (
            ['{"type": "run", "session_id": "s", "run": {"run_id": "r", "status": "ok", "started_at": "soon"}}'],
            "line 1",
            "invalid run: run 'r': started_at",
        ),
        (['{"type": "event", "session_id": "s", "event": {"kind": "x"}}'], "line 1", "invalid event"),
        (
            [
                '{"type": "event", "session_id": "s", "event": {"seq": 0, "kind": "x"}}',
                '{"type": "event", "session_id": "s", "event": {"seq": 0, "kind": "y"}}',
            ],
            "line 2",
            "holds another event at seq 0",
        ),
        (
            [
                '{"type": "embedding", "session_id": "s", "embedding": '
                '{"message_id": "zz", "model": "m", "vector": [1]}}'
            ],
            "line 1",
            "'zz', which is not in session 's'",
        ),
    ],
)
def test_malformed_lines_are_named(store, tmp_path, lines, where, words):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_jsonl(store, path)
    assert info.value.where == where
    assert words in str(info.value)


def test_labels_survive_a_round_trip_with_their_ids(engine, make_store, tmp_path):
    src = make_store(engine)
    s = _build_compacted(src)
    other = src.session("other")
    other.append(msg("o1", "elsewhere", "user"))
    made = [
        s.add_label("a1", "good", rating=4.5, note="clear", author="ana"),
        other.add_label("o1", "off-topic"),
        s.add_label("alt-a", "better-branch", target="branch", rating=-1),
        s.add_label("a1", "helpful", source="llm", scorer="judge@1", rationale="answers the question"),
    ]
    path = tmp_path / "labels.jsonl"
    counts = sk.io.export_jsonl(src, path)
    assert counts["labels"] == 4
    rows = [r for r in _lines(path) if r["type"] == "label"]
    assert sorted(r["label"]["id"] for r in rows) == sorted(x.id for x in made)
    assert [r["label"]["id"] for r in rows if r["session_id"] == "compacted"] == [made[0].id, made[2].id, made[3].id]
    for target in {"sqlite", engine}:
        dst = make_store(target)
        sk.io.import_jsonl(dst, path)
        assert sorted(dst.labels(), key=lambda x: x.id) == sorted(made, key=lambda x: x.id)
        assert dst.labels(scorer="judge@1")[0].rationale == "answers the question"
        sk.io.import_jsonl(dst, path)  # idempotent, labels included
        assert len(dst.labels()) == 4
    assert sk.io.export_jsonl(s, tmp_path / "one.jsonl")["labels"] == 3  # a session's export: its labels


def test_labels_of_a_version_2_file_are_a_persons(engine, make_store, tmp_path):
    src = make_store(engine)
    s = src.session("s")
    s.append(msg("u1", "hello", "user"))
    made = s.add_label("u1", "greeting", rating=2, author="ana")
    path = tmp_path / "v2.jsonl"
    sk.io.export_jsonl(src, path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[0]["version"] = 2  # as sessionkit wrote it before labels had a provenance
    for row in lines:
        if row.get("type") == "label":
            for key in ("source", "scorer", "rationale", "fingerprint"):
                del row["label"][key]
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    dst = make_store(engine)
    sk.io.import_jsonl(dst, path)
    (label,) = dst.labels()
    assert (label.id, label.tag, label.author, label.source, label.scorer) == (
        made.id,
        "greeting",
        "ana",
        "human",
        None,
    )


def test_a_version_2_file_still_imports(store, tmp_path):
    """Files written before runs, events and vectors were exported import as before."""
    path = tmp_path / "v2.jsonl"
    lines = [
        {"format": "sessionkit", "version": 2, "exported_at": "2025-01-01T00:00:00.000Z"},
        {
            "type": "message",
            "session_id": "s",
            "parent_id": None,
            "created_at": "2025-01-01T00:00:00.000Z",
            "message": msg("m1", "hello"),
        },
        {
            "type": "message",
            "session_id": "s",
            "parent_id": "m1",
            "created_at": "2025-01-01T00:00:01.000Z",
            "message": msg("m2", "hi", "assistant"),
        },
        {
            "type": "label",
            "session_id": "s",
            "label": {"id": "l1", "message_id": "m2", "tag": "good", "created_at": "2025-01-01T00:00:02.000Z"},
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    sessions = sk.io.import_jsonl(store, path)
    assert [s.session_id for s in sessions] == ["s"]
    assert [m["id"] for m in store.session("s").get_history()] == ["m1", "m2"]
    assert [label.id for label in store.labels()] == ["l1"]
    assert store.runs("s") == [] and store.events("s") == []


def test_runs_events_and_vectors_survive_a_round_trip(engine, make_store, tmp_path):
    src = make_store(engine)
    s = src.session("s")
    s.append_many([msg("u1", "a question"), msg("a1", "an answer", "assistant")])
    src.import_runs(
        [
            {
                "run_id": "r1",
                "session_id": "s",
                "status": "completed",
                "input": "a question",
                "started_at": "2025-01-01T00:00:00.000Z",
                "ended_at": "2025-01-01T00:00:03.000Z",
                "usage": {"in": 4, "out": 2, "cost_usd": 0.5},
                "meta": {"variant": "terse", "at": "u1"},
            }
        ]
    )
    src.run_log.append_events("s", [{"kind": "run.start", "run_id": "r1"}, {"kind": "run.end", "run_id": "r1"}])
    src.run_log.append_events("quiet", [{"kind": "note"}])
    src.embed(lambda texts: [[float(len(t)), 1.0] for t in texts])
    path = tmp_path / "all.jsonl"
    counts = sk.io.export_jsonl(src, path)
    assert (counts["runs"], counts["events"], counts["embeddings"], counts["sessions"]) == (1, 3, 2, 2)
    kinds = [line["type"] for line in _lines(path)]
    assert kinds == ["message", "message", "run", "event", "event", "event", "embedding", "embedding"]
    dst = make_store(engine)
    assert [x.session_id for x in sk.io.import_jsonl(dst, path)] == ["s", "quiet"]
    sk.io.import_jsonl(dst, path)
    assert dst.runs("s") == src.runs("s")
    assert dst.events("s") == src.events("s") and dst.events("quiet") == src.events("quiet")
    query = "SELECT session_id, message_id, model, vector FROM embeddings ORDER BY message_id"
    assert dst.sql_arrow(query).to_pylist() == src.sql_arrow(query).to_pylist()
    assert sk.io.export_jsonl(src.session("quiet"), tmp_path / "quiet.jsonl")["events"] == 1
