"""docs/architecture.md's recipe for adding a column to messages, applied and tried.

The recipe (a property of ``Prepared``, a ``Column`` declared in ``TABLES["messages"]``, a
``Migration`` with the next free version) is applied here to a scratch copy of the package,
never to the repository's files, and run in a fresh interpreter on that copy: a store
created by it has the column, and a store written by the repository's code at the current
version, opened by it, is migrated to the new version with the column filled in for the
rows it held. The page shows the same recipe: every line the recipe adds is an added line
of the page's diff, so a ledger that grows (the next free version moves) or a recipe that
changes fails here until the page follows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import msg

import sessionkit as sk
from sessionkit.store import _schema

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"

#: The column the recipe adds, and the version of its migration: the ledger's next one.
COLUMN = "n_chars"
VERSION = _schema.SCHEMA_VERSION + 1

#: (file of the package, the line the addition goes before, the lines added).
RECIPE: tuple[tuple[str, str, str], ...] = (
    (
        "messages.py",
        "    @property\n    def message(self) -> dict:\n",
        "    @property\n"
        f"    def {COLUMN}(self) -> int:\n"
        f'        """The characters of the message\'s text (the ``{COLUMN}`` column)."""\n'
        "        return len(self.text)\n"
        "\n",
    ),
    (
        "store/_schema.py",
        "                # (read by the analysis copy only for the views that parse it: tool_calls, turns)\n",
        f'                Column("{COLUMN}", "int", null=True, prepared=True),\n',
    ),
    (
        "store/_schema.py",
        ")\n\n#: The schema version every engine writes",
        "    Migration(\n"
        f"        {VERSION},\n"
        f'        "{COLUMN}: the characters of a message\'s text",\n'
        f'        {{"*": (_add_columns("messages", ("{COLUMN}",)),'
        f' "UPDATE {{messages}} SET {COLUMN} = length({{row_text}})")}},\n'
        "    ),\n",
    ),
)


def apply_recipe(package: Path) -> None:
    """The recipe's additions written into the package copy at ``package``."""
    for name, before, added in RECIPE:
        path = package / name
        source = path.read_text(encoding="utf-8")
        assert source.count(before) == 1, f"{name}: the place of the addition is not found once"
        path.write_text(source.replace(before, added + before), encoding="utf-8")


#: Run by the scratch copy: each store opened (the old one migrated, the new one created),
#: a message appended, and what its messages table holds printed as JSON.
PROBE = textwrap.dedent(
    """
    import json, sys
    import sessionkit as sk
    from sessionkit.store import _schema

    args = json.loads(sys.argv[1])
    assert sk.__file__.startswith(args["scratch"]), sk.__file__
    out = {"declared": _schema.SCHEMA_VERSION}
    for role in ("old", "new"):
        store = sk.open_store(args[role])
        try:
            after = {"id": role + "-after", "role": "user", "parts": [{"type": "text", "text": "after the column"}]}
            store.session("recipe").append(after)
            eng = store._engine
            rows = eng.fetch(eng.compile("SELECT id, {row_text}, %s FROM {messages} ORDER BY seq" % args["column"]))
            out[role] = {
                "version": store.stats()["schema_version"],
                "columns": sorted(eng.table_columns("messages")),
                "rows": [list(r) for r in rows],
            }
        finally:
            store.close()
    print(json.dumps(out))
    """
)


def _target(engine: str, folder: Path, name: str, request: pytest.FixtureRequest) -> str:
    if engine == "postgresql":
        request.getfixturevalue("pg_url")  # skips, or fails under CI=true, without a server
        from store.pg_cluster import new_store_url

        return new_store_url()
    return str(folder / f"{name}{'.db' if engine == 'sqlite' else '.duckdb'}")


def test_the_recipe_gives_a_new_store_and_a_migrated_one_the_column(engine, tmp_path, request):
    assert COLUMN not in {c.name for c in _schema.TABLES["messages"].columns}  # (not in the repository's schema)
    scratch = tmp_path / "scratch"
    shutil.copytree(ROOT / "sessionkit", scratch / "sessionkit", ignore=shutil.ignore_patterns("__pycache__"))
    apply_recipe(scratch / "sessionkit")

    # a store written by the repository's code, at the current version
    old = _target(engine, tmp_path, "old", request)
    store = sk.open_store(old)
    store.session("recipe").append_many([msg("a", "one"), msg("b", "twelve chars")])
    assert store.stats()["schema_version"] == VERSION - 1
    store.close()

    new = _target(engine, tmp_path, "new", request)
    args = {"scratch": str(scratch), "old": old, "new": new, "column": COLUMN}
    env = dict(os.environ, PYTHONPATH=str(scratch))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["declared"] == VERSION
    for role, ids in (("old", ["a", "b", "old-after"]), ("new", ["new-after"])):
        result = seen[role]
        assert result["version"] == VERSION, role
        assert COLUMN in result["columns"], role
        assert [row[0] for row in result["rows"]] == ids, role
        # rows held before the migration filled by its statement, later ones by the insert
        assert all(row[2] == len(row[1]) for row in result["rows"]), (role, result["rows"])
    assert [row[2] for row in seen["old"]["rows"]] == [3, 12, 16]


def test_the_page_shows_the_recipe_the_test_applies():
    """Every line the recipe adds is an added line of the diff on docs/architecture.md."""
    page = PAGE.read_text(encoding="utf-8")
    section = page.split("## How to add a column to messages", 1)[1].split("\n## ", 1)[0]
    diff = section.split("```diff\n", 1)[1].split("```", 1)[0]
    added = {line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")}
    for name, _, lines in RECIPE:
        for line in lines.splitlines():
            if line.strip():
                assert line in added, f"docs/architecture.md does not show the line the recipe adds to {name}: {line}"
    assert f"sessionkit/{RECIPE[0][0]}" in diff and f"sessionkit/{RECIPE[1][0]}" in diff
