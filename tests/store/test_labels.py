"""Labels beyond the conformance suite: the labels migration (version 9) and a writer killed mid-label."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest
from helpers import wait_until

import sessionkit as sk
from sessionkit.store._schema import MIGRATIONS, SCHEMA_VERSION


def _msg(mid: str, text: str, parent_role: str = "user") -> dict:
    return {"id": mid, "role": parent_role, "parts": [{"type": "text", "text": text}]}


#: The version that added labels (the ledger's step creating the table).
LABELS = next(m.version for m in MIGRATIONS if "sessionkit_labels" in m.note)


def _downgrade_before_labels(store) -> None:
    """Make ``store`` a store of the version before labels: no labels table, nor what later versions
    added (the embeddings table, the runs' meta column), no ledger row for them."""
    eng = store._engine
    with eng.write():
        eng.execute(eng.compile("DROP TABLE {labels}"))
        eng.execute(eng.compile("DROP TABLE {embeddings}"))
        eng.execute(eng.compile("ALTER TABLE {runs} DROP COLUMN meta"))
        if store.settings.engine == "duckdb":
            eng.execute("DROP SEQUENCE sessionkit_label_seq")
        eng.execute(eng.compile("DELETE FROM {migrations} WHERE version >= ?"), (LABELS,))
        eng.execute(eng.sql["meta_put"], ("schema_version", str(LABELS - 1)))


@pytest.mark.parametrize(
    "variant",
    [
        "sqlite-file",
        pytest.param("duckdb-file", marks=pytest.mark.slow),
        pytest.param("postgresql", marks=pytest.mark.slow),
    ],
)
def test_a_store_from_before_labels_gains_the_labels_table_and_keeps_everything(variant, new_store):
    store = new_store(variant)
    s = store.session("s")
    for i in range(6):
        s.append(_msg(f"m{i}", f"message {i} about kiwis", ("user", "assistant")[i % 2]))
    s.append(_msg("side", "a branch about kiwis"), parent_id="m2")
    store.run_log.begin("s", "s.1", "go")
    store.run_log.append_events("s", [{"run_id": "s.1", "kind": "run.start"}])
    store.session_records.put("s", "note", [(1, {"k": "v"})])
    before = {
        "history": s.get_history(),
        "nodes": s.nodes(),
        "runs": store.runs("s"),
        "events": store.events("s"),
        "records": store.session_records.get("s", "note"),
    }
    _downgrade_before_labels(store)
    target = store.path  # (a PostgreSQL store's URL names its schema)
    store.close()
    with sk.open_store(target) as again:
        assert again.stats()["schema_version"] == SCHEMA_VERSION
        ledger = [row[0] for row in again._engine.ledger()]
        assert [v for v in ledger if v >= LABELS - 1] == list(range(LABELS - 1, SCHEMA_VERSION + 1))
        s = again.session("s")
        after = {
            "history": s.get_history(),
            "nodes": s.nodes(),
            "runs": again.runs("s"),
            "events": again.events("s"),
            "records": again.session_records.get("s", "note"),
        }
        assert after == before
        assert again.labels() == []
        made = s.add_label("side", "upgraded", rating=1)
        assert again.labels() == [made]
        assert [h.id for h in again.search("kiwis", labels="upgraded")] == ["side"]
    with sk.open_store(target) as third:  # opened at the current version: nothing to migrate, the label is there
        assert third.labels() == [made]


_LABEL_WRITER = """
import sys
import sessionkit as sk
store = sk.open_store(sys.argv[1])
s = store.session("s")
n = 0
while True:
    label = s.add_label(f"m{n % 5}", f"tag{n % 7}", rating=n, note="x" * (n % 300), author="writer")
    sys.stdout.write(f"ok {label.id} {n}\\n")
    sys.stdout.flush()
    if n % 9 == 8:
        s.remove_label(label.id)
        sys.stdout.write(f"removed {label.id}\\n")
        sys.stdout.flush()
    n += 1
"""


@pytest.mark.kill
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
@pytest.mark.parametrize("name", ["labels.db", pytest.param("labels.duckdb", marks=pytest.mark.slow)])
def test_a_writer_killed_while_labelling_loses_no_returned_label(tmp_path, name):
    path = tmp_path / name
    with sk.open_store(path) as store:
        s = store.session("s")
        for i in range(5):
            s.append(_msg(f"m{i}", f"message {i}"))
        kept = s.add_label("m0", "before", author="parent")
    proc = subprocess.Popen(
        [sys.executable, "-c", _LABEL_WRITER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.endswith("\n"):  # a line cut short by the kill is no report
                lines.append(line.split("\n")[0])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until(lambda: len(lines) >= 60 or proc.poll() is not None, what="60 labels written")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    added = {line.split()[1]: int(line.split()[2]) for line in lines if line.startswith("ok ")}
    removed = {line.split()[1] for line in lines if line.startswith("removed ")}
    assert len(added) >= 50
    with sk.open_store(path) as store:
        labels = {x.id: x for x in store.labels(author="writer")}
        last = max(added.values())
        for ident, n in added.items():
            if ident in removed:
                assert ident not in labels
                continue
            if ident not in labels and n == last and n % 9 == 8:
                continue  # its removal, the writer's last act, committed before the kill cut its report
            label = labels[ident]  # returned to the writer: committed, whole
            assert (label.message_id, label.tag, label.rating, label.note) == (
                f"m{n % 5}",
                f"tag{n % 7}",
                float(n),
                "x" * (n % 300),
            )
        assert len(set(labels) - set(added)) <= 1  # at most the one the kill cut short of its report
        assert store.labels(author="parent") == [kept]
        # still a store that reads and writes
        assert [m["id"] for m in store.session("s").get_history()] == [f"m{i}" for i in range(5)]
        more = store.session("s").add_label("m4", "after")
        assert store.labels(tag="after") == [more]


@pytest.mark.parametrize("variant", ["sqlite-file", pytest.param("postgresql", marks=pytest.mark.slow)])
def test_the_analysis_cache_drops_removed_labels_without_reading_messages_again(variant, new_store):
    store = new_store(variant)
    s = store.session("s")
    s.append_many([_msg(f"m{i}", f"message {i}") for i in range(4)])
    made = [s.add_label(f"m{i}", "seen", rating=i) for i in range(4)]
    other = sk.open_store(store.path)  # a second store object: its writes reach this cache by the change log
    try:
        assert store.sql("SELECT id FROM labels ORDER BY seq")["id"].tolist() == [x.id for x in made]
        reads = store._engine._analysis.reads  # message rows the cache read from the store so far
        assert other.remove_label(made[1].id) and other.session("s").remove_label(made[3].id)
        got = store.sql("SELECT id, rating FROM labels ORDER BY seq")
        assert got["id"].tolist() == [made[0].id, made[2].id]
        assert got["rating"].tolist() == [0.0, 2.0]
        other.session("s").delete("m2", subtree=True)  # its label goes with it, in the cache too
        assert store.sql("SELECT id FROM labels")["id"].tolist() == [made[0].id]
        assert store._engine._analysis.reads == reads + 2  # (the deleted message's session, read again)
    finally:
        other.close()


@pytest.mark.parametrize("field", ["note", "author"])
def test_a_nul_in_a_label_is_refused_alike_on_every_engine(engine, new_store, field):
    """PostgreSQL text cannot hold NUL: every engine refuses it in a note or an author with
    InvalidLabel naming the field (so a label that one engine holds copies to any other)."""
    store = new_store(engine)
    s = store.session("s")
    s.append(_msg("m0", "hello"))
    with pytest.raises(sk.InvalidLabel, match=rf"label's {field}.*NUL"):
        s.add_label("m0", "good", **{field: "a\x00b"})
    assert s.labels() == []
    s.add_label("m0", "good", **{field: "a b"})  # the same label without the NUL is taken
    assert [getattr(lab, field) for lab in s.labels()] == ["a b"]
