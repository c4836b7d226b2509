"""prepare() takes shortcuts on every append; each gives what the plain way gives."""

from __future__ import annotations

import json
import math

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
text = st.text(alphabet=st.sampled_from(WHITESPACE + "ab\u00e9\"\\{}:,\x00"), max_size=40)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20),
                    st.floats(allow_nan=False, allow_infinity=False), text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(text, inner, max_size=4)), max_leaves=12)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "text": text}),
    st.fixed_dictionaries({"type": st.sampled_from(["tool-search", "dynamic-tool"]), "toolCallId": text},
                          optional={"input": values, "output": values, "state": text}),
    st.fixed_dictionaries({"type": text}, optional={"data": values}),
)
messages = st.fixed_dictionaries(
    {"id": text.filter(bool), "role": st.sampled_from(["user", "assistant", "tool"]),
     "parts": st.lists(parts, max_size=4)},
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
