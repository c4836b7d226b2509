"""The architecture, checked: the import arrows and the sub-packages' public surfaces.

Three rules:

* imports follow the layers ``errors, messages, parts <- store <- agent, analysis, io,
  aio <- widgets <- server <- cli``, with no cycle between sub-packages; the contracts live
  in ``pyproject.toml`` (``[tool.importlinter]``) and import-linter checks them;
* above the store, code uses only the store's public names: no module outside
  ``sessionkit/store`` touches a private name the store defines (``x._records``,
  ``from ..store._core import _choose_ranges``). Checked here with ``ast``;
* no module imports a private module or name of another sub-package
  (``sessionkit.agent._loading``, ``from ..messages import _path``): what one
  sub-package needs of another is public there.

Each rule also runs on a small synthetic offender, so a checker that stopped seeing
anything would fail too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sessionkit"
STORE = PACKAGE / "store"
CONVENIENCES = "sessionkit.store._conveniences"


# ---------------------------------------------------------------------------
# private store names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_")


def store_private_names(store_dir: Path) -> set[str]:
    """Every ``_name`` the store package defines: functions, classes, attributes it sets, globals."""
    names: set[str] = set()
    for path in store_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _is_private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_private(node.attr):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _is_private(node.id):
                names.add(node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_private(node.target.id):
                names.add(node.target.id)  # a class field such as ``_tree_index: dict = field(...)``
    return names


def private_uses(source: str, private: set[str], where: str = "<module>") -> list[str]:
    """Uses of ``private`` names in one module outside the store.

    A use is ``<expr>._name`` whose receiver is not ``self``/``cls`` (a module's own
    objects may keep private state, but not under a name the store also uses), or
    ``from <...store...> import _name``.
    """
    uses = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in private:
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            uses.append(f"{where}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and "store" in node.module.split("."):
            for alias in node.names:
                if _is_private(alias.name):
                    uses.append(f"{where}:{node.lineno}: import {alias.name}")
    return uses


def test_no_module_above_the_store_uses_a_private_store_name():
    private = store_private_names(STORE)
    assert {"_check", "_engine", "_choose_ranges", "_skeleton"} <= private  # the checker sees the store
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if STORE in path.parents:
            continue
        found += private_uses(path.read_text(encoding="utf-8"), private, str(path.relative_to(ROOT)))
    assert found == [], "private store names used above the store:\n" + "\n".join(found)


def test_the_private_name_check_catches_an_offender():
    private = store_private_names(STORE)
    offender = textwrap.dedent(
        """
        from ..store._core import _choose_ranges, Tree

        def records(store, session):
            store._emit(None)                    # a private Store method
            session._eng().nodes("s")            # a private Session method
            return self._check, cls._engine      # own state: allowed

        class Widget:
            def show(self, other):
                return other._sessions           # another object's, named like the store's
        """
    )
    uses = private_uses(offender, private, "bad.py")
    assert sorted(u.split(": ", 1)[1] for u in uses) == ["._emit", "._eng", "._sessions", "import _choose_ranges"]
    assert not private_uses("def f(self):\n    return self._records\n", private)


# ---------------------------------------------------------------------------
# private modules and names of other sub-packages


def _imported(path: Path, source: str) -> list[tuple[int, list[str]]]:
    """``(line, ["sessionkit", "agent", "_loading", "load_agent"])`` for each name ``source``
    (the module at ``path`` under the package) imports from sessionkit."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            out += [(node.lineno, module + [alias.name]) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name.split(".")) for alias in node.names]
    return [(line, name) for line, name in out if name[0] == "sessionkit"]


def foreign_private_imports(path: Path, source: str) -> list[str]:
    """Imports of a private module or name (``_x``) of another sub-package of sessionkit."""
    rel = path.relative_to(ROOT).with_suffix("").parts
    own = rel[1] if len(rel) > 2 else rel[-1]  # sessionkit/<own>/... or the module sessionkit/<own>.py
    found = []
    for line, name in _imported(path, source):
        if len(name) < 3 or name[1] == own:
            continue
        if any(_is_private(part) for part in name[2:]):
            found.append(f"{path.relative_to(ROOT)}:{line}: {'.'.join(name)}")
    return found


@pytest.mark.slow
def test_no_module_imports_a_private_module_or_name_of_another_sub_package():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += foreign_private_imports(path, path.read_text(encoding="utf-8"))
    assert found == [], "private names of another sub-package imported:\n" + "\n".join(found)


def test_the_sub_package_check_catches_an_offender():
    server = PACKAGE / "server" / "_worker.py"
    offender = textwrap.dedent(
        """
        from sessionkit.agent._loading import load_agent
        from ..analysis import _tables
        from ..messages import _path, check_text
        from . import _records
        from ..agent import load_agent as public
        import sessionkit.io._common
        """
    )
    found = [f.split(": ", 1)[1] for f in foreign_private_imports(server, offender)]
    assert found == [
        "sessionkit.agent._loading.load_agent",
        "sessionkit.analysis._tables",
        "sessionkit.messages._path",
        "sessionkit.io._common",
    ]


# ---------------------------------------------------------------------------
# import arrows (import-linter)


def _lint(cwd: Path, config: Path, env_path: str) -> subprocess.CompletedProcess:
    code = (
        "import sys; from importlinter.cli import lint_imports; "
        f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))"
    )
    env = dict(os.environ, PYTHONPATH=env_path)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _contracts() -> list[dict]:
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["importlinter"]["contracts"]


def test_imports_follow_the_layers_and_form_no_cycle():
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    done = _lint(ROOT, ROOT / "pyproject.toml", str(ROOT))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(_contracts())} kept, 0 broken" in done.stdout


def test_the_lazy_conveniences_are_the_only_exception():
    ignored = [rule for contract in _contracts() for rule in contract.get("ignore_imports", ())]
    assert ignored, "the store's conveniences reach analysis and widgets: they must be listed"
    assert {rule.split(" -> ")[0].strip() for rule in ignored} == {CONVENIENCES}
    # and that module is the only one of the store that names an upper layer
    upper = ("analysis", "widgets", "server", "cli", "agent", "io")
    seen = set()
    for path in STORE.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        seen.add(module)
        for _, name in _imported(path, path.read_text(encoding="utf-8")):
            if name[1] in upper:
                assert module == CONVENIENCES, f"{module} imports {'.'.join(name)}"
    assert {CONVENIENCES, "sessionkit.store.sql.cache", "sessionkit.store.engines.sqlite.engine"} <= seen


def _tiny_package(tmp_path: Path) -> Path:
    """A tiny package shaped like sessionkit (its sub-packages, the store's wings) that keeps
    every contract: ``tmp_path/src/sessionkit``."""
    pkg = tmp_path / "src" / "sessionkit"
    for name in ("cli", "_demo", "_lab", "errors", "messages", "parts", "aio"):
        (pkg / f"{name}.py").parent.mkdir(parents=True, exist_ok=True)
        (pkg / f"{name}.py").write_text("")
    for sub in (
        "server",
        "widgets",
        "prototyping",
        "integrations",
        "scorers",
        "agent",
        "analysis",
        "io",
        "store",
        "testing",
    ):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "widgets" / "display.py").write_text("")
    (pkg / "agent" / "models.py").write_text("")
    (pkg / "store" / "_conveniences.py").write_text(
        "from ..analysis import x\nfrom ..widgets import display\n"
        "from ..agent import models\nfrom ..io import Progress\n"
    )
    (pkg / "store" / "_core.py").write_text("from .. import messages\n")
    (pkg / "cli.py").write_text("from . import server\n")
    for wing in ("engines", "engines/sqlite", "engines/duckdb", "engines/postgresql", "sql"):
        (pkg / "store" / wing).mkdir(parents=True, exist_ok=True)
        (pkg / "store" / wing / "__init__.py").write_text("")
    (pkg / "store" / "sql" / "cache.py").write_text("from .. import _core\n")
    for engine in ("sqlite", "duckdb", "postgresql"):
        (pkg / "store" / "engines" / engine / "engine.py").write_text("from ... import _core\nfrom .. import search\n")
        (pkg / "store" / "engines" / engine / "search.py").write_text("from ...sql import cache\n")
    (pkg / "store" / "__init__.py").write_text(
        "def open_store():\n    from .engines.sqlite import engine\n    from .engines.duckdb import engine\n"
    )
    return pkg


def test_the_layers_contract_catches_an_offender(tmp_path):
    """A copy of the contracts over a tiny package whose store imports the widgets fails."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    pkg = _tiny_package(tmp_path)
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    good = _lint(tmp_path, config, str(tmp_path / "src"))
    assert good.returncode == 0, good.stdout + good.stderr
    (pkg / "store" / "_core.py").write_text("from .. import messages\nfrom ..widgets import display\n")
    (pkg / "server" / "__init__.py").write_text("from .. import cli\n")
    bad = _lint(tmp_path, config, str(tmp_path / "src"))
    assert bad.returncode != 0
    assert "sessionkit.store._core -> sessionkit.widgets.display" in bad.stdout
    assert "sessionkit.server -> sessionkit.cli" in bad.stdout


def test_the_wings_contracts_catch_an_offender(tmp_path):
    """The store's wings: an engine imported by the core, by store.sql, by a layer above or
    by another engine breaks a contract, each named with the import."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    pkg = _tiny_package(tmp_path)
    config = tmp_path / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    good = _lint(tmp_path, config, str(tmp_path / "src"))
    assert good.returncode == 0, good.stdout + good.stderr
    (pkg / "store" / "sql" / "cache.py").write_text("from .. import _core\nfrom ..engines.postgresql import engine\n")
    (pkg / "store" / "_core.py").write_text("from .. import messages\nfrom .engines.sqlite import search\n")
    (pkg / "analysis" / "__init__.py").write_text("from ..store.engines.duckdb import engine\n")
    (pkg / "store" / "engines" / "duckdb" / "search.py").write_text("from ..sqlite import search\n")
    bad = _lint(tmp_path, config, str(tmp_path / "src"))
    assert bad.returncode != 0
    out = " ".join(bad.stdout.split())  # (import-linter wraps long lines)
    for contract in ("engines-behind-open-store", "engines-apart", "core-and-sql-without-engines"):
        name = next(c["name"] for c in _contracts() if c["id"] == contract)
        assert f"{name} BROKEN" in out
    assert "sessionkit.store.sql.cache -> sessionkit.store.engines.postgresql.engine" in out
    assert "sessionkit.store._core -> sessionkit.store.engines.sqlite.search" in out
    assert "sessionkit.analysis -> sessionkit.store.engines.duckdb.engine" in out
    assert "sessionkit.store.engines.duckdb.search -> sessionkit.store.engines.sqlite.search" in out
