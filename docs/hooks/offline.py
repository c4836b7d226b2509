"""mkdocs hook: the rendered notebooks load nothing from the network.

nbconvert's page template (which mkdocs-jupyter renders each notebook with) adds a
MathJax loader and a Mermaid loader that imports its module from a CDN when a page
holds a diagram. The tour notebooks use neither, and the site is meant to be read
offline, so both blocks are dropped from every page. Hand-written because neither
mkdocs-jupyter nor nbconvert has an option to leave them out.
"""

from __future__ import annotations

import re

_DROP = (
    # <script src=""></script>: MathJax's loader, with no MathJax URL configured
    re.compile(r'<script src="">\s*</script>'),
    # MathJax's configuration, which only runs once MathJax is loaded
    re.compile(r'<script type="text/x-mathjax-config">.*?</script>', re.S),
    # the Mermaid loader: a module that imports Mermaid from a CDN
    re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>', re.S),
)


def on_post_page(output: str, page, config) -> str:
    for pattern in _DROP:
        output = pattern.sub("", output)
    return output
