"""Each notebook converts to HTML with nbconvert, and its views show there as static snapshots.

The committed outputs are converted (the nbval test proves they are what a fresh run
produces). Widget views are saved without their widget state, so the HTML shows what
GitHub and nbviewer show: each view's script-free snapshot (``data-sessionkit-snapshot``).
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from nbtools import EXPECTED, NOTEBOOKS, VIEWS, need


def test_every_tour_notebook_has_expected_views():
    assert set(VIEWS) == set(EXPECTED)


@pytest.fixture(scope="module")
def exporter():
    need("nbconvert")
    import nbconvert

    return nbconvert.HTMLExporter()


@pytest.mark.parametrize("stem", EXPECTED)
@pytest.mark.slow
def test_notebook_converts_to_html_with_static_views(exporter, stem):
    import nbformat

    nb = nbformat.read(str(NOTEBOOKS / f"{stem}.ipynb"), as_version=4)
    html, _ = exporter.from_notebook_node(nb)
    kinds = Counter(re.findall(r'data-sessionkit-snapshot="(\w+)"', html))
    expected, phrase = VIEWS[stem]
    for kind, least in expected.items():
        assert kinds[kind] >= least, f"{stem}: {kinds[kind]} {kind} snapshots in the HTML, expected {least}"
    assert phrase in html, f"{stem}: {phrase!r} is not in the HTML"
    # no view fell back to a widget placeholder or an error
    assert "Error displaying widget" not in html
    assert "snapshot failed" not in html
    # the figures are embedded images
    if stem in ("04-agent-runs", "05-compaction", "06-transcript-analysis", "09-reading-transcripts"):
        assert html.count("data:image/png;base64,") >= 1, f"{stem}: no figure in the HTML"
