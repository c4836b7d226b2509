"""The commands: each opens what it needs through the public API and prints through the renderers."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import secrets
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlencode

import sessionkit as sk

from .._formats import FORMATS
from ._common import PROG, CommandError, _count, _json, _sid, _write_json_array
from ._render import _info_report, _newest, _render_hits, _render_info, _render_ls, _render_path, _Tree


def _local_path(target: str) -> str | None:
    """The file a store target names (``:memory:`` for in-memory), or None for a server URL."""
    lower = target.lower()
    for scheme in ("sqlite:///", "duckdb:///"):
        if lower.startswith(scheme):
            return target[len(scheme) :] or ":memory:"
    if "://" in target:
        return None
    return target


@contextlib.contextmanager
def _existing_store(target: str, **options: Any) -> Iterator[sk.Store]:
    """Open a store that must already exist: read commands never create or change a file."""
    try:
        store = sk.open_store(target, create=False, **options)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    try:
        yield store
    finally:
        store.close()


def _existing_session(store: sk.Store, session_id: str, target: str) -> sk.Session:
    """The session, or a CommandError naming the sessions that do exist."""
    session = store.session(session_id)
    if len(session) == 0:
        known = [info.id for info in store.list_sessions()]
        if known:
            listed = ", ".join(_sid(k) for k in known[:6]) + (", …" if len(known) > 6 else "")
            hint = f" (it has: {listed})"
        else:
            hint = " (it holds no sessions)"
        raise CommandError(f"no session {session_id!r} in {target}{hint}")
    return session


def _optional_module(module: str, command: str):
    """Import a part of sessionkit that may be absent from this installation."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module or module.startswith(exc.name + ".")):
            raise CommandError(
                f"'{PROG} {command}' needs the {module} module, which this installation of sessionkit does not have"
            ) from exc
        raise CommandError(f"'{PROG} {command}' cannot load {module}: {exc}") from exc
    except ImportError as exc:  # a missing extra (sessionkit.MissingDependency names it)
        raise CommandError(f"'{PROG} {command}' cannot load {module}: {exc}") from exc


def _function(module, name: str, command: str):
    fn = getattr(module, name, None)
    if not callable(fn):
        raise CommandError(f"'{PROG} {command}' needs {module.__name__}.{name}, which this installation does not have")
    return fn


def cmd_info(args, out: TextIO) -> int:
    """Engine, schema version and the store's counts and sizes."""
    with _existing_store(args.store) as store:
        if args.json:
            print(_json(_info_report(store, args.store)), file=out)
        else:
            _render_info(store, args.store, out)
    return 0


def cmd_ls(args, out: TextIO) -> int:
    """Sessions holding messages, newest activity first."""
    with _existing_store(args.store) as store:
        if args.json:
            print(
                _json(
                    [
                        {
                            "id": i.id,
                            "message_count": i.message_count,
                            "created_at": i.created_at,
                            "updated_at": i.updated_at,
                        }
                        for i in store.list_sessions()
                    ]
                ),
                file=out,
            )
        else:
            _render_ls(store, args.store, out)
    return 0


def cmd_show(args, out: TextIO) -> int:
    """A path as a chat (compaction applied unless --full), or the whole tree with --tree."""
    with _existing_store(args.store) as store:
        session = _existing_session(store, args.session, args.store)
        if args.leaf is not None:
            session.path_length(args.leaf)  # sessionkit.MessageNotFound for an unknown id
        if args.tree and args.last is not None:
            raise CommandError("--last applies to the path view, not to --tree")
        if args.tree:
            tree = _Tree(session, args.leaf)
            if args.json:
                print(_json(tree.as_json()), file=out)
            else:
                tree.render(out)
        elif args.json:
            if args.last is None:
                _write_json_array(session.history(leaf_id=args.leaf, compacted=not args.full), out)
            else:
                _write_json_array(_newest(session, args.leaf, not args.full, args.last)[1], out)
        else:
            _render_path(session, out, leaf_id=args.leaf, full=args.full, last=args.last, all_output=args.all_output)
    return 0


def cmd_search(args, out: TextIO) -> int:
    """Full-text search; any query string is valid (an empty one finds nothing)."""
    with _existing_store(args.store) as store:
        if args.session is not None:
            _existing_session(store, args.session, args.store)
        hits = store.search(args.query, session_id=args.session, limit=args.limit)
    if args.json:
        print(
            _json(
                [
                    {
                        "id": h.id,
                        "session_id": h.session_id,
                        "role": h.role,
                        "content": h.content,
                        "snippet": h.snippet,
                        "score": h.score,
                    }
                    for h in hits
                ]
            ),
            file=out,
        )
    else:
        _render_hits(hits, args.query, out)
    return 0


#: formats whose sessions take no prefix, and why
_NO_PREFIX = {
    "openai": "the file goes into one session, named with --session",
    "jsonl": "a sessionkit export keeps the session ids it was written with",
    "parquet": "a sessionkit export keeps the session ids it was written with",
}


def _session_from_file(path: str) -> str:
    """Default session id for an OpenAI chat file: its name without .gz/.jsonl/.json."""
    name = Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return name


@contextlib.contextmanager
def _merge_warnings(category: type[Warning]) -> Iterator[None]:
    """An import's merge warnings as ``sessionkit: warning: ...`` lines on stderr (others as Python shows them)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        try:
            yield
        finally:
            for w in caught:
                if issubclass(w.category, category):
                    print(f"{PROG}: warning: {' '.join(str(w.message).split())}", file=sys.stderr)
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


@contextlib.contextmanager
def _removed_on_error(doomed: list[str]):
    """When the block fails, remove the store files named in ``doomed`` by then (and the
    journal files beside them): an import that created a store and stored nothing in it
    leaves no store behind."""
    try:
        yield
    except BaseException:
        for path in doomed:
            for name in (path, path + "-wal", path + "-shm", path + "-journal", path + ".wal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(name)
        raise


def _openai_session(args) -> str:
    return args.session if args.session is not None else _session_from_file(args.file)


def _import_into(args, fn, store) -> None:
    if args.format == "openai":
        fn(store.session(_openai_session(args)), args.file)
    else:
        fn(store, args.file, **args.import_options)


def cmd_import(args, out: TextIO) -> int:
    """Import a transcript file (creates the store when it does not exist)."""
    folders = (None, "claude-code", "swe-agent", "parquet")  # the formats whose FILE may be a folder
    io = _optional_module("sessionkit.io", "import")
    # Before any store is opened (or created): a missing path, or a folder where a file goes,
    # is a usage error saying which (in the words of the importers' sessionkit.UsageError).
    if not os.path.exists(args.file):
        raise CommandError(f"{args.file!r} does not exist")
    if os.path.isdir(args.file) and args.format not in folders:
        raise CommandError(f"{args.file!r} is a folder, not a file (--format {args.format} reads a file)")
    if not os.path.isdir(args.file) and not os.path.isfile(args.file):
        raise CommandError(f"{args.file!r} is not a regular file")
    pattern = {"claude-code": ".jsonl", "swe-agent": ".traj"}.get(args.format or "")
    if pattern and os.path.isdir(args.file) and not any(p.is_file() for p in Path(args.file).rglob("*" + pattern)):
        raise CommandError(f"{args.file!r} is a folder without {pattern} files")
    if args.format is None:
        try:
            args.format = _function(io, "detect_format", "import")(args.file)
        except ValueError as exc:  # MalformedInput: no importer recognises the file
            raise CommandError(f"{exc}; name it with --format (one of {', '.join(sorted(FORMATS))})") from None
    if args.session is not None and args.format != "openai":
        raise CommandError(f"--session applies to --format openai only; {args.format} files name their own sessions")
    options = {}
    if args.session_prefix is not None:
        if args.format in _NO_PREFIX:
            raise CommandError(f"--session-prefix does not apply to --format {args.format}: {_NO_PREFIX[args.format]}")
        options["session_prefix"] = args.session_prefix
    args.import_options = options
    fn = _function(io, FORMATS[args.format], "import")
    local = _local_path(args.store)
    existing = local not in (None, ":memory:") and os.path.isfile(local) and os.path.getsize(local) > 0
    # An existing file must already be a sessionkit store (as for info and ls): importing into
    # another program's database would add sessionkit's tables to it.
    created = local not in (None, ":memory:") and not os.path.exists(local)
    opened = _existing_store(args.store) if existing else sk.open_store(args.store)
    doomed: list[str] = []  # the new store's file, when the import fails having stored nothing
    with _removed_on_error(doomed), opened as store, _merge_warnings(io.SessionMergeWarning):
        before = store.stats()
        try:
            _import_into(args, fn, store)
        except BaseException:
            if created and store.stats()["messages"] == 0:
                doomed.append(str(local))
            raise
        where = args.store if args.format != "openai" else f"session {_sid(_openai_session(args))} of {args.store}"
        after = store.stats()
    added_m = after["messages"] - before["messages"]
    added_s = after["sessions"] - before["sessions"]
    print(
        f"imported {args.file} ({args.format}) into {where}: {_count(added_m, 'new message')}, "
        f"{_count(added_s, 'new session')} (the store holds {_count(after['messages'], 'message')} in "
        f"{_count(after['sessions'], 'session')})",
        file=out,
    )
    return 0


def cmd_export(args, out: TextIO) -> int:
    """Export a store or one session, to JSONL or to a folder of Parquet files."""
    io = _optional_module("sessionkit.io", "export")
    with _existing_store(args.store) as store:
        session = _existing_session(store, args.session, args.store) if args.session is not None else None
        if args.format == "parquet":
            fn = _function(io, "export_parquet", "export")
            if session is None:
                fn(store, args.path)
            else:
                fn(store, args.path, session_ids=[session.session_id])
        else:
            _function(io, "export_jsonl", "export")(session if session is not None else store, args.path)
        if session is not None:
            what = f"session {_sid(session.session_id)} ({_count(len(session), 'message')})"
        else:
            stats = store.stats()
            what = f"{_count(stats['sessions'], 'session')} ({_count(stats['messages'], 'message')})"
    print(f"exported {what} to {args.path} ({args.format})", file=out)
    return 0


def cmd_copy(args, out: TextIO) -> int:
    """Copy everything of one store into another (any engines), refusing a destination holding sessions."""
    io = _optional_module("sessionkit.io", "copy")
    local = _local_path(args.dst)
    existing = local not in (None, ":memory:") and os.path.isfile(local) and os.path.getsize(local) > 0
    with _existing_store(args.src) as src:
        # An existing file must already be a sessionkit store (as for import).
        with _existing_store(args.dst) if existing else sk.open_store(args.dst) as dst:
            counts = _function(io, "copy_store", "copy")(src, dst, merge=args.merge)
            held = dst.stats()
    added = ", ".join(
        _count(counts[k], noun)
        for k, noun in (
            ("messages", "message"),
            ("compactions", "compaction"),
            ("labels", "label"),
            ("runs", "run"),
            ("events", "run event"),
            ("embeddings", "vector"),
        )
    )
    print(
        f"copied {_count(counts['sessions'], 'session')} from {args.src} into {args.dst}: {added} "
        f"(the store holds {_count(held['messages'], 'message')} in {_count(held['sessions'], 'session')})",
        file=out,
    )
    return 0


def cmd_lab(args, out: TextIO) -> int:
    """Copy the tour notebooks to a folder and open them in JupyterLab (with STORE in a notebook of its own)."""
    lab = importlib.import_module("sessionkit._lab")
    if args.store is not None:
        with _existing_store(args.store) as store:  # a missing file or another program's database fails here
            target = store.path or args.store
    dest = Path(args.dir).expanduser().resolve()
    if dest.exists() and not dest.is_dir():
        raise CommandError(f"{dest} is a file, not a folder for the notebooks")
    try:
        copied, kept = lab.copy_tour(dest)
    except lab.LabError as exc:
        raise CommandError(str(exc)) from exc
    print(
        f"tour notebooks in {dest}: {_count(len(copied), 'file')} copied"
        + (f", {_count(len(kept), 'file')} already there kept as they are" if kept else ""),
        file=out,
    )
    first = None
    if args.store is not None:
        first = lab.store_notebook(dest, str(target)).name
        print(f"{first} opens {target}", file=out)
    out.flush()
    options = argparse.Namespace(
        notebooks=str(dest),
        port=args.port,
        token=None,
        no_browser=args.no_browser,
        prepare_only=False,
        settings_dir=None,
        timeout=args.timeout,
        first=first,
    )
    return int(lab.run(options))


def _agent_spec(spec: str) -> tuple[str, str]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(f"--agent must look like module:attribute (for example myapp.agents:support), got {spec!r}")
    return module_name, attr


def _load_agent(spec: str):
    """``module:attr`` -> the object, importing from the current folder first (as uvicorn does)."""
    _agent_spec(spec)
    from sessionkit.agent import load_agent

    try:
        agent = load_agent(spec)
    except ValueError as exc:
        raise CommandError(f"--agent: {exc}") from exc
    if isinstance(agent, sk.Agent):
        return agent
    module_name, attr = _agent_spec(spec)
    if isinstance(agent, type) or callable(agent):
        kind = "a class" if isinstance(agent, type) else "a function"
        raise CommandError(
            f"--agent {spec} names {kind}, not an agent: create the agent in {module_name} "
            f"(for example support = {attr}(...)) and pass that name (--agent {module_name}:support)"
        )
    raise CommandError(f"--agent {spec} is a {type(agent).__name__}, not a sessionkit Agent (sk.Agent(...))")


def cmd_serve(args, out: TextIO) -> int:
    """Serve an agent over HTTP; the bearer token comes from SESSIONKIT_TOKEN, never from argv."""
    _agent_spec(args.agent)  # a malformed spec fails before anything is loaded
    token = _token(os.environ.get("SESSIONKIT_TOKEN", ""), "SESSIONKIT_TOKEN")
    if not token:
        raise CommandError("set SESSIONKIT_TOKEN to the bearer token clients must send (16 characters or more)")
    server = _optional_module("sessionkit.server", "serve")
    serve = _function(server, "serve", "serve")
    try:
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CommandError("uvicorn is not installed; install it with: pip install 'sessionkit[server]'") from exc
    if args.workers > 1 and not str(args.store).lower().startswith(
        ("postgresql://", "postgres://", "postgresql+psycopg://")
    ):
        raise CommandError(
            "--workers above 1 needs a PostgreSQL store (postgresql://...): "
            "a SQLite or DuckDB store is served by one process"
        )
    _load_agent(args.agent)  # a name that cannot be loaded fails here, with its reason
    serve(
        args.agent,
        args.store,
        token=token,
        host=args.host,
        port=args.port,
        workers=args.workers,
        timeout_keep_alive=args.timeout_keep_alive,
        timeout_request=args.timeout_request,
        timeout_graceful_shutdown=args.timeout_graceful_shutdown,
        limit_concurrency=args.limit_concurrency or None,
        allowed_hosts=args.allow_host,
    )
    return 0


def _token(token: str, where: str) -> str:
    """The bearer token as given ("" for none); one shorter than 16 characters is refused."""
    if token and len(token) < 16:
        raise CommandError(f"{where} is shorter than 16 characters")
    return token


def cmd_view(args, out: TextIO) -> int:
    """The store viewer: served on 127.0.0.1 (a token elsewhere), or written as a static site with --bundle."""
    if args.bundle is not None:
        if args.write or args.token or args.allow_host or args.annotator or args.poll is not None:
            raise CommandError(
                "--bundle writes static files (a bundle does not follow the store): --write, --token,"
                " --allow-host, --annotator and --poll apply to the served viewer only"
            )
        with _existing_store(args.store, sql_memory_limit=args.sql_memory_limit) as store:
            folder = _bundle(store, args)
        print(f"viewer written to {folder}; open {Path(folder).resolve() / 'index.html'} in a browser", file=out)
        return 0
    if args.force:
        raise CommandError("--force replaces an earlier --bundle; the served viewer writes no files")
    if args.session:
        raise CommandError("--session chooses the sessions of a --bundle; the served viewer shows every session")
    server = _optional_module("sessionkit.server", "view")
    token = _token(args.token or os.environ.get("SESSIONKIT_TOKEN", ""), "the token")
    if not server.is_loopback(args.host) and not token:
        raise CommandError(
            f"--host {args.host} reaches other machines: set SESSIONKIT_TOKEN (or --token) to a bearer token "
            "of 16 characters or more"
        )
    annotators = _annotators(args)
    # a missing file, another program's database or a bad --column fails here, before binding
    with _existing_store(args.store, sql_memory_limit=args.sql_memory_limit) as store:
        columns = _view_columns(args, store)
    try:
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CommandError("uvicorn is not installed; install it with: pip install 'sessionkit[server]'") from exc

    def ready(url: str) -> None:
        print(f"sessionkit viewer of {args.store} at {url}" + ("" if args.write else " (read-only)"), file=out)
        base = url.split("?", 1)[0]
        for name, secret in annotators.items():
            print(f"  annotator {name}: {base}?{urlencode({'token': secret})}#/q/", file=out)
        out.flush()

    server.serve_view(
        args.store,
        host=args.host,
        port=args.port,
        token=token or None,
        write=args.write,
        allowed_hosts=args.allow_host,
        columns=columns,
        annotators=annotators or None,
        on_ready=ready,
        sql_memory_limit=args.sql_memory_limit,
        **({} if args.poll is None else {"poll": args.poll}),
    )
    return 0


def _annotators(args) -> dict[str, str]:
    """``--annotator NAME[=TOKEN]``: each annotator's token (a random one when not given)."""
    out: dict[str, str] = {}
    if args.annotator and not args.write:
        raise CommandError("--annotator labels the annotation queues, which need --write")
    for given in args.annotator or ():
        name, sep, secret = given.partition("=")
        name = name.strip()
        if not name or name in out:
            raise CommandError(f"--annotator {given!r}: give each annotator once, as NAME or NAME=TOKEN")
        if sep:
            out[name] = _token(secret, f"annotator {name}'s token")
            if not out[name]:
                raise CommandError(f"--annotator {given!r}: the token after = is empty")
        else:
            out[name] = secrets.token_urlsafe(24)
    return out


def cmd_collect(args, out: TextIO) -> int:
    """Receive OpenTelemetry traces (OTLP/HTTP) into a store: 127.0.0.1 needs no token, any other host one."""
    server = _optional_module("sessionkit.server", "collect")
    token = _token(args.token or os.environ.get("SESSIONKIT_TOKEN", ""), "the token")
    if not server.is_loopback(args.host) and not token:
        raise CommandError(
            f"--host {args.host} reaches other machines: set SESSIONKIT_TOKEN (or --token) to a bearer token "
            "of 16 characters or more"
        )
    local = _local_path(args.store)
    if local not in (None, ":memory:") and os.path.isfile(local) and os.path.getsize(local) > 0:
        with _existing_store(args.store):  # another program's database fails here, before binding
            pass
    try:
        import uvicorn  # noqa: F401

        import sessionkit.io.otel as otel

        otel.encode_status("", json_body=True)  # opentelemetry-proto and googleapis-common-protos are there
    except ImportError as exc:
        raise CommandError(f"{exc}; install them with: pip install 'sessionkit[otel]'") from exc

    def ready(url: str) -> None:
        print(f"sessionkit collecting OTLP traces into {args.store} at {url}", file=out)
        out.flush()

    server.serve_collect(
        args.store,
        host=args.host,
        port=args.port,
        token=token or None,
        allowed_hosts=args.allow_host or (),
        session_prefix=args.session_prefix or "",
        on_ready=ready,
    )
    return 0


def _view_columns(args, store: sk.Store | None = None) -> list[tuple[str, str]]:
    """``--columns FILE``'s columns, then each ``--column NAME=SQL`` (``UsageError`` for a bad one);
    with ``store``, each checked against it (a file's column named by its line)."""
    from sessionkit.widgets import viewer

    specs: list[tuple[str, str]] = []
    where: dict[str, str] = {}
    for path in args.columns or ():
        for name, sql, line in viewer.read_column_lines(path):
            specs.append((name, sql))
            where[name] = f"{path}, line {line}: "
    specs += [viewer.parse_column(spec) for spec in args.column or ()]
    if store is not None:
        seen: set[str] = set()
        for name, sql in specs:
            if name in seen:
                raise CommandError(f"{where.get(name, '')}column {name!r} is given twice")
            seen.add(name)
            try:
                viewer.check_columns(store, [(name, sql)], builtin=False)
            except sk.UsageError as exc:
                raise CommandError(where.get(name, "") + str(exc)) from exc
    return specs


def _bundle(store: sk.Store, args) -> Path:
    from sessionkit.widgets import viewer

    try:
        return viewer.write_bundle(
            store, args.bundle, session_ids=args.session, force=args.force, columns=_view_columns(args, store)
        )
    except (sk.SessionNotFound, sk.UsageError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
