"""Import and export transcripts: OpenAI chat, OpenAssistant trees, Anthropic HH pairs,
sessionkit JSONL, Parquet.

>>> import sessionkit as sk
>>> store = sk.open_store("chats.db")
>>> sk.io.import_openai(store.session("chat-1"), "chat.jsonl")
>>> trees = sk.io.import_oasst(store, "en_100_tree.jsonl")      # one session per tree
>>> pairs = sk.io.import_hh(store, "test.jsonl.gz")             # chosen/rejected as branches
>>> sk.io.export_jsonl(store, "backup.jsonl.gz")
>>> sk.io.import_jsonl(sk.open_store("copy.db"), "backup.jsonl.gz")
>>> sk.io.export_parquet(store, "parquet/")

Every import is idempotent: ids come from the source (OASST message ids) or
from a hash of it (OpenAI chats, HH pairs), so importing the same file again
adds nothing. Imports write in batches, one transaction per tree, pair,
trajectory or block of lines.

Progress: every importer takes ``progress=``. ``None`` (the default) shows a bar
for inputs of 1,000 records or more, and only when stderr is a terminal or the
code runs in a Jupyter kernel, so scripts, logs, tests and loops of small imports
stay quiet; ``True`` always shows it (``tqdm`` when installed,
else a one-line counter on stderr); ``False`` never; a callable ``fn(done, total)``
receives the counts instead.

Malformed input raises :class:`MalformedInput` (a ``ValueError`` and a
``sessionkit.SessionKitError``) whose message names the file and the line or
record at fault.
"""

from __future__ import annotations

from ._common import MalformedInput, Progress
from .adk import import_adk
from .hh import import_hh
from .jsonl import export_jsonl, import_jsonl
from .langgraph import import_langgraph
from .oasst import import_oasst
from .openai import chat_to_messages, import_openai
from .openai_agents import import_openai_agents
from .parquet import export_parquet

__all__ = [
    "import_openai",
    "import_oasst",
    "import_hh",
    "export_jsonl",
    "import_jsonl",
    "export_parquet",
    "chat_to_messages",
    "import_openai_agents",
    "import_langgraph",
    "import_adk",
    "MalformedInput",
    "Progress",
]
