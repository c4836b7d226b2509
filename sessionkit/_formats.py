"""The transcript formats ``sessionkit.io`` imports, each with its importer's name.

Kept apart from ``sessionkit.io`` (whose ``FORMATS`` it is) so that the command line offers
the same names for ``import --format`` without loading the importers.
"""

from __future__ import annotations

__all__ = ["FORMATS"]

#: format name -> the ``sessionkit.io`` function that imports it.
FORMATS = {
    "openai": "import_openai",
    "oasst": "import_oasst",
    "hh": "import_hh",
    "jsonl": "import_jsonl",
    "openai-agents": "import_openai_agents",
    "langgraph": "import_langgraph",
    "adk": "import_adk",
    "claude-code": "import_claude_code",
    "swe-agent": "import_swe_agent",
    "inspect": "import_inspect",
    "otel": "import_otel",
    "parquet": "import_parquet",
}
