"""The BranchTree's front end is several files of ``static/`` (``branch_tree*.js``, joined by
``sessionkit.widgets._modules``): every one of them must reach each place the view runs. The
widget's ``_esm`` (the notebook, marimo), a ``to_html`` page, the store viewer's ``modules.js``
as served and as written in a bundle. A file left out anywhere fails here, with no browser."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from helpers import viewer_in_thread

from sessionkit.server import create_view_app
from sessionkit.widgets import BranchTree, viewer
from sessionkit.widgets._modules import STATIC, view_files

TREE_FILES = sorted(STATIC.glob("branch_tree*.js"))
#: What a module's files declare at their top level, and the types their JSDoc declares.
DECLARED = re.compile(
    r"^(?:function|class|const|let)\s+([A-Za-z_$][\w$]*)|@typedef\s+(?:\{[^}]*\}\s+)?([A-Za-z_$][\w$]*)", re.M
)
#: The names of the BranchTree's files (btX functions, BTX classes and types, BT_X constants).
TREE_NAME = re.compile(r"\b(bt[A-Z]\w*|BT[A-Z_]\w*)\b")
#: What other files take from the view's module: offline.js and skLocalModel (common.js) call
#: offline and offlineChange, anywidget and viewer.js call render.
EXPORTED = {"render", "offline", "offlineChange"}


def declared(text: str) -> set[str]:
    return {a or b for a, b in DECLARED.findall(text)}


def assert_whole_tree_module(module: str, where: str) -> None:
    """``module`` holds every BranchTree file unchanged, declares each name they use, and ends
    with the one export of the view's own file."""
    assert len(TREE_FILES) > 1
    for path in TREE_FILES:
        assert path.read_text(encoding="utf-8") in module, f"{path.name} is missing from {where}"
    missing = set(TREE_NAME.findall(module)) - declared(module)
    assert not missing, f"{where} uses names no file of it declares: {sorted(missing)}"
    exports = re.findall(r"^export default \{([^}]*)\};?\s*$", module, re.M)
    assert len(exports) == 1 and module.rstrip().endswith(exports[0] + "};"), f"{where}: one export, at the end"
    keys = {item.split(":")[0].strip() for item in exports[0].split(",")}
    assert keys >= EXPORTED, f"{where} exports {sorted(keys)}"


def modules_of(script: str) -> dict[str, str]:
    """The views' modules from the text of the viewer's ``modules.js``."""
    prefix = "window.SK_MODULES = "
    assert script.startswith(prefix)
    return json.loads(script[len(prefix) :].rstrip().rstrip(";"))


def test_the_files_of_the_tree_are_those_of_its_module():
    files = view_files("branch_tree")
    assert sorted(files) == [p.name for p in TREE_FILES]
    assert files[-1] == "branch_tree.js"  # the file that exports comes last
    # each file but the last declares names of its own, used by a later file
    for k, name in enumerate(files[:-1]):
        later = "\n".join((STATIC / f).read_text(encoding="utf-8") for f in files[k + 1 :])
        own = {n for n in declared((STATIC / name).read_text(encoding="utf-8")) if TREE_NAME.fullmatch(n)}
        assert own & set(TREE_NAME.findall(later)), f"nothing of {name} is used after it"


def test_the_widget_and_its_html_page_carry_every_file(trip):
    assert_whole_tree_module(BranchTree._esm, "BranchTree._esm")
    page = BranchTree(trip).to_html()
    payload = re.search(r'<script type="application/json" id="sk-payload">(.*?)</script>', page, re.S)
    assert payload is not None
    assert_whole_tree_module(json.loads(payload.group(1))["esm"], "the to_html page")


def test_the_viewer_carries_every_file_served_and_bundled(trip, tmp_path: Path):
    assert_whole_tree_module(modules_of(viewer.modules_script())["branch_tree"], "viewer.modules_script()")
    folder = viewer.write_bundle(trip.store, tmp_path / "bundle")
    bundled = modules_of((folder / "modules.js").read_text(encoding="utf-8"))
    assert_whole_tree_module(bundled["branch_tree"], "the bundle's modules.js")
    with viewer_in_thread(create_view_app(trip.store)) as base:
        served = httpx.get(base + "modules.js", timeout=60)
    assert served.status_code == 200
    assert_whole_tree_module(modules_of(served.text)["branch_tree"], "the served modules.js")
