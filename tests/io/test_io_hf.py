"""A dataset of the store as a Hugging Face ``datasets.Dataset`` (sk.io.to_hf_dataset,
docs/judging.md). The conversion is above the store: one engine (SQLite) is enough."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

import sessionkit as sk


@pytest.mark.slow
def test_a_dataset_becomes_a_hf_dataset_of_its_items(tmp_path, new_store, tau_records):
    datasets = pytest.importorskip("datasets")
    store = new_store("sqlite", folder=tmp_path)
    for i, rec in enumerate(tau_records[:8]):
        sk.io.import_openai(store.session(f"tau-{i}"), rec["traj"])
    s = store.session("tau-3")
    turns = store.sql("SELECT session_id, reply_id FROM turns WHERE reply_id IS NOT NULL ORDER BY session_id, user_id")
    first_reply = turns[turns.session_id == "tau-3"].reply_id.iloc[0]
    s.add_label(first_reply, "polite")
    s.add_label(first_reply, "on-topic", source="code", scorer="check@1")
    # a reply with numbers and nested tool input, and a turn taken at a user message (no reference)
    s.append(
        {
            "id": "x1",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "done"},
                {
                    "type": "tool-refund",
                    "toolCallId": "r1",
                    "state": "output-available",
                    "input": {"amount": 0.30000000000000004, "legs": [1, {"seat": None}]},
                    "output": {"ok": True, "total": 12345678901234567},
                },
            ],
        }
    )
    s.append({"id": "x2", "role": "user", "parts": [{"type": "text", "text": "and one more thing"}]})
    v1 = store.dataset("turns", query="SELECT session_id, reply_id AS message_id FROM turns WHERE reply_id IS NOT NULL")
    v2 = store.dataset("turns", units=[("tau-3", "x1"), ("tau-3", "x2"), ("tau-0", turns.reply_id.iloc[0])])

    latest = sk.io.to_hf_dataset(store, "turns")
    assert isinstance(latest, datasets.Dataset)
    items = store.dataset_items("turns")
    assert latest.num_rows == len(items) == 3 and v2.version == 2
    assert list(latest) == [it.to_dict() for it in items]  # history, reference and tags as stored
    assert latest[0]["reference"]["parts"][1]["input"] == {"amount": 0.30000000000000004, "legs": [1, {"seat": None}]}
    assert latest[1]["reference"] is None and latest[1]["history"][-1]["id"] == "x2"
    assert "version 2" in latest.info.description and "3 turns" in latest.info.description

    first = sk.io.to_hf_dataset(store, "turns", version=1)
    items = store.dataset_items("turns", 1)
    assert first.num_rows == len(items) == v1.item_count > 20
    assert list(first) == [it.to_dict() for it in items]
    tagged = [row for row in first if row["message_id"] == first_reply]
    assert [row["tags"] for row in tagged] == [["on-topic", "polite"]]
    assert all(m["role"] in ("user", "assistant", "system") for row in first for m in row["history"])
    assert "chosen by: SELECT session_id" in first.info.description

    # the columns of the Parquet export's dataset_items file, in its order
    sk.io.export_parquet(store, tmp_path / "export")
    exported = pq.read_table(tmp_path / "export" / "dataset_items.parquet")
    assert first.column_names == exported.column_names == list(sk.io.hf.HF_COLUMNS)
    rows = [r for r in exported.to_pylist() if r["version"] == 1]
    assert [json.loads(r["history"]) for r in rows] == first["history"]

    with pytest.raises(sk.DatasetNotFound, match="'nothing'"):
        sk.io.to_hf_dataset(store, "nothing")
    with pytest.raises(sk.DatasetNotFound, match="no version 9"):
        sk.io.to_hf_dataset(store, "turns", version=9)


def test_import_sessionkit_loads_no_datasets_and_its_absence_says_what_to_install():
    code = (
        "import sys, sessionkit as sk, sessionkit.io\n"
        "loaded = 'datasets' in sys.modules\n"
        "store = sk.open_store()\n"
        "store.session('s').append({'id': 'u', 'role': 'user', 'parts': [{'type': 'text', 'text': 'hi'}]})\n"
        "store.dataset('d', units=[('s', 'u')])\n"
        "sys.modules['datasets'] = None  # what an environment without the package answers: ImportError\n"
        "try:\n"
        "    sk.io.to_hf_dataset(store, 'd')\n"
        "except sk.MissingDependency as exc:\n"
        "    print(loaded, isinstance(exc, ImportError), exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    loaded, is_import_error, message = out.stdout.strip().split(" ", 2)
    assert (loaded, is_import_error) == ("False", "True")
    assert "pip install datasets" in message
