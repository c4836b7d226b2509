"""Datasets (docs/judging.md): turns or paths frozen under a name and version, on every engine."""

from __future__ import annotations

import pytest

import sessionkit as sk
from sessionkit.store._schema import MIGRATIONS, SCHEMA_VERSION


def _m(mid: str, role: str, text: str) -> dict:
    return {"id": mid, "role": role, "parts": [{"type": "text", "text": text}]}


def _fill(store) -> None:
    """Two sessions: ``a`` with two turns and a branch (a user message without a reply), ``b`` with one turn."""
    a = store.session("a")
    a.append(_m("u1", "user", "what is a kiwi?"))
    a.append(_m("r1", "assistant", "a bird"))
    a.append(_m("u2", "user", "does it fly?"))
    a.append(_m("r2", "assistant", "no"))
    a.append(_m("u2b", "user", "does it swim?"), parent_id="r1")
    b = store.session("b")
    b.append(_m("u1", "user", "hello"))
    b.append(_m("r1", "assistant", "hi"))
    a.add_label("r2", "good")
    a.add_label("r2", "short", rating=1.0)
    b.add_label("r1", "bad")


def _ids(messages) -> list[str]:
    return [m["id"] for m in messages]


def test_freezing_listing_reading_and_a_second_version(engine, new_store):
    store = new_store(engine)
    _fill(store)
    info = store.dataset(
        "replies", query="SELECT session_id, reply_id AS message_id FROM turns WHERE reply_id IS NOT NULL"
    )
    assert (info.name, info.version, info.level, info.item_count) == ("replies", 1, "turn", 3)
    items = store.dataset_items("replies")
    got = {(it.session_id, it.message_id): it for it in items}
    assert sorted(got) == [("a", "r1"), ("a", "r2"), ("b", "r1")]
    r2 = got["a", "r2"]
    assert _ids(r2.history) == ["u1", "r1", "u2"]
    assert r2.reference is not None and r2.reference["id"] == "r2"
    assert r2.reference["parts"][0]["text"] == "no"
    assert r2.tags == ["good", "short"]
    assert got["b", "r1"].tags == ["bad"] and got["a", "r1"].tags == []
    assert [it.n for it in items] == list(range(3))

    second = store.dataset("replies", units=[("b", "r1"), ("a", "u2")])
    assert (second.version, second.item_count) == (2, 2)
    latest = store.dataset_items("replies")
    assert [(it.session_id, it.message_id) for it in latest] == [("b", "r1"), ("a", "u2")]
    # a user message: no reference, the history ends with it
    assert latest[1].reference is None and _ids(latest[1].history) == ["u1", "r1", "u2"]
    assert len(store.dataset_items("replies", version=1)) == 3
    assert [(d.name, d.version, d.item_count) for d in store.datasets()] == [("replies", 1, 3), ("replies", 2, 2)]

    paths = store.dataset("paths", query="SELECT session_id, leaf_id AS message_id FROM paths", level="path", version=7)
    assert (paths.version, paths.level, paths.item_count) == (7, "path", 3)

    assert store.delete_dataset("replies", version=1) == 1
    assert [(d.name, d.version) for d in store.datasets()] == [("paths", 7), ("replies", 2)]
    assert store.delete_dataset("replies") == 1
    with pytest.raises(sk.DatasetNotFound, match="replies"):
        store.dataset_items("replies")


def test_units_from_a_scorer_run_and_the_frozen_history_outlives_edits(engine, new_store):
    store = new_store(engine)
    _fill(store)
    seen = []

    @sk.scorers.scorer(name="keep")
    def keep(unit):
        seen.append(unit)

    store.score(keep, where="session_id = 'a' AND reply_id = 'r2'", progress=False)
    assert len(seen) == 1
    store.dataset("edits", units=seen)
    a = store.session("a")
    a.update(_m("u1", "user", "what is a kiwi fruit?"))
    a.update(_m("r2", "assistant", "yes"))
    a.add_label("r2", "later")
    store.delete_session("a")
    (item,) = store.dataset_items("edits")
    assert item.history[0]["parts"][0]["text"] == "what is a kiwi?"
    assert item.reference["parts"][0]["text"] == "no"
    assert item.tags == ["good", "short"]


def test_bad_input_is_refused_and_nothing_is_stored(new_store):
    store = new_store("sqlite")
    _fill(store)
    with pytest.raises(sk.InvalidDataset, match="level"):
        store.dataset("x", units=[("a", "r1")], level="session")
    with pytest.raises(sk.InvalidDataset, match="session_id and message_id"):
        store.dataset("x", query="SELECT session_id, user_id FROM turns")
    with pytest.raises(sk.InvalidDataset, match="empty"):
        store.dataset("x", query="SELECT session_id, reply_id AS message_id FROM turns WHERE false")
    with pytest.raises(sk.InvalidDataset, match="query or by units"):
        store.dataset("x")
    with pytest.raises(sk.InvalidDataset, match="name"):
        store.dataset(" x", units=[("a", "r1")])
    with pytest.raises(sk.InvalidDataset, match="units"):
        store.dataset("x", units=["a"])
    with pytest.raises(sk.MessageNotFound, match="nope"):
        store.dataset("x", units=[("a", "r1"), ("a", "nope")])
    assert store.datasets() == []
    store.dataset("x", units=[("a", "r1")], version=3)
    with pytest.raises(sk.InvalidDataset, match="version 3 is stored already"):
        store.dataset("x", units=[("a", "r2")], version=3)
    with pytest.raises(sk.DatasetNotFound, match="no version 2"):
        store.dataset_items("x", version=2)
    with pytest.raises(sk.DatasetNotFound, match="'y'"):
        store.delete_dataset("y")
    assert [(d.version, d.item_count) for d in store.datasets()] == [(3, 1)]


def test_a_dataset_survives_reopening_the_store(engine, new_store):
    store = new_store(engine)
    _fill(store)
    store.dataset("kept", units=[("a", "r2")])
    before = store.dataset_items("kept")
    target = store.path
    store.close()
    with sk.open_store(target) as again:
        assert again.dataset_items("kept") == before
        assert [d.to_dict() for d in again.datasets()][0]["item_count"] == 1


DATASETS = next(m.version for m in MIGRATIONS if "sessionkit_datasets" in m.note)


def test_a_store_from_before_datasets_gains_them(engine, new_store):
    store = new_store(engine)
    _fill(store)
    eng = store._engine
    with eng.write():
        eng.execute(eng.compile("DROP TABLE {dataset_items}"))
        eng.execute(eng.compile("DROP TABLE {datasets}"))
        eng.execute(eng.compile("DELETE FROM {migrations} WHERE version >= ?"), (DATASETS,))
        eng.execute(eng.sql["meta_put"], ("schema_version", str(DATASETS - 1)))
    target = store.path
    history = store.session("a").get_history()
    store.close()
    with sk.open_store(target) as again:
        assert again.stats()["schema_version"] == SCHEMA_VERSION
        assert again.session("a").get_history() == history
        assert again.datasets() == []
        again.dataset("after", units=[("a", "r1")])
        assert again.dataset_items("after")[0].reference["id"] == "r1"


def test_the_views_of_store_sql_follow_the_datasets(engine, new_store):
    store = new_store(engine)
    _fill(store)
    assert store.sql_arrow("SELECT count(*) AS n FROM datasets").column("n").to_pylist() == [0]  # (the cache loads)
    store.dataset("d", units=[("a", "r2"), ("b", "r1")])
    store.dataset("d", units=[("a", "r1")])
    rows = store.sql_arrow("SELECT name, version, level, item_count FROM datasets ORDER BY version").to_pylist()
    assert rows == [
        {"name": "d", "version": 1, "level": "turn", "item_count": 2},
        {"name": "d", "version": 2, "level": "turn", "item_count": 1},
    ]
    items = store.sql_arrow(
        "SELECT session_id, message_id, tags, json_extract_string(reference, '$.id') AS ref,"
        " json_array_length(history) AS h FROM dataset_items WHERE version = 1 ORDER BY n"
    ).to_pylist()
    assert items == [
        {"session_id": "a", "message_id": "r2", "tags": ["good", "short"], "ref": "r2", "h": 3},
        {"session_id": "b", "message_id": "r1", "tags": ["bad"], "ref": "r1", "h": 1},
    ]
    # scoped to sessions, the datasets stay whole (they are no session's)
    assert store.sql_arrow("SELECT count(*) AS n FROM dataset_items", session_ids=["b"]).column("n").to_pylist() == [3]
    store.delete_dataset("d", version=1)
    assert store.sql_arrow("SELECT version FROM datasets").column("version").to_pylist() == [2]
    assert store.sql_arrow("SELECT count(*) AS n FROM dataset_items").column("n").to_pylist() == [1]


def test_jsonl_export_and_import_carry_the_datasets(engine, new_store, tmp_path):
    store = new_store(engine)
    _fill(store)
    store.dataset("d", units=[("a", "r2"), ("b", "r1")])
    store.dataset("d", units=[("a", "u2b")], level="path")
    path = tmp_path / "all.jsonl"
    counts = sk.io.export_jsonl(store, path)
    assert counts["datasets"] == 2
    assert sk.io.export_jsonl(store, tmp_path / "one.jsonl", session_ids=["a"])["datasets"] == 0
    other = new_store(engine)
    sk.io.import_jsonl(other, path)
    assert other.datasets() == store.datasets()
    for version in (1, 2):
        assert other.dataset_items("d", version) == store.dataset_items("d", version)
    sk.io.import_jsonl(other, path)  # again: nothing added
    assert len(other.datasets()) == 2


def test_a_bad_dataset_line_names_its_line(new_store, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"format": "sessionkit", "version": 5}\n{"type": "dataset", "dataset": {"name": "d", "version": 1}}\n'
    )
    with pytest.raises(sk.errors.MalformedInput, match="line 2: invalid dataset"):
        sk.io.import_jsonl(new_store("sqlite"), path)


def test_parquet_export_and_import_carry_the_datasets(engine, new_store, tmp_path):
    store = new_store(engine)
    _fill(store)
    store.dataset("d", units=[("a", "r2"), ("b", "r1")])
    store.dataset("p", query="SELECT session_id, leaf_id AS message_id FROM paths", level="path")
    files = sk.io.export_parquet(store, tmp_path / "out")
    assert {"datasets", "dataset_items"} <= set(files)
    other = new_store(engine)
    sk.io.import_parquet(other, tmp_path / "out")
    assert other.datasets() == store.datasets()
    for info in store.datasets():
        assert other.dataset_items(info.name, info.version) == store.dataset_items(info.name, info.version)
    sk.io.import_parquet(other, tmp_path / "out")  # again: nothing added
    assert len(other.datasets()) == 2
    sk.io.export_parquet(store, tmp_path / "one", session_ids=["a"])
    third = new_store(engine)
    sk.io.import_parquet(third, tmp_path / "one")
    assert third.datasets() == []


def test_copy_store_copies_the_datasets(new_store):
    store = new_store("sqlite")
    _fill(store)
    store.dataset("d", units=[("a", "r2")])
    store.dataset("d", units=[("b", "r1")])
    other = new_store("sqlite")
    assert sk.io.copy_store(store, other)["datasets"] == 2
    assert other.datasets() == store.datasets()
    assert other.dataset_items("d", 1) == store.dataset_items("d", 1)
    assert sk.io.copy_store(store, other, merge=True)["datasets"] == 0
