"""The change feed: events after writes."""

from __future__ import annotations

from ._common import msg, strip_created, summary_fn


class TestChangeFeed:
    """docs/message-tree.md: subscribe and mirror."""

    def test_F1_every_write_type_reported(self, store):
        events: list = []
        unsub = store.subscribe(events.append)
        s = store.session("s")
        s.append(msg("a"))
        s.append(msg("b"))
        s.update(msg("b", "new"))
        s.on_compaction(summary_fn("a", "a")).compact()
        s.delete("b")
        store.session("t").append(msg("x"))
        s.clear()
        assert [(e.type, e.session_id) for e in events] == [
            ("append", "s"),
            ("append", "s"),
            ("update", "s"),
            ("compact", "s"),
            ("delete", "s"),
            ("append", "t"),
            ("clear", "s"),
        ]
        assert events[0].message_ids == ("a",) and strip_created(events[0].message) == msg("a")
        assert events[2].message["parts"][0]["text"] == "new"
        assert events[4].message_ids == ("b",)
        unsub()
        s.append(msg("after"))
        assert len(events) == 7

    def test_F1_event_message_is_not_the_returned_dict(self, store):
        events: list = []
        store.subscribe(events.append)
        r = store.session("s").append(msg("a"))
        r.message["parts"][0]["text"] = "changed by the caller"
        assert events[0].message["parts"][0]["text"] == "text of a"
        events[0].message["role"] = "changed by a subscriber"
        assert store.session("s").get("a")["role"] == "user" and r.message["role"] == "user"

    def test_F1_raising_callback_does_not_stop_write(self, store, caplog):
        seen: list = []

        def bad(ev):
            raise RuntimeError("subscriber bug")

        store.subscribe(bad)
        store.subscribe(seen.append)
        r = store.session("s").append(msg("a"))
        assert r.inserted and len(seen) == 1
        assert store.session("s").get("a") is not None

    def test_F2_mirror_list(self, store):
        s = store.session("s")
        s.append(msg("a"))
        target: list = []
        stop = s.mirror(target, transform=lambda m: m["id"])
        assert target == ["a"]
        s.append(msg("b"))
        s.append(msg("c"), parent_id="a")
        assert target == ["a", "c"]
        s.update(msg("a", "edit"))
        s.on_compaction(summary_fn("a", "a", "S")).compact()
        assert target == [m["id"] for m in s.get_history()]
        s.import_message(msg("imp"), parent_id="c")  # imports send no event
        assert target == [m["id"] for m in s.get_history(leaf_id="c")]
        store.session("other").append(msg("zzz"))
        assert "zzz" not in target
        stop()
        s.append(msg("d"))
        assert "d" not in target

    def test_F2_mirror_object_and_intercept(self, store):
        s = store.session("s")

        class Box:
            def __init__(self):
                self.value = []
                self.sets = 0

            def get(self):
                return self.value

            def set(self, v):
                self.sets += 1
                self.value = list(v)

        box = Box()
        handled = []

        def intercept(ev):
            if ev.type == "update":
                handled.append(ev)
                return True
            return False

        s.mirror(box, intercept=intercept)
        s.append(msg("a"))
        s.append(msg("b"))
        assert [m["id"] for m in box.value] == ["a", "b"]
        s.update(msg("a", "changed"))
        assert len(handled) == 1
        assert box.value[0]["parts"][0]["text"] == "text of a"  # left alone
        s.append(msg("c"))
        assert box.value == s.get_history()
