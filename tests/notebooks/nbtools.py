"""Paths and helpers shared by the notebook tests (a uniquely named module, imported by path)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
BINDER = REPO / "binder"
BROWSER_TESTS = REPO / "tests" / "browser"

#: The tour notebooks, in order; more numbered notebooks may follow.
EXPECTED = (
    "01-quickstart",
    "02-regeneration-and-branches",
    "03-search",
    "04-agent-runs",
    "05-compaction",
    "06-transcript-analysis",
    "07-serving",
    "08-transcripts-from-everywhere",
    "09-reading-transcripts",
    "10-what-if",
    "11-bring-your-agent",
    "12-judging-transcripts",
)

#: notebook -> (snapshot kind -> how many at least, a phrase that must appear in the page):
#: what each tour notebook shows once converted to HTML, with or without running it.
VIEWS = {
    "01-quickstart": ({"tree": 2, "transcript": 1}, "Session deploy-help"),
    "02-regeneration-and-branches": ({"tree": 1, "transcript": 1}, "How many gunicorn workers should I run?"),
    "03-search": ({"tree": 1, "transcript": 1, "store": 1}, "Write an article on Quantum Gravity"),
    "04-agent-runs": ({"run": 2, "tree": 1}, "queued steer message"),
    "05-compaction": ({"transcript": 2, "tree": 1}, "hidden by compaction"),
    "06-transcript-analysis": ({"tree": 1}, "update_reservation_flights"),
    "07-serving": ({"run": 1, "tree": 1}, "pack an umbrella for Porto only"),
    "08-transcripts-from-everywhere": ({"tree": 1, "transcript": 1}, "Conversation compacted"),
    "09-reading-transcripts": ({"tree": 1, "transcript": 2}, "⎇ wrong-tool-args ★3"),
    "10-what-if": ({"tree": 1}, "[with-tools] Plan tomorrow, rain or not."),
    "11-bring-your-agent": ({"tree": 5}, "Rome: sunny and 24 °C, warmer than Oslo by twelve degrees."),
    "12-judging-transcripts": ({"experiment": 1}, "confirmation of the new total before I book"),
}


def load_module(name: str, path: Path):
    """Import a script by its path under a private module name."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def numbered_notebooks() -> list[Path]:
    return sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


def all_notebooks() -> list[Path]:
    """Every notebook committed under notebooks/ (checkpoints and private folders excluded)."""
    return sorted(
        p
        for p in NOTEBOOKS.rglob("*.ipynb")
        if not any(part.startswith(".") for part in p.relative_to(NOTEBOOKS).parts)
    )


def need(module: str):
    """Import ``module``, or skip (fail under CI) naming what to install."""
    from helpers import missing

    try:
        return importlib.import_module(module)
    except ImportError:
        missing(f"needs the Python package {module} (pip install -e '.[dev]')")
