"""prepare() takes shortcuts on every append; each gives what the plain way gives."""

from __future__ import annotations

import base64
import hashlib
import json
import math
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sessionkit as sk
from sessionkit import messages as _msg


def plain_dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def plain_estimate(message: dict) -> int:
    chars = words = 0
    for part in message["parts"]:
        ptype = part.get("type")
        texts = []
        if ptype in ("text", "reasoning") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif ptype.startswith("tool-") or ptype == "dynamic-tool":
            for key in ("input", "output"):
                if part.get(key) is not None:
                    texts.append(part[key] if isinstance(part[key], str) else plain_dumps(part[key]))
        for text in texts:
            chars += len(text)
            words += len(text.split())
    return math.ceil(max(chars / 4, words * 1.3)) + 4


WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u3000"
text = st.text(alphabet=st.sampled_from(WHITESPACE + 'ab\u00e9"\\{}:,\x00'), max_size=40)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=False, allow_infinity=False), text
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=12,
)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "text": text}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["tool-search", "dynamic-tool"]), "toolCallId": text},
        optional={"input": values, "output": values, "state": text},
    ),
    st.fixed_dictionaries({"type": text}, optional={"data": values}),
)
messages = st.fixed_dictionaries(
    {
        "id": text.filter(bool),
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "parts": st.lists(parts, max_size=4),
    },
    optional={"metadata": st.dictionaries(text, values, max_size=3), "createdAt": st.just("2024-05-01T10:00:00.000Z")},
)


@settings(max_examples=300, deadline=None)
@given(messages)
def test_the_message_is_encoded_and_estimated_as_the_plain_way_does(message):
    full, tool_json = _msg._encode_message(message)
    assert full == plain_dumps(message)
    for (i, key), encoded in tool_json.items():
        assert encoded == plain_dumps(message["parts"][i][key])
    prep = _msg.prepare(message)
    assert prep.tokens == plain_estimate(message) == _msg.estimate_tokens(prep.message)
    expected = json.loads(plain_dumps(message))
    expected.setdefault("createdAt", prep.created_at)
    assert prep.message == expected and prep.full_json == plain_dumps(expected)
    assert (prep.id, prep.role, prep.created_at) == (expected["id"], expected["role"], expected["createdAt"])
    assert prep.bytes == len(prep.full_json.encode())
    assert prep.text == _msg.message_text(expected)


@given(st.text(alphabet=st.sampled_from(WHITESPACE + "ab\u00e9"), max_size=60))
def test_words_are_counted_as_split_counts_them(s):
    assert _msg._count_words(s) == len(s.split())


def test_keys_that_are_not_strings_are_encoded_by_the_encoder():
    message = {"id": "m", "role": "tool", "parts": [{"type": "tool-x", 1: "one", "output": {2: [1.5, None]}}]}
    full, _ = _msg._encode_message(message)
    assert full == plain_dumps(message)
    message = {"id": "m", "role": "tool", 7: "seven", "parts": [{"type": "tool-x", "input": [1]}]}
    assert _msg._encode_message(message)[0] == plain_dumps(message)


def test_what_cannot_be_encoded_is_a_type_error():
    loop: dict = {"type": "tool-x"}
    loop["output"] = {"again": loop}
    for bad in ({"x": {1, 2}}, {"x": float("nan")}, loop):
        message = {"id": "m", "role": "user", "parts": [bad if "type" in bad else {"type": "tool-x", "output": bad}]}
        try:
            _msg.prepare(message)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{bad!r} was encoded")


def test_the_returned_message_is_the_stored_one_and_shares_nothing():
    with sk.open_store() as store:
        s = store.session()
        original = {"id": "a", "role": "user", "parts": [{"type": "tool-x", "output": {"rows": [1, 2]}}]}
        result = s.append(original)
        assert result.inserted and result == sk.AppendResult(True, s.get("a"))
        assert result.message == s.get("a") and result.message is result.message
        result.message["parts"][0]["output"]["rows"].append(3)
        original["parts"][0]["output"]["rows"].append(4)
        assert s.get("a")["parts"][0]["output"] == {"rows": [1, 2]}
        assert "createdAt" not in original
        seen = []
        store.subscribe(seen.append)
        second = s.append({"id": "b", "role": "assistant", "parts": []})
        assert seen[0].message == second.message and seen[0].message is not second.message
        assert s.append({"id": "b", "role": "user", "parts": []}) == sk.AppendResult(False, second.message)


# -- keys are data (docs/messages.md): the stored form of caller keys that collide with the payload key

R = _msg._BLOB_KEY
adversarial_keys = st.one_of(text, st.sampled_from([R, R + R, R + "x", R * 3, "x" + R, R[:-1], R + R + "é"]))
adversarial = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(adversarial_keys, inner, max_size=3)),
    max_leaves=10,
)
BIG = "QUJD" * 1400  # 4,200 bytes once decoded: stored out of the row


def _fetch_from(blobs):
    def fetch(sha):
        return blobs[sha]

    return fetch


@settings(max_examples=200, deadline=None)
@given(
    adversarial,
    st.lists(st.dictionaries(adversarial_keys, adversarial, max_size=3), max_size=3),
    st.sampled_from([None, "data", "url"]),
)
def test_caller_keys_round_trip_and_never_become_pointers(extra, parts, payload):
    parts = [dict(p, type=p.get("type") if isinstance(p.get("type"), str) else "x") for p in parts]
    if payload == "data":
        parts.append({"type": "file", "mediaType": "x/y", "data": BIG, R: {"sha256": "0" * 64}})
    elif payload == "url":
        parts.append({"type": "file", "mediaType": "x/y", "url": "data:x/y;base64," + BIG, R + R: 1})
    message = {"id": "m", "role": "user", "parts": parts, R: extra, "metadata": {R: extra}}
    prep = _msg.prepare(message)
    assert _msg.restore(prep.stored_json, _fetch_from(prep.blobs)) == prep.message
    assert prep.message == dict(json.loads(plain_dumps(message)), createdAt=prep.created_at)
    # the only bare payload keys in stored JSON are the pointers the store wrote
    assert sorted(_msg.blob_refs(prep.stored_json)) == sorted(prep.blobs)
    bare = []

    def walk(value):
        if isinstance(value, dict):
            bare.extend(k for k in value if k == R)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(json.loads(prep.stored_json))
    assert len(bare) == len(prep.blobs)
    assert prep.bytes == len(prep.full_json.encode()) and prep.tokens == _msg.estimate_tokens(prep.message)
    decoded = _msg.decode_stored(prep.stored_json)
    assert decoded["metadata"] == prep.message["metadata"] and decoded.get(R) == prep.message.get(R)


def test_a_message_without_the_payload_key_is_stored_as_encoded():
    message = {"id": "m", "role": "user", "parts": [{"type": "text", "text": "mentions __sessionkit_blob_"}]}
    prep = _msg.prepare(message)
    assert prep.stored_json == prep.full_json


def test_stored_json_of_earlier_versions_reads_back():
    """Rows written before caller keys were escaped: genuine pointers resolve as they did,
    and caller keys read as they did, except those starting with the payload key twice."""
    raw = bytes(range(256)) * 20
    sha = hashlib.sha256(raw).hexdigest()
    b64 = base64.b64encode(raw).decode()
    stored = json.dumps(
        {
            "id": "m",
            "role": "user",
            "createdAt": "2024-01-01T00:00:00.000Z",
            "parts": [
                {
                    "type": "file",
                    "mediaType": "image/png",
                    "url": None,
                    R: {"sha256": sha, "field": "url", "prefix": "data:image/png;base64,"},
                },
                {"type": "file", "mediaType": "x/y", "data": None, R: {"sha256": sha, "field": "data", "prefix": ""}},
                {"type": "text", "text": "hi", R + "x": 1, "n": {R: 2}},
            ],
            "metadata": {R + "note": True},
        },
        separators=(",", ":"),
    )
    got = _msg.restore(stored, {sha: raw}.__getitem__)
    assert got["parts"][0] == {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + b64}
    assert got["parts"][1] == {"type": "file", "mediaType": "x/y", "data": b64}
    assert got["parts"][2] == {"type": "text", "text": "hi", R + "x": 1, "n": {R: 2}}
    assert got["metadata"] == {R + "note": True}
    assert _msg.blob_refs(stored) == [sha, sha]


@pytest.mark.parametrize(
    "value",
    [
        "not a pointer",
        None,
        7,
        [1],
        {"sha256": "x"},
        {"sha256": "0" * 64, "field": "text", "prefix": ""},
        {"sha256": "0" * 64, "field": "data", "prefix": "data:x;base64,"},
        {"sha256": "0" * 64, "field": "url", "prefix": "", "extra": 1},
        {"sha256": "0" * 64, "field": "url", "prefix": "http://"},
    ],
)
def test_a_payload_key_that_is_no_pointer_reads_as_data(value):
    """Earlier versions stored a caller's payload key as given; whatever is no pointer the
    store could have written reads back as data instead of failing every read."""
    part = {"type": "file", "url": None, "data": None, R: value}
    stored = json.dumps({"id": "m", "role": "user", "parts": [part, {"type": "text", R: value}]})

    def fetch(sha):
        raise AssertionError("no payload is fetched")

    assert _msg.restore(stored, fetch)["parts"] == [part, {"type": "text", R: value}]
    assert _msg.blob_refs(stored) == []


# -- nesting: the fast check (marshal) and the walk agree at the limit


def _nested(depth: int, leaf):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("fast", [True, False], ids=["marshal", "walk"])
@pytest.mark.parametrize("wrap", [list, dict, "subclass"])
def test_nesting_limit_is_exact_whichever_check_decides(monkeypatch, fast, wrap):
    from collections import OrderedDict

    if not fast:
        monkeypatch.setattr(_msg, "_marshal_limit", [None])
    wide = [[i] for i in range(200)]  # brackets enough that the count alone cannot decide

    def message(depth, leaf):
        """Containers nesting exactly ``depth`` deep: message, parts, part, output, then lists."""
        inner = _nested(depth - 4 - isinstance(leaf, (list, dict)), leaf)  # an empty one is a level too
        output = {list: lambda v: [v], dict: lambda v: {"k": v}, "subclass": lambda v: OrderedDict(k=v)}[wrap](inner)
        return {"id": "m", "role": "tool", "parts": [{"type": "tool-x", "output": output, "input": wide}]}

    for leaf in (1, [], "x", {}):
        _msg.prepare(message(_msg.MAX_NESTING, leaf))
        with pytest.raises(sk.InvalidMessage, match=f"nested deeper than {_msg.MAX_NESTING}"):
            _msg.prepare(message(_msg.MAX_NESTING + 1, leaf))


#: Stored JSON that is not one message: a damaged row, as restore_many must tell it.
not_one_message = st.sampled_from(['{"a":1},{"b":2}', '[{"a":1}', '{"b":2}]', "1", '{"x":', '"s"', "{}  ", ""])


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            messages.map(lambda m: ("message", m)),
            st.just(("payload", None)),
            not_one_message.map(lambda raw: ("raw", raw)),
        ),
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_messages_restored_together_are_what_each_restores(items, group):
    stored, blobs = [], {}
    for kind, value in items:
        if kind == "raw":
            stored.append(value)
            continue
        if kind == "payload":
            value = {"id": "p", "role": "user", "parts": [{"type": "file", "mediaType": "x/y", "data": BIG}]}
        prep = _msg.prepare(value)
        stored.append(prep.stored_json)
        blobs.update(prep.blobs)
    fetch = _fetch_from(blobs)
    with mock.patch.object(_msg, "_DECODE_GROUP", group):  # several groups in a short list
        try:
            expected = [_msg.restore(raw, fetch) for raw in stored]
        except ValueError as exc:  # a damaged row: restored together, it raises the same
            with pytest.raises(type(exc)):
                _msg.restore_many(stored, fetch)
            return
        assert _msg.restore_many(stored, fetch) == expected


def plain_is_time(text: str) -> bool:
    try:
        _msg.to_iso(text)
    except (TypeError, ValueError):
        return False
    return True


TIMES = [
    "2024-05-01T10:00:00.000Z",
    "2024-05-01T10:00:00Z",
    "2024-05-01Z",
    "2024-13-01T10:00:00.000Z",
    "2024-02-30T10:00:00Z",
    "0001-01-01T00:00:00.000Z",
    "9999-12-31T23:59:59.999Z",
    "2024-05-01T10:00:00+05:00Z",
    "2024-05-01T10:00:00.000+00:00",
    "2024-05-01T10:00:00.000-11:00",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "2024-05-01 10:00:00Z",
    "20240501T100000Z",
    "Z",
    "",
    "yesterday",
    "yesterdayZ",
    "2024-05-01T24:00:00Z",
    "2024-05-01T10:00:00.1234567Z",
]


@pytest.mark.parametrize("text", TIMES)
def test_a_kept_created_at_is_checked_as_to_iso_checks_it(text):
    assert _msg._is_time(text) is plain_is_time(text)
    message = {"id": "m", "role": "user", "parts": [], "createdAt": text}
    if plain_is_time(text):
        assert _msg.prepare(message).created_at == text
    else:
        with pytest.raises(sk.InvalidMessage, match="'createdAt' must be an ISO 8601 time"):
            _msg.prepare(message)


@given(
    st.from_regex(
        r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,6})?)?)?([+-][0-9]{2}:[0-9]{2})?Z?\Z"
    )
)
@settings(max_examples=300, deadline=None)
def test_any_time_like_text_is_checked_as_to_iso_checks_it(text):
    assert _msg._is_time(text) is plain_is_time(text)
