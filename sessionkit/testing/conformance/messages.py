"""Messages: what a message is, how it is checked and stored."""

from __future__ import annotations

import datetime as _dt
import json
import math

import pytest

import sessionkit as sk

from ._common import ISO_MS, b64_payload, ids_of, msg, snapshot_store, strip_created


class TestMessages:
    """docs/messages.md: message shape, validation, round trip, size, payloads, tokens."""

    def test_M1_parts_of_every_kind_round_trip(self, store):
        s = store.session("s")
        m = {
            "id": "a1",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "hello"},
                {"type": "reasoning", "text": "thinking..."},
                {
                    "type": "tool-weather",
                    "toolCallId": "c1",
                    "input": {"city": "Oslo"},
                    "output": {"temp": -3.5},
                    "state": "output-available",
                },
                {"type": "file", "mediaType": "text/plain", "url": "https://example.org/a.txt"},
                {"type": "data-custom", "payload": [1, 2, {"x": None}]},
            ],
            "metadata": {"model": "m", "nested": {"k": [True, False]}},
            "unknownKey": {"kept": 1},
        }
        s.append(m)
        got = s.get("a1")
        assert strip_created(got) == m

    @pytest.mark.parametrize(
        "bad, field",
        [
            ({"role": "user", "parts": []}, "id"),
            ({"id": "", "role": "user", "parts": []}, "id"),
            ({"id": "x", "parts": []}, "role"),
            ({"id": "x", "role": "user"}, "parts"),
            ({"id": "x", "role": "user", "parts": "text"}, "parts"),
            ({"id": "x", "role": "user", "parts": [{"text": "no type"}]}, "type"),
            ({"id": "x", "role": "user", "parts": [{"type": 3}]}, "type"),
            ({"id": "x", "role": "user", "parts": [], "createdAt": "yesterday"}, "createdAt"),
            ({"id": "x", "role": "user", "parts": [], "createdAt": "2024-13-01T00:00:00.000Z"}, "createdAt"),
        ],
    )
    def test_M2_invalid_message_names_the_field_and_stores_nothing(self, store, bad, field):
        s = store.session("s")
        s.append(msg("keep"))
        before = snapshot_store(store)
        with pytest.raises(sk.InvalidMessage) as info:
            s.append(bad)
        assert isinstance(info.value, ValueError)
        assert isinstance(info.value, sk.SessionKitError)
        assert field in str(info.value)
        assert snapshot_store(store) == before

    @pytest.mark.parametrize("bad", [None, "text", 42, ["id", "x"]])
    def test_M2_not_a_dict_is_type_error(self, store, bad):
        s = store.session("s")
        before = snapshot_store(store)
        with pytest.raises(TypeError):
            s.append(bad)
        assert snapshot_store(store) == before

    @pytest.mark.parametrize(
        "value", [{1, 2}, object(), float("nan"), float("inf")], ids=["set", "object", "nan", "inf"]
    )
    def test_M2_json_unencodable_is_type_error(self, store, value):
        s = store.session("s")
        s.append(msg("keep"))
        before = snapshot_store(store)
        bad = msg("bad", metadata={"v": value})
        with pytest.raises(TypeError):
            s.append(bad)
        assert snapshot_store(store) == before
        assert s.get("bad") is None

    def test_M2_invalid_in_every_write_path(self, store):
        s = store.session("s")
        s.append(msg("a"))
        before = snapshot_store(store)
        with pytest.raises(sk.InvalidMessage):
            s.import_message({"id": "x", "role": "user"})
        with pytest.raises(sk.InvalidMessage):
            s.update({"id": "a", "role": "user", "parts": "nope"})
        assert snapshot_store(store) == before

    def test_M3_created_at_added_when_missing(self, store):
        s = store.session("s")
        res = s.append(msg("a"))
        got = s.get("a")
        assert ISO_MS.match(got["createdAt"]), got["createdAt"]
        assert res.message["createdAt"] == got["createdAt"]
        stamp = _dt.datetime.strptime(got["createdAt"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=_dt.UTC)
        assert abs((_dt.datetime.now(_dt.UTC) - stamp).total_seconds()) < 120

    def test_M3_writer_created_at_kept(self, store):
        s = store.session("s")
        s.append(msg("a", createdAt="2020-01-02T03:04:05.678Z"))
        assert s.get("a")["createdAt"] == "2020-01-02T03:04:05.678Z"

    def test_M3_reads_return_fresh_copies(self, store):
        s = store.session("s")
        original = msg("a", metadata={"tags": ["x"]})
        res = s.append(original)
        original["parts"][0]["text"] = "changed by caller"
        res.message["parts"][0]["text"] = "changed result"
        got = s.get("a")
        got["metadata"]["tags"].append("y")
        got["parts"].append({"type": "text", "text": "more"})
        for read in (s.get("a"), s.get_history()[0], next(s.history()), s.latest_leaf()):
            assert read["parts"] == [{"type": "text", "text": "text of a"}]
            assert read["metadata"] == {"tags": ["x"]}

    def test_M3_json_semantics_tuples_become_lists(self, store):
        s = store.session("s")
        s.append({"id": "a", "role": "user", "parts": [{"type": "text", "text": "t", "extra": (1, 2)}]})
        assert s.get("a")["parts"][0]["extra"] == [1, 2]

    def test_M3_unicode_round_trip(self, store):
        s = store.session("s")
        text = "naïve café — 日本語 🚀 \u0000 null byte and \U0001f600"
        s.append(msg("u", text))
        assert s.get("u")["parts"][0]["text"] == text

    def test_M4_large_message_round_trips(self, store):
        s = store.session("s")
        big = "".join(f"line {i} with some words é\n" for i in range(200_000))  # ~5 MB
        s.append(msg("big", big))
        s.append(msg("after"))
        assert s.get("big")["parts"][0]["text"] == big
        assert ids_of(s.get_history()) == ["big", "after"]
        assert s.get_history()[0]["parts"][0]["text"] == big

    def test_M4_max_message_bytes(self, store_factory):
        store = store_factory(max_message_bytes=2000)
        s = store.session("s")
        s.append(msg("small", "x" * 100))
        before = snapshot_store(store)
        with pytest.raises(sk.MessageTooLarge) as info:
            s.append(msg("big", "x" * 5000))
        assert isinstance(info.value, sk.SessionKitError)
        assert snapshot_store(store) == before
        assert s.get("big") is None

    def test_M5_inline_payloads_are_deduplicated_and_restored_exactly(self, store):
        s = store.session("s")
        raw, b64 = b64_payload(10_000, "img")
        as_url = {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + b64}
        as_data = {"type": "file", "mediaType": "image/png", "data": b64}
        s.append({"id": "a", "role": "user", "parts": [as_url]})
        s.append({"id": "b", "role": "user", "parts": [as_data, {"type": "text", "text": "see"}]})
        store.session("other").append({"id": "c", "role": "user", "parts": [dict(as_url)]})
        stats = store.stats()
        assert stats["blobs"] == 1
        assert stats["blob_bytes"] == len(raw)
        assert s.get("a")["parts"] == [as_url]
        assert s.get("b")["parts"][0] == as_data
        assert store.session("other").get("c")["parts"] == [as_url]
        assert ids_of(s.get_history()) == ["a", "b"]
        assert s.get_history()[0]["parts"] == [as_url]

    def test_M5_small_or_noncanonical_payloads_stay_inline(self, store):
        s = store.session("s")
        _, small = b64_payload(1000, "small")
        _, big = b64_payload(9000, "big")
        wrapped = "\n".join(big[i : i + 76] for i in range(0, len(big), 76))  # MIME line breaks
        parts = [
            {"type": "file", "mediaType": "image/png", "data": small},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64," + wrapped},
        ]
        s.append({"id": "a", "role": "user", "parts": parts})
        assert s.get("a")["parts"] == parts
        assert store.stats()["blobs"] == 0

    def test_M5_payload_removed_with_its_last_message(self, store):
        s = store.session("s")
        _, b64 = b64_payload(8000, "gone")
        s.append({"id": "a", "role": "user", "parts": [{"type": "file", "mediaType": "x/y", "data": b64}]})
        s.append(
            {"id": "b", "role": "user", "parts": [{"type": "file", "mediaType": "x/y", "data": b64}]}, parent_id=None
        )
        assert store.stats()["blobs"] == 1
        s.delete("a")
        assert store.stats()["blobs"] == 1
        assert s.get("b")["parts"][0]["data"] == b64
        s.delete("b")
        assert store.stats()["blobs"] == 0

    def test_M6_token_estimate(self, store):
        from sessionkit.messages import estimate_tokens

        s = store.session("s")
        text = "The quick brown fox jumps over the lazy dog " * 10
        m = {
            "id": "t",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": text},
                {"type": "reasoning", "text": "a b c d e f"},
                {
                    "type": "tool-search",
                    "toolCallId": "1",
                    "input": {"q": "fox"},
                    "output": ["r1", "r2"],
                    "state": "output-available",
                },
                {"type": "file", "mediaType": "text/plain", "url": "https://x.invalid/" + "y" * 500},
            ],
        }
        strings = [
            text,
            "a b c d e f",
            json.dumps({"q": "fox"}, separators=(",", ":")),
            json.dumps(["r1", "r2"], separators=(",", ":")),
        ]
        chars = sum(len(x) for x in strings)
        words = sum(len(x.split()) for x in strings)
        expected = math.ceil(max(chars / 4, words * 1.3)) + 4
        assert estimate_tokens(m) == expected
        s.append(m)
        assert s.context_tokens() == expected
        df_free = [x for x in s.get_history()]
        assert len(df_free) == 1
