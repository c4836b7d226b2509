"""OpenAI chat format: tool calls paired with their results, roles kept, idempotent."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers import chat_tool_call

import sessionkit as sk

CHAT = [
    {"role": "system", "content": "You are a travel agent."},
    {"role": "user", "content": "Book me a flight."},
    {"role": "assistant", "content": None, "tool_calls": [chat_tool_call("c1", "search", {"to": "SEA"})]},
    {"role": "tool", "tool_call_id": "c1", "name": "search", "content": '["HAT069"]'},
    {
        "role": "assistant",
        "content": "Found HAT069.",
        "tool_calls": [
            chat_tool_call("c2", "price", {"flight": "HAT069"}),
            chat_tool_call("c3", "seats", {"flight": "HAT069"}),
        ],
    },
    {"role": "tool", "tool_call_id": "c3", "content": "12 seats"},
    {"role": "tool", "tool_call_id": "c2", "content": "$255"},
    {"role": "assistant", "content": "", "tool_calls": [chat_tool_call("c1", "book", {"flight": "HAT069"})]},
    {"role": "tool", "tool_call_id": "c1", "content": "booked"},
    {"role": "assistant", "content": "Done.", "name": "agent-7"},
]


def test_roles_parts_and_tool_pairing(store):
    session = store.session("chat")
    results = sk.io.import_openai(session, CHAT)
    assert all(r.inserted for r in results)
    history = session.get_history()
    assert [m["role"] for m in history] == ["system", "user", "assistant", "assistant", "assistant", "assistant"]
    assert [r.message["id"] for r in results] == [m["id"] for m in history]
    assert history[0]["parts"] == [{"type": "text", "text": "You are a travel agent."}]
    first = history[2]["parts"]
    assert first == [
        {
            "type": "tool-search",
            "toolCallId": "c1",
            "state": "output-available",
            "input": {"to": "SEA"},
            "output": '["HAT069"]',
        }
    ]
    text, price, seats = history[3]["parts"]
    assert text == {"type": "text", "text": "Found HAT069."}
    assert (price["type"], price["output"], price["input"]) == ("tool-price", "$255", {"flight": "HAT069"})
    assert (seats["type"], seats["output"]) == ("tool-seats", "12 seats")
    # "c1" is used again: its second result pairs with the second call, the first keeps its own
    (book,) = history[4]["parts"]  # empty content next to tool calls gives no empty text part
    assert (book["type"], book["toolCallId"], book["output"]) == ("tool-book", "c1", "booked")
    assert history[5]["metadata"] == {"openai": {"name": "agent-7"}}
    assert len(session) == 6  # tool messages are not messages of their own


def test_results_before_the_second_call_pair_with_the_nearest_earlier_call():
    chat = [
        {"role": "assistant", "content": None, "tool_calls": [chat_tool_call("x", "a", {})]},
        {"role": "assistant", "content": None, "tool_calls": [chat_tool_call("x", "b", {})]},
        {"role": "tool", "tool_call_id": "x", "content": "for b"},
        {"role": "tool", "tool_call_id": "x", "content": "for a"},
    ]
    (m1, _), (m2, _) = sk.io.chat_to_messages(chat)
    assert m2["parts"][0]["output"] == "for b"
    assert m1["parts"][0]["output"] == "for a"


def test_unanswered_call_stays_input_available(store):
    session = store.session("s")
    sk.io.import_openai(session, CHAT[:3])
    (part,) = session.latest_leaf()["parts"]
    assert part["state"] == "input-available" and "output" not in part


def test_reimport_adds_nothing_and_a_longer_chat_adds_only_the_rest(store):
    session = store.session("s")
    sk.io.import_openai(session, CHAT[:5])
    n = len(session)
    again = sk.io.import_openai(session, CHAT[:5])
    assert not any(r.inserted for r in again) and len(session) == n
    short = session.get_history()
    sk.io.import_openai(session, CHAT)
    long = session.get_history()
    # messages whose content (with the tool results folded into them) did not change are shared;
    # the 4th got its results only in the longer chat, so that version starts a sibling branch
    assert [m["id"] for m in long[:3]] == [m["id"] for m in short[:3]]
    assert len(session) == 7 and session.path_length() == 6
    siblings = [m["id"] for m in session.branches(short[2]["id"])]
    assert siblings == [short[3]["id"], long[3]["id"]]


def test_ids_are_deterministic_across_stores(make_store, engine):
    a, b = make_store(engine), make_store(engine)
    ids_a = [r.message["id"] for r in sk.io.import_openai(a.session("x"), CHAT)]
    ids_b = [r.message["id"] for r in sk.io.import_openai(b.session("y"), CHAT)]
    assert ids_a == ids_b and len(set(ids_a)) == len(ids_a)


def test_parent_id_attaches_the_chat_as_a_branch(store):
    session = store.session("s")
    first = sk.io.import_openai(session, CHAT[:2])
    root = first[0].message["id"]
    sk.io.import_openai(session, [{"role": "user", "content": "Another question"}], parent_id=root)
    assert len(session.branches(root)) == 2
    with pytest.raises(sk.MessageNotFound):
        sk.io.import_openai(session, CHAT[:1], parent_id="nope")


def test_files_json_array_jsonl_and_messages_document(store, tmp_path):
    arr = tmp_path / "chat.json"
    arr.write_text(json.dumps(CHAT, indent=2), encoding="utf-8")
    lines = tmp_path / "chat.jsonl"
    lines.write_text("\n".join(json.dumps(m) for m in CHAT) + "\n", encoding="utf-8")
    doc = tmp_path / "req.json"
    doc.write_text(json.dumps({"model": "gpt-4o", "messages": CHAT}), encoding="utf-8")
    got = []
    for i, path in enumerate((arr, lines, doc)):
        session = store.session(f"f{i}")
        sk.io.import_openai(session, path)
        got.append(session.get_history())
    ref = store.session("ref")
    sk.io.import_openai(ref, CHAT)
    expected = [(m["id"], m["role"], m["parts"]) for m in ref.get_history()]
    for history in got:
        assert [(m["id"], m["role"], m["parts"]) for m in history] == expected


def test_content_lists_and_reasoning():
    chat = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.org/cat.jpg"}},
                {"type": "custom", "value": 1},
            ],
        },
        {"role": "assistant", "content": "A cat.", "reasoning_content": "Looks feline."},
    ]
    (user, _), (reply, _) = sk.io.chat_to_messages(chat)
    assert user["parts"] == [
        {"type": "text", "text": "What is this?"},
        {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo="},
        {"type": "file", "mediaType": "image/jpeg", "url": "https://example.org/cat.jpg"},
        {"type": "custom", "value": 1},
    ]
    assert reply["parts"] == [{"type": "reasoning", "text": "Looks feline."}, {"type": "text", "text": "A cat."}]


def test_legacy_function_call_pairs_with_function_message():
    chat = [
        {"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"q": 1}'}},
        {"role": "function", "name": "lookup", "content": "found"},
    ]
    ((msg, _),) = sk.io.chat_to_messages(chat)
    (part,) = msg["parts"]
    assert (part["type"], part["input"], part["output"], part["state"]) == (
        "tool-lookup",
        {"q": 1},
        "found",
        "output-available",
    )


@pytest.mark.parametrize(
    "chat, where, words",
    [
        ([{"role": "user", "content": "hi"}, {"content": "no role"}], "record 1", "no 'role'"),
        ([{"role": "tool", "tool_call_id": "zz", "content": "x"}], "record 0", "no earlier assistant message"),
        (
            [
                {"role": "assistant", "tool_calls": [chat_tool_call("a", "f", {})]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "2"},
            ],
            "record 2",
            "already has a result",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{oops"}}],
                }
            ],
            "record 0",
            "not JSON",
        ),
        ([{"role": "user", "content": 42}], "record 0", "'content' must be"),
        (["just a string"], "record 0", "must be an object"),
    ],
)
def test_malformed_chats_name_the_record(store, chat, where, words):
    session = store.session("bad")
    with pytest.raises(sk.io.MalformedInput) as info:
        sk.io.import_openai(session, chat)
    assert info.value.where == where
    assert words in str(info.value)
    assert len(session) == 0  # nothing stored


def test_malformed_jsonl_names_the_line(store, tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n{broken\n')
    with pytest.raises(sk.io.MalformedInput, match=r"chat\.jsonl, line 3: not valid JSON"):
        sk.io.import_openai(store.session("x"), path)
    path.write_text('{"role": "user", "content": "a"}\n{"role": "tool", "content": "b"}\n')
    with pytest.raises(sk.io.MalformedInput, match=r"line 2: tool message has no 'tool_call_id'"):
        sk.io.import_openai(store.session("x"), path)


# ---------------------------------------------------------------------------
# tau-bench: 200 real trajectories


def test_all_tau_bench_trajectories_with_every_tool_call_paired(loaded, tau_sid):
    store = loaded["store"]
    tau_records = loaded["tau_records"]  # all 200 on SQLite (see DUCKDB_SAMPLE in conftest.py)
    assert len(tau_records) == 200 or not loaded["full"]["tau"]
    calls_seen = 0
    for rec in tau_records:
        traj = rec["traj"]
        session = store.session(tau_sid(rec))
        kept = [m for m in traj if m["role"] != "tool"]
        history = session.get_history()
        assert len(session) == len(kept) == len(history)
        assert [m["role"] for m in history] == [m["role"] for m in kept]
        # In these files each call is answered by the message right after its assistant message;
        # that gives the expected pairing without re-running the importer's rule.
        expected = []
        for i, m in enumerate(traj):
            for j, call in enumerate(m.get("tool_calls") or []):
                result = traj[i + 1 + j]
                assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
                expected.append(
                    (
                        call["id"],
                        call["function"]["name"],
                        json.loads(call["function"]["arguments"]),
                        result["content"],
                        result["name"],
                    )
                )
        got = []
        for m in history:
            for p in m["parts"]:
                if p["type"].startswith("tool-"):
                    assert p["state"] == "output-available"
                    got.append((p["toolCallId"], p["type"][5:], p["input"], p["output"]))
        assert got == [e[:4] for e in expected]
        for e in expected:
            assert e[4] == e[1]  # the tool message's name matches the call it was paired with
        texts = [m["content"] for m in kept if m["content"]]
        assert [p["text"] for m in history for p in m["parts"] if p["type"] == "text"] == texts
        calls_seen += len(expected)
    roles = Counter(m["role"] for s in loaded["tau"] for m in s.get_history())
    assert roles == Counter(m["role"] for rec in tau_records for m in rec["traj"] if m["role"] != "tool")
    if loaded["full"]["tau"]:  # the counts SOURCES.md states for the whole file
        assert calls_seen == 1164
        assert roles == {"system": 200, "user": 1490, "assistant": 2454}


def test_tau_bench_reimport_adds_nothing(loaded, tau_sid):
    store = loaded["store"]
    before = store.stats()["messages"]
    for rec in loaded["tau_records"][:40]:
        results = sk.io.import_openai(store.session(tau_sid(rec)), rec["traj"])
        assert not any(r.inserted for r in results)
    assert store.stats()["messages"] == before
