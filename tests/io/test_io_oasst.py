"""OpenAssistant trees: every tree, message and branch arrives, and nothing else."""

from __future__ import annotations

import json
import random

import pytest

import sessionkit as sk


def _source_tree(tree: dict):
    """(edges {id: parent}, children {id: [ids in file order]}, nodes {id: source node}) of one source tree."""
    edges, children, nodes = {}, {}, {}
    stack = [(tree["prompt"], None)]
    while stack:
        node, parent = stack.pop()
        edges[node["message_id"]] = parent
        nodes[node["message_id"]] = node
        children[node["message_id"]] = [r["message_id"] for r in node["replies"]]
        for r in node["replies"]:
            stack.append((r, node["message_id"]))
    return edges, children, nodes


def _stored_tree(session, root_id: str):
    """(edges, children) of a stored session, walked with the public API from its root."""
    edges, children = {root_id: None}, {}
    stack = [root_id]
    while stack:
        mid = stack.pop()
        kids = [m["id"] for m in session.branches(mid)]
        children[mid] = kids
        for k in kids:
            edges[k] = mid
            stack.append(k)
    return edges, children


def test_every_tree_message_and_branch_is_imported(loaded, oasst_trees):
    assert loaded["full"]["oasst"]  # every engine imports the whole OASST file
    store = loaded["store"]
    sessions = {s.session_id: s for s in loaded["oasst"]}
    assert len(oasst_trees) == 100
    assert len(sessions) == 100
    # one read of every stored (session, id, parent), in write order
    df = store.messages_df(session_ids=list(sessions))
    stored: dict[str, list] = {}
    for sid, mid, parent in zip(df["session_id"], df["id"], df["parent_id"]):
        stored.setdefault(sid, []).append((mid, parent if isinstance(parent, str) else None))
    total_nodes = total_leaves = 0
    for i, tree in enumerate(oasst_trees):
        sid = "oasst-" + tree["message_tree_id"]
        session = sessions[sid]
        edges, children, nodes = _source_tree(tree)
        n_nodes = len(edges)
        n_leaves = sum(1 for kids in children.values() if not kids)
        got_edges = dict(stored[sid])
        assert len(session) == len(stored[sid]) == n_nodes
        assert got_edges == edges
        parents = set(got_edges.values())
        assert sum(1 for mid in got_edges if mid not in parents) == n_leaves
        # siblings keep their file order (write order among children)
        got_children = {mid: [m for m, p in stored[sid] if p == mid] for mid in got_edges}
        assert got_children == children
        if i < 10:  # the same tree through the public tree API
            walked_edges, walked_children = _stored_tree(session, tree["prompt"]["message_id"])
            assert walked_edges == edges and walked_children == children
        total_nodes += n_nodes
        total_leaves += n_leaves
    # the counts SOURCES.md states for this file
    assert (total_nodes, total_leaves) == (1167, 626)
    assert sum(len(s) for s in sessions.values()) == total_nodes
    assert store.stats()["messages"] >= total_nodes


def test_message_content_roles_and_metadata(loaded, oasst_trees):
    session = loaded["oasst"][0]
    tree = oasst_trees[0]
    _, _, nodes = _source_tree(tree)
    roles = {"prompter": "user", "assistant": "assistant"}
    for mid, node in nodes.items():
        msg = session.get(mid)
        assert msg["role"] == roles[node["role"]]
        assert msg["parts"] == [{"type": "text", "text": node["text"]}]
        meta = msg["metadata"]["oasst"]
        for key, value in node.items():
            if key not in ("message_id", "parent_id", "text", "role", "replies"):
                assert meta[key] == value, key
    root = session.get(tree["prompt"]["message_id"])
    assert root["metadata"]["oasst"]["message_tree_id"] == tree["message_tree_id"]
    assert root["metadata"]["oasst"]["tree_state"] == tree["tree_state"]


def test_latest_leaf_is_the_last_reply_of_the_last_branch(loaded, oasst_trees):
    sessions = {s.session_id: s for s in loaded["oasst"]}
    for tree in oasst_trees[:20]:
        node = tree["prompt"]
        while node["replies"]:
            node = node["replies"][-1]
        assert sessions["oasst-" + tree["message_tree_id"]].latest_leaf()["id"] == node["message_id"]


def test_reimport_adds_nothing(loaded, tmp_path):
    store = loaded["store"]
    before = store.stats()["messages"]
    path = loaded["oasst_path"]
    if loaded["engine"] == "duckdb":  # see DUCKDB_SAMPLE in conftest.py: part of the file there
        path = tmp_path / "head.jsonl"
        path.write_bytes(b"".join(loaded["oasst_path"].read_bytes().splitlines(keepends=True)[:20]))
    again = sk.io.import_oasst(store, path)
    assert store.stats()["messages"] == before
    assert [s.session_id for s in again] == [s.session_id for s in loaded["oasst"]][: len(again)]
    assert len(again) == (20 if loaded["engine"] == "duckdb" else 100)
    assert again[0] is loaded["oasst"][0]  # the cached handles


def test_flat_message_export_gives_the_same_trees(oasst_trees, store, tmp_path):
    """The flat ``*_messages.jsonl`` shape, in shuffled order, builds the same trees."""
    rows = []
    for tree in oasst_trees[:15]:
        stack = [tree["prompt"]]
        while stack:
            node = stack.pop()
            row = {k: v for k, v in node.items() if k != "replies"}
            row["message_tree_id"] = tree["message_tree_id"]
            row.setdefault("parent_id", None)
            rows.append(row)
            stack.extend(node["replies"])
    random.Random(7).shuffle(rows)
    path = tmp_path / "messages.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sessions = {s.session_id: s for s in sk.io.import_oasst(store, path, session_prefix="flat-")}
    assert len(sessions) == 15
    for tree in oasst_trees[:15]:
        edges, _, _ = _source_tree(tree)
        session = sessions["flat-" + tree["message_tree_id"]]
        got, _ = _stored_tree(session, tree["prompt"]["message_id"])
        assert got == edges


def test_malformed_lines_are_named(store, tmp_path, oasst_trees):
    good = json.dumps(oasst_trees[0])
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text(good + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(sk.io.MalformedInput, match=r"line 3.*not valid JSON"):
        sk.io.import_oasst(store, bad_json)

    tree = json.loads(good)
    del tree["prompt"]["replies"][0]["message_id"]
    no_id = tmp_path / "noid.jsonl"
    no_id.write_text(good + "\n" + json.dumps(tree) + "\n", encoding="utf-8")
    with pytest.raises(sk.io.MalformedInput, match=r"line 2 \(prompt\.replies\[0\]\).*message_id") as info:
        sk.io.import_oasst(store, no_id, session_prefix="x-")
    assert isinstance(info.value, ValueError) and isinstance(info.value, sk.SessionKitError)
    assert info.value.where.startswith("line 2")

    other = tmp_path / "other.jsonl"
    other.write_text('{"hello": 1}\n', encoding="utf-8")
    with pytest.raises(sk.io.MalformedInput, match="line 1"):
        sk.io.import_oasst(store, other)
    with pytest.raises(FileNotFoundError):
        sk.io.import_oasst(store, tmp_path / "missing.jsonl")


def test_gzip_input_is_detected(store, tmp_path, oasst_path):
    import gzip

    head = b"".join(oasst_path.read_bytes().splitlines(keepends=True)[:10])
    gz = tmp_path / "trees.data"  # no suffix: detected from the bytes
    gz.write_bytes(gzip.compress(head))
    sessions = sk.io.import_oasst(store, gz)
    assert len(sessions) == 10
    assert [s.session_id for s in sessions] == [
        "oasst-" + json.loads(line)["message_tree_id"] for line in head.splitlines()
    ]
