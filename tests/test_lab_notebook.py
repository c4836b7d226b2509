"""``sessionkit lab STORE``'s own notebook names the tour notebooks copied beside it, from
the files themselves (no count written by hand that goes stale as notebooks are added)."""

from __future__ import annotations

import json
from pathlib import Path

from sessionkit import _lab

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def _intro(path: Path) -> str:
    return "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"])


def test_the_store_notebook_names_the_tour_notebooks_beside_it(tmp_path):
    _lab.copy_tour(tmp_path, NOTEBOOKS)
    numbers = sorted(p.name[:2] for p in NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    intro = _intro(_lab.store_notebook(tmp_path, "chats.db"))
    assert f"({numbers[0]} to {numbers[-1]})" in intro, intro
    more = f"{int(numbers[-1]) + 1:02d}"
    (tmp_path / f"{more}-more.ipynb").write_text("{}", encoding="utf-8")  # one more beside it
    assert f"({numbers[0]} to {more})" in _intro(_lab.store_notebook(tmp_path, "chats.db"))
    alone = tmp_path / "alone"
    alone.mkdir()
    assert "tour notebooks" not in _intro(_lab.store_notebook(alone, "chats.db"))
