"""Progress: quiet by default outside a terminal, shown on request, or reported to a callable."""

from __future__ import annotations

import gzip
import json

import pytest

import sessionkit as sk


def test_quiet_by_default_when_not_interactive(mem_store, oasst_path, capfd):
    sk.io.import_oasst(mem_store, oasst_path)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_callable_receives_counts(mem_store, oasst_trees, hh_records, tmp_path):
    # a few records of each sample: the count per record is what is checked, not the sample
    oasst = tmp_path / "trees.jsonl"
    oasst.write_text("".join(json.dumps(t) + "\n" for t in oasst_trees[:7]), encoding="utf-8")
    hh = tmp_path / "pairs.jsonl.gz"
    hh.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in hh_records[:5]).encode("utf-8")))
    seen = []
    sk.io.import_oasst(mem_store, oasst, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(n, 7) for n in range(1, 8)]
    pairs = []
    sk.io.import_hh(mem_store, hh, progress=lambda done, total: pairs.append(done))
    assert pairs[-1] == 5


def test_progress_true_writes_to_stderr(mem_store, oasst_path, capsys):
    sk.io.import_oasst(mem_store, oasst_path, progress=True)
    err = capsys.readouterr().err
    assert "en_100_tree.jsonl" in err and "100" in err


def test_plain_counter_without_tqdm(mem_store, oasst_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    sk.io.import_oasst(mem_store, oasst_path, progress=True)
    err = capsys.readouterr().err
    assert err.rstrip().endswith("importing en_100_tree.jsonl: 100/100 lines")


def test_bad_progress_value(mem_store, oasst_path):
    with pytest.raises(TypeError, match="progress"):
        sk.io.import_oasst(mem_store, oasst_path, progress="yes")


def test_auto_mode_shows_only_long_inputs_in_a_terminal(monkeypatch):
    from sessionkit.io import _progress

    monkeypatch.setattr(_progress, "_interactive", lambda: True)
    assert _progress.Progress(None, total=10, desc="x", unit="lines")._plain is False
    assert _progress.Progress(None, total=10, desc="x", unit="lines")._bar is None
    long = _progress.Progress(None, total=5000, desc="x", unit="lines")
    assert long._bar is not None or long._plain
    long.close()
    monkeypatch.setattr(_progress, "_interactive", lambda: False)
    quiet = _progress.Progress(None, total=5000, desc="x", unit="lines")
    assert quiet._bar is None and not quiet._plain
