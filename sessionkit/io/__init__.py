"""Import and export transcripts: OpenAI chat, OpenAssistant trees, Anthropic HH pairs,
sessionkit JSONL, Parquet, and the stores and logs of agent frameworks.

>>> import sessionkit as sk
>>> store = sk.open_store("chats.db")
>>> sk.io.import_openai(store.session("chat-1"), "chat.jsonl")
>>> trees = sk.io.import_oasst(store, "en_100_tree.jsonl")      # one session per tree
>>> pairs = sk.io.import_hh(store, "test.jsonl.gz")             # chosen/rejected as branches
>>> sk.io.export_jsonl(store, "backup.jsonl.gz")
>>> sk.io.import_jsonl(sk.open_store("copy.db"), "backup.jsonl.gz")
>>> sk.io.export_parquet(store, "parquet/")
>>> sk.io.import_parquet(sk.open_store("copy.db"), "parquet/")
>>> sk.io.copy_store(store, sk.open_store("postgresql://localhost/chats"))   # any engine to any engine
>>> sk.io.to_hf_dataset(store, "refusals")    # a dataset as a Hugging Face datasets.Dataset

The agent frameworks' own stores and logs, one session per conversation under its own id:

>>> sk.io.import_openai_agents(store, "agents.db")       # SQLiteSession / AdvancedSQLiteSession
>>> sk.io.import_langgraph(store, "checkpoints.db")      # SqliteSaver: forks as branches
>>> sk.io.import_adk(store, "adk_sessions.db")           # DatabaseSessionService / SqliteSessionService
>>> sk.io.import_claude_code(store, "/home/me/.claude/projects/-home-me-app")   # JSONL logs
>>> sk.io.import_swe_agent(store, "trajectories/")       # .traj files
>>> sk.io.import_inspect(store, "logs/run.eval")         # inspect-ai eval logs
>>> sk.io.import_otel(store, "traces.jsonl")             # OpenTelemetry traces (OTLP JSON or protobuf)
>>> sk.io.detect_format("checkpoints.db")
'langgraph'

Every import is idempotent: ids come from the source (OASST message ids) or
from a hash of it (OpenAI chats, HH pairs), so importing the same file again
adds nothing.

Sources that name their conversations alike (``airline-1`` in an OpenAI Agents
database and in a LangGraph one) would share a session: an import that adds a new
root message (a conversation of its own) to a session that already held messages
warns with :class:`SessionMergeWarning` (a ``UserWarning``; its ``sessions`` are
the first few such sessions, ``count`` how many), naming them and suggesting
``session_prefix=`` (``sessionkit import --session-prefix``). Importing the same
file again adds no root and does not warn; ``warnings.simplefilter("error",
sk.io.SessionMergeWarning)`` makes it an error (raised once the import is done).

Imports write in batches, one transaction per group of trees,
pairs, chat messages or JSONL lines.

Files are streamed: read a line (or, for a JSON array or document, a record) at
a time, with gzip detected from the first bytes, so memory does not grow with
the file (a 1,000,000-line file of any format takes tens of MB, see
benchmarks/README.md). An OpenAI chat file and a file of flat OASST messages are
read twice, once to check every record and see where each tool result or tree
ends, once to write. What an import returns is compact too: ``import_openai``
(into one session) an ``ImportResults`` sequence of ``AppendResult``, one a message
(13 bytes a message, each message read back when used); every importer into a
store is declared to return ``Sequence[Session]``, the sessions written, each
once, in the source's order: a ``list``, or from ``import_oasst``/``import_hh``/
``import_jsonl``/``import_parquet`` past 10,000 sessions a ``SessionList`` of them
(read like a list; the ids packed, about 30 bytes a session; each ``Session``
handle made when used).

Progress: every importer takes ``progress=``. ``None`` (the default) shows a bar
for inputs of 1,000 records or more, and only when stderr is a terminal or the
code runs in a Jupyter kernel, so scripts, logs, tests and loops of small imports
stay quiet; ``True`` always shows it (``tqdm`` when installed,
else a one-line counter on stderr); ``False`` never; a callable ``fn(done, total)``
receives the counts instead.

Malformed input raises :class:`MalformedInput` (a ``ValueError`` and a
``sessionkit.SessionKitError``) whose message names the file and the line or
record at fault: a file holding nothing but white space (a folder of coding-agent
logs may hold empty ones: they are skipped), text that is not UTF-8, gzip data cut
short or damaged, JSON that is not JSON or that no store keeps (``NaN``,
``Infinity``, numbers no float holds, lone surrogate escapes, nesting deeper than
a message may), records of
the wrong shape, ``createdAt``/``created_date`` values that are not ISO 8601
times. No importer lets a ``UnicodeError``, ``EOFError``, gzip or zlib error,
``RecursionError``, ``KeyError`` or ``json`` error out; a message larger than the
store's ``max_message_bytes`` raises :class:`sessionkit.MessageTooLarge` naming
the line. A damaged SQLite database (broken pages, garbage in its schema, text that
is not UTF-8) given to an importer of a framework's store, or to
:func:`detect_format`, is :class:`MalformedInput` naming the file too, never an
error of ``sqlite3``. A path that does not exist, or a folder where a file goes
(or a folder without the files an importer of folders reads), raises
:class:`sessionkit.UsageError` saying which, before anything is read (it is also
the ``FileNotFoundError`` or ``IsADirectoryError`` ``open()`` would raise).

When an import fails, nothing half written is left: each tree, pair, chat
message or JSONL line is stored whole or not at all, and the records before the
one at fault are stored, the ones from it on are not (an OpenAI chat file and
the flat messages of an OASST file are checked whole first, so a problem in
their text or shape stores nothing of them). The error says how far it got:
``MalformedInput.imported`` counts the records stored (trees, pairs, messages or
lines, as the importer counts them) and the message names the last of them.
Import the corrected file again to complete the import: what is stored is
skipped.
"""

from __future__ import annotations

from ..errors import MalformedInput
from ._common import SessionMergeWarning
from ._progress import Progress
from .adk import import_adk
from .claude_code import import_claude_code
from .copy import copy_store
from .detect import FORMATS, detect_format
from .hf import to_hf_dataset
from .hh import import_hh
from .inspect_logs import import_inspect
from .jsonl import export_jsonl, import_jsonl
from .langgraph import import_langgraph
from .oasst import import_oasst
from .openai import chat_to_messages, import_openai
from .openai_agents import import_openai_agents
from .otel import import_otel
from .parquet import export_parquet, import_parquet
from .swe_agent import import_swe_agent

__all__ = [
    "import_openai",
    "import_oasst",
    "import_hh",
    "export_jsonl",
    "import_jsonl",
    "export_parquet",
    "import_parquet",
    "copy_store",
    "chat_to_messages",
    "import_openai_agents",
    "import_langgraph",
    "import_adk",
    "import_claude_code",
    "import_swe_agent",
    "import_inspect",
    "import_otel",
    "to_hf_dataset",
    "detect_format",
    "FORMATS",
    "MalformedInput",
    "Progress",
    "SessionMergeWarning",
]
