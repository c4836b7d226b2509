"""mkdocs hook: the site reads offline, from ``file://``, with every link resolving.

- The rendered notebooks load nothing from the network (below).
- A notebook's links are written for Jupyter and GitHub (``02-x.ipynb``, ``../docs/labels.md``):
  on the site they are rewritten to the pages built from them (``02-x.html``, ``../labels.html``).
- ``404.html``, which the theme writes with links from the site's root (``/assets/...``: a
  server shows it at any depth), gets links relative to its own place at the root, so that it
  reads from ``file://`` too.
- A notebook of ``notebooks/`` that is not in ``mkdocs.yml``'s nav (one a reader added to try
  something) is left out of the site instead of failing the strict build.

nbconvert's page template (which mkdocs-jupyter renders each notebook with) adds a
MathJax loader and a Mermaid loader that imports its module from a CDN when a page
holds a diagram. The tour notebooks use neither, and the site is meant to be read
offline, so both blocks are dropped from every page. Hand-written because neither
mkdocs-jupyter nor nbconvert has an option to leave them out.
"""

from __future__ import annotations

import re
from pathlib import Path

_DROP = (
    # <script src=""></script>: MathJax's loader, with no MathJax URL configured
    re.compile(r'<script src="">\s*</script>'),
    # MathJax's configuration, which only runs once MathJax is loaded
    re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S),
    # the Mermaid loader: a module that imports Mermaid from a CDN
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>', re.S),
)


#: A relative link to a notebook, or from a notebook to a guide of docs/ (``../docs/x.md``).
_NOTEBOOK_LINK = re.compile(r'href="([\w.-]+)\.ipynb(#[^"]*)?"')
_GUIDE_LINK = re.compile(r'href="\.\./docs/([\w./-]+)\.md(#[^"]*)?"')
#: An attribute holding a link from the site's root.
_ROOT_LINK = re.compile(r'(\s(?:href|src)=")/(?!/)')


def _nav_paths(nav) -> set[str]:
    """Every page path named in the nav (nested sections included)."""
    found: set[str] = set()
    items = nav if isinstance(nav, list) else [nav]
    for item in items:
        if isinstance(item, str):
            found.add(item)
        elif isinstance(item, dict):
            for value in item.values():
                found |= _nav_paths(value)
        elif isinstance(item, list):
            found |= _nav_paths(item)
    return found


def on_files(files, config):
    listed = _nav_paths(config["nav"] or [])
    for file in list(files):
        if file.src_uri.startswith("notebooks/") and file.src_uri.endswith(".ipynb") and file.src_uri not in listed:
            files.remove(file)
    return files


def on_post_page(output: str, page, config) -> str:
    for pattern in _DROP:
        output = pattern.sub("", output)
    if page.file.src_uri.startswith("notebooks/"):
        output = _NOTEBOOK_LINK.sub(lambda m: f'href="{m.group(1)}.html{m.group(2) or ""}"', output)
        output = _GUIDE_LINK.sub(lambda m: f'href="../{m.group(1)}.html{m.group(2) or ""}"', output)
    return output


def on_post_build(config) -> None:
    page = Path(config["site_dir"]) / "404.html"
    if page.is_file():
        page.write_text(_ROOT_LINK.sub(r"\1", page.read_text(encoding="utf-8")), encoding="utf-8")
