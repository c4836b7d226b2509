"""The views' front ends as ES modules, joined from the files of ``static/`` (no bundler).

A view's module is ``common.js``, then the files it needs besides (plain scripts whose
top-level names the later files use), then its own file, the one with ``export default``.
Every place a view's front end reaches a browser takes it from here: the widgets' ``_esm``
(the notebook, marimo), the pages of ``to_html`` (which embed ``_esm``) and the store
viewer's ``modules.js`` (served, or written in a bundle that opens with no network).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["STATIC", "VIEW_FILES", "view_files", "join", "view_module"]

STATIC = Path(__file__).parent / "static"

#: The files of a view's module after ``common.js``, in order (its own file last), for the
#: views of more than one file; any other view ``NAME`` is ``NAME.js`` alone.
VIEW_FILES: dict[str, tuple[str, ...]] = {
    "branch_tree": (
        "branch_tree_layout.js",
        "branch_tree_canvas.js",
        "branch_tree_rows.js",
        "branch_tree_panel.js",
        "branch_tree_labels.js",
        "branch_tree_input.js",
        "branch_tree_comm.js",
        "branch_tree.js",
    ),
    "run_view": ("timeline.js", "run_view.js"),
}


def view_files(view: str) -> tuple[str, ...]:
    """The files of ``view``'s module after ``common.js`` (``"branch_tree"``: its eight files)."""
    return VIEW_FILES.get(view, (f"{view}.js",))


def join(*names: str) -> str:
    """``common.js`` and the files ``names`` of ``static/``, in that order, as one text."""
    return "\n".join((STATIC / name).read_text(encoding="utf-8") for name in ("common.js", *names))


def view_module(view: str) -> str:
    """The ES module of ``view`` (a file name of ``static/`` without ``.js``), whole."""
    return join(*view_files(view))
