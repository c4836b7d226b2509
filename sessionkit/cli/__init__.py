"""The ``sessionkit`` command: look inside a store from a terminal.

::

    sessionkit info chats.db                  engine, schema version, counts and sizes
    sessionkit ls chats.db                    sessions, newest activity first
    sessionkit show chats.db SESSION          the latest path as a chat, as the model sees it
    sessionkit show chats.db SESSION --full   the same path with every compacted message
    sessionkit show chats.db SESSION --tree   the whole tree, one line per message
    sessionkit search chats.db "deploy"       full-text search across sessions
    sessionkit demo                           build a demo store and print a guided tour
    sessionkit import / export                transcripts in and out (sessionkit.io)
    sessionkit copy chats.db chats.duckdb     everything of a store into another (any engines)
    sessionkit serve                          the HTTP server (sessionkit.server)
    sessionkit view chats.db                  a web viewer over the whole store (--bundle DIR: static files)
    sessionkit lab [STORE]                    the tour notebooks (and STORE) in JupyterLab

It reads stores through the library's public API, so what it prints is what a program
reading the store would see. Read commands never create a store: they open it with
``open_store(..., create=False)``, so a missing file, or another program's database, is an
error and is left as it was.
Every failure is one line on stderr (``sessionkit: error: ...``) and a non-zero exit
status; ``--json`` on ``info``, ``ls``, ``show`` and ``search`` prints machine-readable output.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Any, NoReturn

import sessionkit as sk

from .._formats import FORMATS
from ._commands import (
    cmd_collect,
    cmd_copy,
    cmd_export,
    cmd_import,
    cmd_info,
    cmd_lab,
    cmd_ls,
    cmd_search,
    cmd_serve,
    cmd_show,
    cmd_view,
)
from ._common import EXIT_FAILED, EXIT_USAGE, PROG, CommandError, _UsageError
from ._tour import cmd_demo

__all__ = ["main", "build_parser", "CommandError"]


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad command line becomes one line on stderr instead of usage + error."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _number(convert: Any, what: str, fits: Any, bounds: str) -> Any:
    """An argparse ``type``: ``convert`` the text, refuse what is not ``what`` or not within ``bounds``."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not fits(value):
            raise argparse.ArgumentTypeError(f"{text!r} {bounds}")
        return value

    return parse


_positive_int = _number(int, "a whole number", lambda v: v >= 1, "must be 1 or more")
_seconds = _number(float, "a number of seconds", lambda v: 0 < v < 86_400 * 366, "must be a positive number of seconds")
_count_or_zero = _number(int, "a whole number", lambda v: v >= 0, "must be 0 or more")
# the range create_view_app accepts for its poll
_poll = _number(float, "a number of seconds", lambda v: 0.05 <= v <= 60, "must be from 0.05 to 60 seconds")
_port = _number(int, "a port number", lambda v: 0 <= v <= 65535, "is not a port number (0-65535)")


def _allow_host_option(p: argparse.ArgumentParser) -> None:
    """``--allow-host`` of the commands that serve HTTP (the Host check of docs/server.md)."""
    p.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        default=[],
        help="answer requests whose Host is NAME too, e.g. a reverse proxy's public name (repeat for more; "
        "'.example.org' allows its subdomains, '*' any name); by default only loopback names and the "
        "server's own address are answered",
    )


_STORE_HELP = "store file or URL: chats.db, data.duckdb, sqlite:///path, duckdb:///path, postgresql://..."


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of the ``sessionkit`` command (one subparser per command)."""
    parser = _Parser(
        prog=PROG,
        description="Look inside sessionkit conversation stores: sessions, trees, compactions, search.",
        epilog=f"Try '{PROG} demo' for a tour; '{PROG} COMMAND --help' describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {sk.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser(
        "info",
        help="engine, schema version, counts and sizes of a store",
        description="Show the engine, schema version, counts and sizes of a store.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser(
        "ls",
        help="list sessions, newest activity first",
        description="List the sessions of a store (id, messages, first and last message time, "
        "UTC), newest activity first.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--json", action="store_true", help="print a JSON array")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser(
        "show",
        help="a conversation path as a chat, or the whole tree",
        description="Show the path from the root to a leaf (default: the latest leaf) as a chat: roles, text, "
        "tool calls with input and output, files, each message's labels, and compaction summaries where the "
        "model sees them. "
        "--full shows every stored message with the compacted ranges marked; --tree shows the whole "
        "tree, one line per message.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("session", metavar="SESSION", help='session id ("" is the default session)')
    p.add_argument("--leaf", metavar="ID", help="show the path to this message instead of the latest leaf")
    p.add_argument(
        "--last", metavar="N", type=_positive_int, help="only the newest N entries of the path (reads no older message)"
    )
    p.add_argument(
        "--tree", action="store_true", help="the whole tree: branch points, the path (marked *), compaction ranges"
    )
    p.add_argument(
        "--full", action="store_true", help="every message, compaction not applied (--tree always shows every message)"
    )
    p.add_argument(
        "--all-output",
        action="store_true",
        help="every line of each tool output (by default an output longer than 30 lines is folded, "
        "with a count of the lines left out)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the messages as JSON (with --tree: nodes with parent, children, message and labels)",
    )
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "search",
        help="full-text search over messages",
        description="Full-text search over text parts, best first. Words match case-insensitively with English "
        'stemming, all words must occur, "double quotes" ask for a phrase. Any string is a valid '
        "query.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("query", metavar="QUERY", help='words and "phrases"')
    p.add_argument("--session", metavar="S", help="search this session only")
    p.add_argument("--limit", metavar="N", type=_positive_int, default=10, help="at most N hits (default 10)")
    p.add_argument("--json", action="store_true", help="print a JSON array of hits")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser(
        "demo",
        help="build a demo store and print a guided tour",
        description="Build a demo store (branches, a compacted long chat, a tool call, a file) offline and print "
        "a short tour of it with the commands to explore further.",
    )
    p.add_argument(
        "--store", metavar="PATH", help="where to write the demo store (a new file; default: a new temporary folder)"
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "lab",
        help="open the tour notebooks (and a store) in JupyterLab",
        description="Copy the tour notebooks and their data to a folder (default ./sessionkit-tour; notebooks "
        "already there are kept), build the demo store they use, and open them in JupyterLab on "
        "127.0.0.1. With STORE, a notebook your-store.ipynb opens that store first. Needs the "
        "notebook extra: pip install 'sessionkit[notebook]'. Ctrl-C stops JupyterLab.",
    )
    p.add_argument("store", metavar="STORE", nargs="?", help="a store to open next to the tour (" + _STORE_HELP + ")")
    p.add_argument(
        "--dir", default="sessionkit-tour", metavar="FOLDER", help="where the notebooks go (default: ./sessionkit-tour)"
    )
    p.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default: 8888 or the next free one)")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.add_argument("--timeout", type=float, default=120, help="seconds to wait for JupyterLab to answer")
    p.set_defaults(func=cmd_lab)

    p = sub.add_parser(
        "import",
        help="import transcripts (OpenAI chat, OpenAssistant, HH, sessionkit JSONL, agent frameworks)",
        description="Import a transcript file into a store (created if missing). Imports are idempotent: "
        "importing the same file again adds nothing.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument(
        "file",
        metavar="FILE",
        help="the file to import (or a folder of coding-agent session logs, or of a Parquet export)",
    )
    p.add_argument(
        "--format",
        choices=sorted(FORMATS),
        help="openai: chat messages (JSON array or JSONL); oasst: OpenAssistant trees; "
        "hh: Anthropic HH pairs; jsonl: a sessionkit export; openai-agents: an OpenAI Agents SDK "
        "session database; langgraph: a LangGraph SqliteSaver database; adk: a Google ADK session "
        "database; claude-code: a coding-agent session log (a .jsonl file or a project folder); "
        "swe-agent: SWE-agent trajectories (a .traj file or a folder); inspect: an inspect-ai "
        "eval log (.eval or .json); otel: OpenTelemetry traces (OTLP JSON, JSON lines or protobuf); "
        "parquet: a folder written by 'sessionkit export --format parquet'. "
        "Left out: told from the file",
    )
    p.add_argument(
        "--session",
        metavar="ID",
        help="session to import into (--format openai only; default: the file name without extension)",
    )
    p.add_argument(
        "--session-prefix",
        metavar="PREFIX",
        help="put PREFIX before every session id the file names, to keep the sessions of several "
        "sources apart in one store (every format but openai and jsonl; default: the "
        "importer's own, e.g. 'oasst-' and 'hh-', none for the agent frameworks)",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser(
        "export",
        help="export a store or a session to JSONL or Parquet",
        description="Export a store (or one session) to sessionkit JSONL, or a store to a folder of Parquet files.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("path", metavar="PATH", help="the JSONL file, or the folder for Parquet")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl", help="default: jsonl")
    p.add_argument("--session", metavar="ID", help="export this session only")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser(
        "copy",
        help="copy everything of a store into another (any engines)",
        description="Copy every session of SRC into DST, between any engines (SQLite, DuckDB, PostgreSQL): "
        "messages, compactions, labels, runs, run events and vectors, a session at a time. "
        "DST is created when missing; one that already holds sessions is refused unless --merge.",
    )
    p.add_argument("src", metavar="SRC", help="the store to copy from (it must exist)")
    p.add_argument("dst", metavar="DST", help="the store to copy into: " + _STORE_HELP)
    p.add_argument(
        "--merge",
        action="store_true",
        help="copy into a store that holds sessions already: what it holds is kept, what it lacks is added",
    )
    p.set_defaults(func=cmd_copy)

    p = sub.add_parser(
        "serve",
        help="serve an agent over HTTP",
        description="Serve an agent over HTTP (sessionkit.server). Clients authenticate with "
        "'Authorization: Bearer TOKEN' where TOKEN is read from the SESSIONKIT_TOKEN environment "
        "variable (16 characters or more), never from the command line.",
    )
    p.add_argument("--store", required=True, metavar="PATH", help=_STORE_HELP)
    p.add_argument(
        "--agent",
        required=True,
        metavar="MODULE:ATTR",
        help="the sessionkit.Agent to serve, e.g. myapp.agents:support (imported from the current folder)",
    )
    p.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    p.add_argument("--port", type=_port, default=8000, help="default: 8000")
    _allow_host_option(p)
    p.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        metavar="N",
        help="worker processes (default: 1); above 1 needs a PostgreSQL store, which they share",
    )
    p.add_argument(
        "--timeout-keep-alive",
        type=_seconds,
        default=5.0,
        metavar="S",
        help="close an idle keep-alive connection after S seconds (default: 5)",
    )
    p.add_argument(
        "--timeout-request",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="a client must send a whole request, headers and body, within S seconds "
        "(default: 30); slower ones are disconnected",
    )
    p.add_argument(
        "--timeout-graceful-shutdown",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="on SIGTERM/Ctrl-C, wait at most S seconds for open requests (default: 10)",
    )
    p.add_argument(
        "--limit-concurrency",
        type=_count_or_zero,
        default=1000,
        metavar="N",
        help="answer 503 beyond N open connections (default: 1000; 0: no limit)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "view",
        help="a web viewer over a whole store",
        description="Serve a web page over STORE: the sessions as a table to sort, filter and page, "
        "full-text search, and each session's tree, transcript and runs. Read-only unless --write. "
        "On 127.0.0.1 (the default) no token is needed; any other --host needs one, from --token or "
        "SESSIONKIT_TOKEN (16 characters or more); --write without a token makes a random one. "
        "Only requests whose Host names this server are answered (see --allow-host). "
        "--bundle DIR writes the same viewer as static files "
        "that open from file:// with no server.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=_port, default=8800, help="default: 8800 (0: any free port)")
    _allow_host_option(p)
    p.add_argument(
        "--token",
        metavar="TOKEN",
        help="bearer token the page's requests must carry (default: SESSIONKIT_TOKEN; with --write and "
        "neither, a random one, printed in the page's URL)",
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="allow changes from the page: deleting a session, labelling the annotation queues (#/q/)",
    )
    p.add_argument(
        "--annotator",
        metavar="NAME[=TOKEN]",
        action="append",
        help="with --write: an annotator of the queues, known by a token of their own (16 characters or more; "
        "without one, a random one), who reads the store and labels as NAME; their URL is printed (repeat for more)",
    )
    p.add_argument(
        "--column",
        metavar="NAME=SQL",
        action="append",
        help="add a sortable, filterable column to the sessions table: a store.sql query over the views "
        "returning session_id and one value, e.g. 'errors=SELECT session_id, count(*) FROM tool_calls "
        "WHERE is_error GROUP BY 1' (repeat for more; a bad query is refused before the viewer starts)",
    )
    p.add_argument(
        "--columns",
        metavar="FILE",
        action="append",
        help="add the columns of FILE: NAME=SQL lines (# comments; a line ending in \\ goes on at the next)",
    )
    p.add_argument(
        "--sql-memory-limit",
        metavar="SIZE",
        help="the memory the columns' store.sql queries may use, e.g. 1GB (a query that needs more stops with a "
        "message; default: DuckDB's, 80%% of RAM)",
    )
    p.add_argument(
        "--poll",
        metavar="SECONDS",
        type=_poll,
        help="how often an open page asks the store whether it changed, to show new messages and sessions "
        "without a reload (default: 1; 0.05 to 60; a PostgreSQL store also tells at once)",
    )
    p.add_argument("--bundle", metavar="DIR", help="write the viewer as a static site in DIR instead of serving it")
    p.add_argument(
        "--session", metavar="ID", action="append", help="with --bundle: only this session (repeat for more)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --bundle: replace the earlier bundle in DIR (a folder holding anything else is always refused)",
    )
    p.set_defaults(func=cmd_view)

    p = sub.add_parser(
        "collect",
        help="receive OpenTelemetry traces (OTLP/HTTP) into a store",
        description="Receive OpenTelemetry traces at POST /v1/traces (OTLP/HTTP: protobuf or JSON, gzip too) "
        "and write them into STORE (created if missing) as they arrive: one session per conversation, "
        "one run per trace. Point an OTLP exporter at http://HOST:PORT/v1/traces. On 127.0.0.1 (the "
        "default) no token is needed; any other --host needs one, from --token or SESSIONKIT_TOKEN "
        "(16 characters or more). Stop with Ctrl-C.",
    )
    p.add_argument("store", metavar="STORE", help=_STORE_HELP)
    p.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=_port, default=4318, help="default: 4318, OTLP/HTTP's (0: any free port)")
    p.add_argument("--token", metavar="TOKEN", help="bearer token senders must give (default: SESSIONKIT_TOKEN)")
    p.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        help="another name the Host header may give (a proxy's; repeat for more)",
    )
    p.add_argument("--session-prefix", metavar="PREFIX", help="put PREFIX before every session id")
    p.set_defaults(func=cmd_collect)
    return parser


def _tolerant_stdout() -> None:
    """Never fail on a character the terminal's encoding lacks (message text can be anything)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(Exception):
                reconfigure(errors="backslashreplace")


def _fail(message: str, status: int = EXIT_FAILED) -> int:
    line = " ".join(str(message).split()) or "failed"
    print(f"{PROG}: error: {line}", file=sys.stderr)
    return status


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    text = str(exc)
    return text if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Run the ``sessionkit`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    _tolerant_stdout()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except SystemExit as exc:  # --help and --version exit through argparse
        return exc.code if isinstance(exc.code, int) else 0
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args, sys.stdout) or 0)
    except CommandError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, and keep the interpreter's final flush quiet too.
        with contextlib.suppress(Exception):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except (sk.SessionKitError, ValueError, LookupError, OSError) as exc:
        return _fail(_describe(exc))
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or a driver error nobody converted: still one line, unless debugging
        if os.environ.get("SESSIONKIT_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {_describe(exc)} (set SESSIONKIT_DEBUG=1 for the traceback)")
