"""Progress: quiet by default outside a terminal, shown on request, or reported to a callable."""

from __future__ import annotations

import pytest

import sessionkit as sk


@pytest.fixture
def store():
    """Progress does not depend on the engine: one SQLite store is enough."""
    with sk.open_store() as s:
        yield s


def test_quiet_by_default_when_not_interactive(store, oasst_path, capfd):
    sk.io.import_oasst(store, oasst_path)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_callable_receives_counts(store, oasst_path, hh_path):
    seen = []
    sk.io.import_oasst(store, oasst_path, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (100, 100) and len(seen) == 100
    pairs = []
    sk.io.import_hh(store, hh_path, progress=lambda done, total: pairs.append(done))
    assert pairs[-1] == 2312


def test_progress_true_writes_to_stderr(store, oasst_path, capsys):
    sk.io.import_oasst(store, oasst_path, progress=True)
    err = capsys.readouterr().err
    assert "en_100_tree.jsonl" in err and "100" in err


def test_plain_counter_without_tqdm(store, oasst_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    sk.io.import_oasst(store, oasst_path, progress=True)
    err = capsys.readouterr().err
    assert err.rstrip().endswith("importing en_100_tree.jsonl: 100/100 lines")


def test_bad_progress_value(store, oasst_path):
    with pytest.raises(TypeError, match="progress"):
        sk.io.import_oasst(store, oasst_path, progress="yes")


def test_auto_mode_shows_only_long_inputs_in_a_terminal(monkeypatch):
    from sessionkit.io import _common

    monkeypatch.setattr(_common, "_interactive", lambda: True)
    assert _common.Progress(None, total=10, desc="x", unit="lines")._plain is False
    assert _common.Progress(None, total=10, desc="x", unit="lines")._bar is None
    long = _common.Progress(None, total=5000, desc="x", unit="lines")
    assert long._bar is not None or long._plain
    long.close()
    monkeypatch.setattr(_common, "_interactive", lambda: False)
    quiet = _common.Progress(None, total=5000, desc="x", unit="lines")
    assert quiet._bar is None and not quiet._plain
