"""The documentation: the site builds without a warning and reads offline, and what
README.md and docs/ state matches the code (schema version, public names, the CLI's
commands and options, the analysis views' columns, the server's routes, the errors, and
every relative link)."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import shutil
import subprocess
import sys
import types
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

import sessionkit as sk
from sessionkit.cli import build_parser
from sessionkit.store import VIEW_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MKDOCS = Path(sys.executable).with_name("mkdocs")


def _guides() -> list[Path]:
    """The Markdown pages of docs/ (the notebooks folder is a link to notebooks/: not pages of text)."""
    return sorted(p for p in DOCS.rglob("*.md") if "notebooks" not in p.relative_to(DOCS).parts)


def _text(*paths: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


#: A notebook a reader added to notebooks/ (not in the nav): the site leaves it out.
_SCRATCH = "99-my-scratch.ipynb"


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> tuple[Path, str]:
    """The site built once for this module's tests: ``(site folder, build output)``. Built from
    a copy of mkdocs.yml and docs/ (the notebooks folder copied in, plus a notebook a reader
    added, which is in no nav), so the repository's files are left as they are."""
    work = tmp_path_factory.mktemp("docs-build")
    shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
    shutil.copytree(DOCS, work / "docs", symlinks=False)
    shutil.copy(ROOT / "notebooks" / "01-quickstart.ipynb", work / "docs" / "notebooks" / _SCRATCH)
    site = work / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return (
        site,
        proc.stdout + proc.stderr if proc.returncode == 0 else f"exit {proc.returncode}\n" + proc.stdout + proc.stderr,
    )


@pytest.mark.slow
def test_site_builds_strict_and_offline(built_site):
    site, output = built_site
    assert not output.startswith("exit "), output
    assert "WARNING" not in output, output
    assert not (site / "notebooks" / _SCRATCH.replace(".ipynb", ".html")).exists()  # not in the nav: left out
    assert not (site / "search").exists()  # no search: its worker cannot start from file:// (mkdocs.yml)
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for guide in _guides():
        if guide.parent.name != "hooks":
            assert guide.relative_to(DOCS).with_suffix(".html").as_posix() in pages, guide
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        assert f"notebooks/{notebook.stem}.html" in pages, notebook
    for page in sorted(site.rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        where = page.relative_to(site)
        # nothing loaded from the network when the page is read
        assert not re.search(r"<script[^>]*\ssrc=[\"']?(https?:)?//", html), where
        assert not re.search(r"<link[^>]*\shref=[\"']?(https?:)?//[^>]*>", html), where
        assert not re.search(r"import\(\s*[\"']https?://", html), where
        assert "fonts.googleapis" not in html, where
        # every cross-reference of the API reference resolved ([`name`][] left as text otherwise)
        assert "</code>][" not in html, where
    # the API reference documents every public name of each module, not only its docstring
    for module, page in _REFERENCE.items():
        html = (site / "reference" / page).read_text(encoding="utf-8")
        ids = set(re.findall(r'id="(sessionkit\.[\w.]+)"', html))
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if isinstance(getattr(mod, name), types.ModuleType):
                continue  # a submodule (sessionkit.testing.conformance): named in the page's text
            assert any(i == f"{module}.{name}" or i.endswith(f".{name}") for i in ids), f"{module}.{name}"


class _Links(HTMLParser):
    """The links (``href``/``src``) and the ids of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        named = dict(attrs)
        if named.get("id"):
            self.ids.add(named["id"])
        if tag == "a" and named.get("name"):
            self.ids.add(named["name"])
        self.links += [named[k] for k in ("href", "src") if named.get(k)]


@pytest.mark.slow
def test_every_link_of_the_built_site_resolves_from_file_urls(built_site):
    """Every internal link and ``#anchor`` of every page points at a file of the site and an
    id of that page, as a browser reading the site from ``file://`` resolves it (no link from
    the site's root, which file:// would take as the disk's root)."""
    site, output = built_site
    assert not output.startswith("exit "), output
    parsed: dict[Path, _Links] = {}

    def page(path: Path) -> _Links:
        if path not in parsed:
            parsed[path] = _Links()
            parsed[path].feed(path.read_text(encoding="utf-8"))
        return parsed[path]

    broken = []
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30
    for path in pages:
        where = path.relative_to(site).as_posix()
        for link in page(path).links:
            parts = urlsplit(link)
            if parts.scheme or link.startswith("//"):
                continue  # a URL (the offline test above checks that nothing is loaded from one)
            if parts.path.startswith("/"):
                broken.append(f"{where}: {link} (from the site's root)")
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{where}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in page(target).ids:
                broken.append(f"{where}: {link} (no such anchor)")
    assert not broken, "\n".join(broken)


def _listed(section: str, pattern: str) -> set[str]:
    """The files README.md links in the paragraph that starts with ``section``."""
    text = README.read_text(encoding="utf-8")
    start = text.index(section)
    end = text.find("\n\n", start)
    return set(re.findall(pattern, text[start : end if end > 0 else None]))


def test_readme_lists_every_notebook_and_every_guide():
    # the Notebooks section names each by its number: "... 9 reading transcripts (...), 10 what if"
    numbers = {int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")}
    assert {int(n) for n in _listed("`notebooks/` teaches", r"(?<![\w.])(\d{1,2}) (?=[a-z])")} == numbers
    guides = {p.name for p in DOCS.glob("*.md") if p.name != "index.md"}
    assert _listed("Markdown files of", r"\(docs/([\w.-]+\.md)\)") == guides | {"index.md"}


_REFERENCE = {
    "sessionkit.store": "store.html",
    "sessionkit.aio": "aio.html",
    "sessionkit.agent": "agent.html",
    "sessionkit.analysis": "analysis.html",
    "sessionkit.analysis.plot": "analysis.html",
    "sessionkit.io": "io.html",
    "sessionkit.server": "server.html",
    "sessionkit.widgets": "widgets.html",
    "sessionkit.errors": "errors.html",
    "sessionkit.testing": "testing.html",
    "sessionkit.prototyping": "prototyping.html",
    "sessionkit.scorers": "scorers.html",
}


_SCHEMA_VERSION = re.compile(r"schema version (\d+)|schema ledger \(version (\d+)", re.IGNORECASE)


def test_schema_version_stated_is_the_code_s():
    version = sk.open_store().stats()["schema_version"]
    stated = {}
    for path in [README, *_guides()]:
        for match in _SCHEMA_VERSION.finditer(path.read_text(encoding="utf-8")):
            stated.setdefault(int(match.group(1) or match.group(2)), []).append(path.name)
    assert _SCHEMA_VERSION.search(README.read_text(encoding="utf-8")), "README.md states no schema version"
    assert set(stated) == {version}, stated


def test_every_public_name_is_documented():
    guides = _text(*(p for p in _guides() if p.parent.name != "reference"))
    reference = (DOCS / "reference" / "sessionkit.md").read_text(encoding="utf-8")
    for name in sk.__all__:
        assert f"`sk.{name}`" in reference or f"`{name}`" in reference, f"{name} is not in the API reference"
        assert re.search(rf"(?<![\w.]){re.escape(name)}\b|sk\.{re.escape(name)}\b", guides), f"no guide mentions {name}"


def test_every_public_module_has_a_reference_page():
    pages = _text(*(DOCS / "reference").glob("*.md"))
    for module in (
        "sessionkit.store",
        "sessionkit.aio",
        "sessionkit.agent",
        "sessionkit.analysis",
        "sessionkit.analysis.plot",
        "sessionkit.io",
        "sessionkit.server",
        "sessionkit.widgets",
        "sessionkit.errors",
        "sessionkit.testing",
        "sessionkit.prototyping",
        "sessionkit.scorers",
    ):
        assert re.search(rf"^::: {re.escape(module)}$", pages, re.MULTILINE), module


_LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("path", [README, *_guides()], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)  # code is not linked
    for target in _LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or a heading of the same page
        file = target.split("#", 1)[0]
        assert (path.parent / file).exists(), f"{path.name}: {target} points at nothing"


def test_the_cli_page_covers_the_parser():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert commands
    for name, sub in commands.items():
        assert re.search(rf"^## {name}$", page, re.MULTILINE), f"no section for 'sessionkit {name}'"
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section, f"sessionkit {name} {option} is not documented"
            if isinstance(action.choices, (list, tuple)) and action.option_strings:
                for choice in action.choices:
                    assert f"`{choice}`" in section, f"sessionkit {name} {action.option_strings[0]} {choice}"


def test_the_analysis_page_lists_every_view_column_in_order():
    page = (DOCS / "analysis.md").read_text(encoding="utf-8")
    for view, columns in VIEW_COLUMNS.items():
        section = page.split(f"\n### {view}\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
        documented = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
        assert documented == [name for name, _ in columns], view


def test_the_errors_page_covers_every_error():
    page = (DOCS / "errors.md").read_text(encoding="utf-8")
    for name in sk.errors.__all__:
        assert f"**`{name}`**" in page, name


def test_the_server_page_lists_every_route():
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    agent = sk.Agent("docs", None, sk.testing.ScriptedModel([]))
    app = sk.server.create_app(agent, sk.open_store(), token="0123456789abcdef-docs")
    with TestClient(app, base_url="http://localhost") as client:  # a Host the server answers
        paths = client.get("/openapi.json").json()["paths"]
    page = (DOCS / "server.md").read_text(encoding="utf-8")
    methods = {"get", "post", "put", "patch", "delete"}
    routes = [(method.upper(), path) for path, ops in paths.items() for method in ops if method in methods]
    assert len(routes) >= 8
    for method, path in routes:
        assert f"`{method} {path}`" in page, f"{method} {path} is not in docs/server.md"


def test_docs_cite_no_outside_document():
    for path in [README, *_guides()]:
        assert not re.search(r"\bSPEC\b", path.read_text(encoding="utf-8")), path.name


_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _run_examples(page: Path, namespace: dict, *, skip=lambda block: False) -> int:
    """Run the page's Python blocks in order in ``namespace``; an expression statement whose
    comment starts with a Python literal (``x.id    # 'a2'`` or ``# ['u1', 'a1']: the path``)
    must evaluate to it. Returns how many such values were compared."""
    compared = 0
    for index, block in enumerate(_BLOCK.findall(page.read_text(encoding="utf-8"))):
        if skip(block):
            continue
        lines = block.splitlines()
        for statement in ast.parse(block).body:
            source = ast.get_source_segment(block, statement)
            where = f"{page.name}, block {index}, line {statement.lineno}"
            comment = lines[statement.end_lineno - 1].partition("  #")[2].strip()
            expected = _literal(comment) if isinstance(statement, ast.Expr) else _NOTHING
            if expected is _NOTHING:
                exec(compile(ast.Module([statement], []), where, "exec"), namespace)
                continue
            assert eval(compile(ast.Expression(statement.value), where, "eval"), namespace) == expected, (
                f"{where}: {source} is not {comment}"
            )
            compared += 1
    return compared


_NOTHING = object()


def _literal(comment: str):
    """The Python literal a comment starts with (all of it, or what comes before a ``": "``), else _NOTHING."""
    for text in (comment, *(comment[: m.start()] for m in re.finditer(": ", comment))):
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            continue
    return _NOTHING


def test_getting_started_and_the_tree_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write chats.db and scratch.db
    namespace: dict = {}
    compared = _run_examples(DOCS / "getting-started.md", namespace)
    compared += _run_examples(DOCS / "message-tree.md", {})
    assert compared >= 12


@pytest.mark.slow
def test_the_offline_agent_examples_run_as_written(tmp_path, monkeypatch):
    pytest.importorskip("litellm")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    store = sk.open_store()

    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"sunny in {city}"

    namespace = {"sk": sk, "store": store, "session": store.session("docs"), "get_weather": get_weather}
    # the blocks that call a provider, or run inside an event loop, are left out
    online = ("tools=[get_weather])\nstore =", "async for", "asyncio.create_task")
    compared = _run_examples(DOCS / "agents.md", namespace, skip=lambda block: any(s in block for s in online))
    assert compared >= 3


@pytest.mark.slow
def test_the_adk_integration_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes agents.db
    assert _run_examples(DOCS / "integrations" / "adk.md", {}) >= 5


@pytest.mark.slow
def test_the_litellm_capture_page_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes capture.db
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    assert _run_examples(DOCS / "integrations" / "litellm-capture.md", {}) >= 8


@pytest.mark.slow
def test_the_judging_page_runs_as_written(tmp_path, monkeypatch, capsys):
    """Scorers, a judge (offline: litellm's mock_response), agreement, datasets and their
    exports, each example in order on the page's own store; the prompt shown is the one sent."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: read then
    pytest.importorskip("litellm")
    pytest.importorskip("datasets")
    monkeypatch.chdir(tmp_path)
    page = DOCS / "judging.md"
    assert _run_examples(page, {}) >= 14
    shown = re.search(r"^```text\n(--- system\n.*?)^```", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    assert shown is not None and shown.group(1) in capsys.readouterr().out
