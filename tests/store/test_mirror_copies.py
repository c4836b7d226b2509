"""A mirror (docs/message-tree.md) holds its own copies: what a caller does with the dict an append
returned never shows in a mirrored list."""

import sessionkit as sk


def test_mirror_is_unchanged_when_the_caller_edits_the_message_append_returned():
    session = sk.open_store().session("a")
    target: list = []
    session.mirror(target)
    session.append({"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    result = session.append({"id": "m2", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]})

    result.message["parts"][0]["text"] = "edited by the caller"
    result.message["role"] = "edited"

    assert target == session.get_history()
