"""What import_oasst, import_hh and import_jsonl return: the sessions they wrote to, in file
order, each once, as a packed sequence of session handles (SessionList)."""

from __future__ import annotations

import gc
import json
import weakref
from array import array

import pytest
from helpers import result_ids

import sessionkit as sk
from sessionkit.io._common import SessionList


@pytest.mark.parametrize("spill", [3, 50_000])
def test_each_id_once_in_first_order_across_the_spill_to_disk(mem_store, spill):
    ids = [f"s{i % 7}-{'é' if i % 2 else 'x'}" for i in range(40)] + ["s0-x", "last"]
    with SessionList(mem_store, spill=spill) as sessions:
        added = [sessions.append_new(sid) for sid in ids]
    expected = list(dict.fromkeys(ids))
    assert sessions.ids == expected
    assert added == [ids.index(sid) == k for k, sid in enumerate(ids)]
    assert len(sessions) == len(expected)
    with pytest.raises(RuntimeError):
        sessions.append_new("more")


def test_used_as_a_list_of_handles(mem_store):
    with SessionList(mem_store) as sessions:
        for sid in ("a", "b", "c", "d"):
            sessions.append_new(sid)
    handles = [mem_store.session(sid) for sid in ("a", "b", "c", "d")]
    assert sessions == handles and handles == sessions and sessions != handles[:3]
    assert sessions[0] is handles[0] and sessions[-1] is handles[-1] and sessions[1:3] == handles[1:3]
    assert list(sessions) == handles and list(reversed(sessions)) == handles[::-1]
    assert handles[2] in sessions and sessions.index(handles[2]) == 2
    a, b, c, d = sessions
    assert (a, d) == (handles[0], handles[3])
    for bad in (4, -5):
        with pytest.raises(IndexError):
            sessions[bad]
    with pytest.raises(TypeError):
        sessions["a"]
    assert "4 sessions" in repr(sessions) and "'a'" in repr(sessions)
    with pytest.raises(TypeError):
        hash(sessions)


def test_holds_ids_not_handles(mem_store):
    with SessionList(mem_store) as sessions:
        sessions.append_new("x")
    ref = weakref.ref(sessions[0])
    gc.collect()
    assert ref() is None and sessions[0].session_id == "x"


def test_ordered_by_keys(mem_store):
    with SessionList(mem_store) as sessions:
        for sid in ("late", "early", "middle"):
            sessions.append_new(sid)
    assert sessions.ordered(array("q", [30, 10, 20])).ids == ["early", "middle", "late"]


def test_importers_return_each_session_once_in_file_order(mem_store, tmp_path):
    pair = {"chosen": "\n\nHuman: hi\n\nAssistant: yes", "rejected": "\n\nHuman: hi\n\nAssistant: no"}
    other = {"chosen": "\n\nHuman: bye\n\nAssistant: ok", "rejected": "\n\nHuman: bye\n\nAssistant: no"}
    hh = tmp_path / "hh.jsonl"
    hh.write_text("".join(json.dumps(p) + "\n" for p in (pair, other, pair)), encoding="utf-8")
    sessions = sk.io.import_hh(mem_store, hh)
    assert len(sessions) == 2 == len({s.session_id for s in sessions})
    assert sessions[0].get("c1")["parts"][0]["text"] == "yes" and sessions[1].get("c1")["parts"][0]["text"] == "ok"
    assert result_ids(sk.io.import_hh(mem_store, hh)) == result_ids(sessions)  # again: the same sessions, nothing added

    def flat(tree, mid, parent):
        return {
            "message_id": mid,
            "parent_id": parent,
            "message_tree_id": tree,
            "role": "prompter",
            "text": f"text {mid}",
        }

    oasst = tmp_path / "flat.jsonl"
    rows = [flat("B", "b0", None), flat("A", "a0", None), flat("B", "b1", "b0"), flat("A", "a1", "a0")]
    oasst.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert result_ids(sk.io.import_oasst(mem_store, oasst, session_prefix="f-")) == ["f-B", "f-A"]  # by first line

    export = tmp_path / "export.jsonl"
    sk.io.export_jsonl(mem_store, export)
    copy = sk.open_store(tmp_path / "copy.db")
    got = sk.io.import_jsonl(copy, export)
    assert sorted(result_ids(got)) == sorted(info.id for info in mem_store.list_sessions())
    assert all(s.store is copy for s in got)
    copy.close()


@pytest.mark.parametrize("limit", [10_000, 2])
def test_imports_return_a_list_up_to_the_limit_then_the_packed_sequence(mem_store, tmp_path, monkeypatch, limit):
    # docs/importing.md: a list of sessions; past LIST_UP_TO of them the packed SessionList (bounded memory).
    import sessionkit.io._common as common

    monkeypatch.setattr(common, "LIST_UP_TO", limit)
    path = tmp_path / "hh.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"chosen": f"\n\nHuman: q{i}\n\nAssistant: yes", "rejected": f"\n\nHuman: q{i}\n\nAssistant: no"}
            )
            + "\n"
            for i in range(3)
        )
    )
    got = sk.io.import_hh(mem_store, path)
    if limit >= 3:
        assert type(got) is list
    else:
        assert isinstance(got, SessionList) and not isinstance(got, list)
    assert len(got) == 3 and all(isinstance(s, sk.Session) for s in got)
    assert sorted(s.session_id for s in got) == sorted(i.id for i in mem_store.list_sessions())
    assert [s.get_history()[0]["parts"][0]["text"] for s in got] == ["q0", "q1", "q2"]
