"""OpenAI chat format -> sessionkit messages.

A chat is a list of ``{"role", "content", ...}`` messages as the Chat Completions
API takes them. The conversion keeps what a reader of the conversation needs:

* ``system`` / ``developer`` / ``user`` / ``assistant`` messages stay messages with
  the same role; string content becomes a ``text`` part; list content maps
  ``text`` -> ``text``, ``image_url`` / ``input_audio`` / ``file`` -> ``file`` parts,
  anything else is kept as given.
* each assistant ``tool_calls`` entry becomes a ``tool-<name>`` part with
  ``toolCallId`` and the parsed ``input``; the ``tool`` message answering it gives
  that part its ``output`` and ``state: "output-available"``. Tool messages are not
  kept as messages. A call id used twice pairs each result with the nearest earlier
  call that still waits for one. The legacy ``function_call`` / ``function`` pair is
  handled the same way.
* ``reasoning_content`` (or a string ``reasoning``) becomes a ``reasoning`` part;
  other keys of a chat message (``name``, ``refusal``, ...) go to
  ``metadata["openai"]``.

Message ids are derived from the content: each id hashes its parent's id and
the source message (with the results that were folded into it), so importing
the same chat again adds nothing, and importing a longer version of a chat adds
only what is new.

Files are streamed: a JSON array or ``{"messages": [...]}`` document is parsed
one record at a time, JSON lines a line at a time, and memory holds the messages
still waiting for a tool result rather than the file.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import operator
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import messages as _msg
from ..errors import MalformedInput, MessageNotFound, MessageTooLarge
from ..store import AppendResult, Session
from ._common import Batches, RootWatch, located, watching_roots, write_items
from ._progress import Progress, check_progress
from ._reading import EMPTY, TextStream, as_path, iter_jsonl, open_binary, parse_json

__all__ = ["import_openai", "chat_to_messages", "chat_message_id"]

_BATCH = 500
_KNOWN = {"role", "content", "tool_calls", "tool_call_id", "function_call", "reasoning_content"}


def _tool_output(content: Any) -> Any:
    """A tool message's content as output: a string stays; a list of text parts is joined."""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    return content


def _media_type_of_url(url: str, default: str) -> str:
    if url.startswith("data:"):
        head = url[5:].split(",", 1)[0]
        media = head.split(";", 1)[0]
        return media or default
    guessed, _ = mimetypes.guess_type(url.split("?", 1)[0])
    return guessed or default


def _content_parts(content: Any, where: str, source: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedInput(source, where, f"'content' must be a string, a list or null, got {type(content).__name__}")
    parts = []
    for i, item in enumerate(content):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            raise MalformedInput(source, where, f"content[{i}] must be an object with a string 'type'")
        kind = item["type"]
        if kind == "text":
            parts.append({"type": "text", "text": item.get("text", "")})
        elif kind == "image_url":
            image = item.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str):
                raise MalformedInput(source, where, f"content[{i}] (image_url) has no url")
            part: dict[str, Any] = {"type": "file", "mediaType": _media_type_of_url(url, "image/*"), "url": url}
            if isinstance(image, dict) and "detail" in image:
                part["providerMetadata"] = {"openai": {"detail": image["detail"]}}
            parts.append(part)
        elif kind == "input_audio":
            audio = item.get("input_audio") or {}
            fmt = audio.get("format", "wav") if isinstance(audio, dict) else "wav"
            data = audio.get("data") if isinstance(audio, dict) else None
            parts.append({"type": "file", "mediaType": f"audio/{fmt}", "data": data})
        elif kind == "file":
            f = item.get("file") or {}
            part = {"type": "file", "mediaType": "application/octet-stream"}
            if isinstance(f, dict):
                data = f.get("file_data")
                if isinstance(data, str) and data.startswith("data:"):
                    part["mediaType"] = _media_type_of_url(data, part["mediaType"])
                    part["url"] = data
                elif data is not None:
                    part["data"] = data
                if f.get("filename") is not None:
                    part["filename"] = f["filename"]
                if f.get("file_id") is not None:
                    part["providerMetadata"] = {"openai": {"file_id": f["file_id"]}}
            parts.append(part)
        else:
            parts.append(dict(item))
    return parts


def _parse_arguments(raw: Any, where: str, source: str, call: str) -> Any:
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str):
        return raw  # already parsed (some logs store a dict)
    try:
        return parse_json(raw, source, where)
    except MalformedInput as exc:
        if exc.problem.startswith("not valid JSON ("):
            problem = f"has arguments that are not JSON ({exc.problem[len('not valid JSON (') :]}"
        else:
            problem = f"has arguments no store keeps: {exc.problem}"
        raise MalformedInput(source, where, f"tool call {call!r} {problem}") from None


def canonical(value: Any) -> str:
    """Key-order independent JSON, for hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def chat_message_id(parent_id: str | None, records: list) -> str:
    """The id a chat message gets when converted under ``parent_id``: ``oai-`` and 24 hex digits of
    the SHA-256 of the parent's id and the message's source ``records`` (the chat message and the
    tool results folded into it), so the same message under the same parent has the same id."""
    return _message_id(parent_id, records, "<chat>", "message")


def _message_id(parent: str | None, source_message: Any, source: str, where: str) -> str:
    try:
        text = canonical(source_message)
    except RecursionError:
        raise MalformedInput(source, where, "nested too deep for a message") from None
    except (TypeError, ValueError) as exc:  # keys of mixed types, a circular reference
        raise MalformedInput(source, where, f"not JSON-encodable ({exc})") from None
    h = hashlib.sha256()
    h.update((parent or "").encode("utf-8", "surrogatepass"))
    h.update(b"\x00")
    h.update(text.encode("utf-8", "surrogatepass"))  # a lone surrogate is refused when stored
    return "oai-" + h.hexdigest()[:24]


class _Chat:
    """Turns chat records into sessionkit messages one record at a time.

    A kept message can be written once every tool result folded into it has been
    read; its id hashes its parent's id and its source records, so it is also the
    earliest its successors can be written. ``ready`` (from a first pass in ``plan``
    mode over the same records) gives, for each kept message, the index of the last
    record that changes it or one before it: :meth:`feed` returns the messages
    complete once that record is read, so a file streams through holding only the
    messages whose results are still to come. Without ``ready`` every message waits
    for :meth:`finish` (an in-memory chat).
    """

    def __init__(
        self,
        source: str,
        parent_id: str | None,
        *,
        ready: array | None = None,
        plan: bool = False,
        earlier: Callable[[int], Iterator[Any]] | None = None,
    ):
        self.source = source
        self.parent = parent_id
        self.ready = ready
        self.plan = plan
        self.done = array("q")  # plan: per kept message, the index of the last record folded into it
        self.entries: deque = deque()  # kept messages not yet returned: [message, records, where]
        self.base = 0  # number of kept messages already returned
        self.count = 0  # kept messages so far
        self.index = -1  # records read so far, minus one
        self.waiting: dict[str, list] = {}  # call id -> [(owner, part)] waiting for a result, oldest first
        self.earlier = earlier  # earlier(n): the first n records again, to word an error
        self.functions: list = []  # legacy function_call parts waiting for a result: [(owner, part)]

    def _called(self, call_id: str) -> bool:
        """Whether a record before this one made the call ``call_id`` (read again only for an error:
        keeping every answered call id would grow with the file)."""
        if self.earlier is None:
            return False
        for rec in self.earlier(self.index):
            calls = rec.get("tool_calls") if isinstance(rec, dict) else None
            if isinstance(calls, list) and any(isinstance(c, dict) and c.get("id") == call_id for c in calls):
                return True
        return False

    def _absorb(self, owner: int, part: dict | None, rec: dict, where: str) -> None:
        if self.plan:
            self.done[owner] = self.index
            return
        if owner < self.base:  # only when the file changed between the two passes
            raise MalformedInput(self.source, where, "the file changed while it was being imported")
        assert part is not None  # None only in a plan pass
        part["state"] = "output-available"
        part["output"] = _tool_output(rec.get("content"))
        self.entries[owner - self.base][1].append(rec)

    def feed(self, rec: Any, where: str) -> list[tuple[dict, str | None, str]]:
        """Read one record; returns the ``(message, parent_id, where)`` now complete."""
        self.index += 1
        source = self.source
        if not isinstance(rec, dict):
            raise MalformedInput(source, where, f"a chat message must be an object, got {type(rec).__name__}")
        role = rec.get("role")
        if not isinstance(role, str) or not role:
            raise MalformedInput(source, where, "chat message has no 'role'")
        if role == "tool":
            call_id = rec.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise MalformedInput(source, where, "tool message has no 'tool_call_id'")
            queue = self.waiting.get(call_id)
            if not queue:
                if self._called(call_id):
                    raise MalformedInput(
                        source, where, f"tool message answers call {call_id!r}, which already has a result"
                    )
                raise MalformedInput(
                    source,
                    where,
                    f"tool message answers call {call_id!r}, but no earlier assistant message made that call",
                )
            owner, part = queue.pop()  # the nearest earlier call with this id
            if not queue:
                del self.waiting[call_id]
            self._absorb(owner, part, rec, where)
            return self._ready()
        if role == "function":
            name = rec.get("name")
            for k in range(len(self.functions) - 1, -1, -1):
                owner, part, fname = self.functions[k]
                if fname == name:
                    del self.functions[k]
                    break
            else:
                raise MalformedInput(source, where, f"function message {name!r} answers no earlier function_call")
            self._absorb(owner, part, rec, where)
            return self._ready()
        parts: list[dict] = []
        reasoning = rec.get("reasoning_content")
        if reasoning is None and isinstance(rec.get("reasoning"), str):
            reasoning = rec["reasoning"]
        if isinstance(reasoning, str) and reasoning:
            parts.append({"type": "reasoning", "text": reasoning})
        calls = rec.get("tool_calls") or []
        content = rec.get("content")
        if not isinstance(calls, list):
            raise MalformedInput(source, where, "'tool_calls' must be a list")
        if not (calls and isinstance(content, str) and content == ""):
            parts += _content_parts(content, where, source)
        owner = self.count
        calls_made = []
        for k, call in enumerate(calls):
            if not isinstance(call, dict):
                raise MalformedInput(source, where, f"tool_calls[{k}] must be an object")
            function = call.get("function")
            fn = function if isinstance(function, dict) else call
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise MalformedInput(source, where, f"tool_calls[{k}] has no function name")
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise MalformedInput(source, where, f"tool_calls[{k}] ({name}) has no 'id'")
            part = {
                "type": f"tool-{name}",
                "toolCallId": call_id,
                "state": "input-available",
                "input": _parse_arguments(fn.get("arguments"), where, source, call_id),
            }
            parts.append(part)
            calls_made.append((call_id, part))
        legacy = rec.get("function_call")
        function_part = None
        function_name = legacy.get("name") if isinstance(legacy, dict) else None
        if isinstance(legacy, dict) and isinstance(function_name, str):
            function_part = {
                "type": f"tool-{function_name}",
                "toolCallId": f"function_call-{self.index}",
                "state": "input-available",
                "input": _parse_arguments(legacy.get("arguments"), where, source, function_name),
            }
            parts.append(function_part)
        # the record is valid: only now does it change the state
        for call_id, part in calls_made:
            self.waiting.setdefault(call_id, []).append((owner, None if self.plan else part))
        if function_part is not None:
            self.functions.append((owner, None if self.plan else function_part, function_name))
        self.count += 1
        if self.plan:
            self.done.append(self.index)
            return []
        message: dict = {"role": role, "parts": parts}
        extra = {k: v for k, v in rec.items() if k not in _KNOWN and not (k == "reasoning" and isinstance(v, str))}
        if extra:
            message["metadata"] = {"openai": extra}
        self.entries.append([message, [rec], where])
        return self._ready()

    def _emit(self, n: int) -> list[tuple[dict, str | None, str]]:
        out = []
        for _ in range(n):
            message, recs, where = self.entries.popleft()
            mid = _message_id(self.parent, recs, self.source, where)
            out.append(({"id": mid, **message}, self.parent, where))
            self.parent = mid
            self.base += 1
        return out

    def _ready(self) -> list[tuple[dict, str | None, str]]:
        if self.ready is None or not self.entries:
            return []
        n = 0
        limit = len(self.ready) - self.base  # more messages than planned: the file changed; wait for finish()
        while n < len(self.entries) and n < limit and self.ready[self.base + n] <= self.index:
            n += 1
        return self._emit(n) if n else []

    def finish(self) -> list[tuple[dict, str | None, str]]:
        """The messages not returned yet (all of them without ``ready``)."""
        return self._emit(len(self.entries))

    def plan_ready(self) -> array:
        """After a ``plan`` pass: for each kept message, the record after which it is complete
        (computed in place: the plan is used up)."""
        done, self.done = self.done, array("q")
        latest = -1
        for k, value in enumerate(done):
            if value > latest:
                latest = value
            else:
                done[k] = latest
        return done


def chat_to_messages(
    chat: list | tuple, *, parent_id: str | None = None, source: str = "<list>", labels: list[str] | None = None
) -> list[tuple[dict, str | None]]:
    """Convert a chat to ``[(message, parent_id), ...]`` without storing anything.

    The messages form one chain starting under ``parent_id``. ``labels`` name each
    record in error messages (default ``"record i"``). A chat that is not a list ->
    ``TypeError``; a record of the wrong shape -> :class:`MalformedInput` naming it.
    """
    if not isinstance(chat, (list, tuple)):
        raise TypeError(f"a chat must be a list of messages, got {type(chat).__name__}")
    if labels is not None and len(labels) != len(chat):
        raise TypeError(f"labels must name each of the {len(chat)} records, got {len(labels)}")
    converter = _Chat(source, parent_id, earlier=lambda n: iter(chat[:n]))
    for i, rec in enumerate(chat):
        converter.feed(rec, labels[i] if labels is not None else f"record {i}")
    return [(m, p) for m, p, _ in converter.finish()]


# ---------------------------------------------------------------------------
# Files, streamed


def _array(ts: TextStream, kind: str) -> Iterator[tuple[str, Any]]:
    ts.expect("[", "'['")
    if ts.peek() == "]":
        ts.pos += 1
        return
    i = 0
    while True:
        value, line = ts.value()
        yield (f"record {i} (line {line})" if kind == "record" else f"messages[{i}] (line {line})"), value
        i += 1
        if ts.expect(",]", "',' or ']'") == "]":
            return


def _end_of_file(ts: TextStream, what: str) -> None:
    if ts.peek() != "":
        raise MalformedInput(
            ts.source, ts.where(), f"not valid JSON (more data after the {what}, at column {ts.column_at(ts.pos)})"
        )


def _document(ts: TextStream):
    """Records of a JSON document that starts with ``{``: the items of its ``messages``
    array, or the object itself when it is one chat message. Returns True, having
    yielded nothing, when another value follows the first object: the file is JSON lines."""
    start = ts.line_at(ts.pos)
    ts.expect("{", "'{'")
    other: dict = {}
    found = False
    if ts.peek() == "}":
        ts.pos += 1
    else:
        while True:
            if ts.peek() != '"':
                ts.expect('"', "a property name in double quotes")
            key, _ = ts.value()
            ts.expect(":", "':'")
            if key == "messages" and ts.peek() == "[":
                if found:
                    raise MalformedInput(ts.source, ts.where(), "the document has two 'messages' arrays")
                found = True
                yield from _array(ts, "messages")
            else:
                value, _ = ts.value()
                if not found:
                    other[key] = value
            if ts.expect(",}", "',' or '}'") == "}":
                break
    if ts.peek() != "":
        if found:
            _end_of_file(ts, "document")
        return True
    if not found:
        if "role" not in other:
            raise MalformedInput(
                ts.source, None, 'expected a JSON array of chat messages, a JSONL file, or {"messages": [...]}'
            )
        yield f"line {start}", other
    return False


def _file_records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` of each chat message in the file, read as it goes."""
    name = str(path)
    with open_binary(path) as fh:
        ts = TextStream(fh, name)
        first = ts.peek()
        if first == "":
            raise MalformedInput(name, None, EMPTY)
        if first == "[":
            yield from _array(ts, "record")
            _end_of_file(ts, "JSON array")
            return
        lines = True if first != "{" else (yield from _document(ts))
    if not lines:
        return
    n = 0
    for lineno, value, _ in iter_jsonl(path):
        if n == 0 and isinstance(value, dict) and "role" not in value and isinstance(value.get("messages"), list):
            raise MalformedInput(name, f"line {lineno}", 'a {"messages": [...]} document must be the whole file')
        n += 1
        yield f"line {lineno}", value


# ---------------------------------------------------------------------------
# Results, read back on demand


class _StoredResult(AppendResult):
    """An :class:`AppendResult` whose message is read from the store when first asked for."""

    def __getattr__(self, name):
        if name != "message":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        session, mid = self.__dict__["_where"]
        message = session.get(mid)
        object.__setattr__(self, "message", message)
        return message


def _result(session, mid: str, inserted: bool) -> AppendResult:
    result = object.__new__(_StoredResult)
    object.__setattr__(result, "inserted", inserted)
    object.__setattr__(result, "_where", (session, mid))
    return result


class ImportResults(Sequence):
    """What :func:`import_openai` did, one :class:`AppendResult` per message kept, in chain order.

    Holds 13 bytes per message (its id and whether it was inserted); each result's
    ``message`` is read from the session when first used, so importing a million
    messages does not keep them in memory.
    """

    def __init__(self, session):
        self._session = session
        self._ids = bytearray()  # 12 bytes per id: the hex digits after "oai-"
        self._inserted = bytearray()

    def _add(self, mid: str, inserted: bool) -> None:
        self._ids += bytes.fromhex(mid[4:])
        self._inserted.append(1 if inserted else 0)

    def _id(self, i: int) -> str:
        return "oai-" + self._ids[12 * i : 12 * i + 12].hex()

    def __len__(self) -> int:
        return len(self._inserted)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"result indices must be integers or slices, not {type(i).__name__}") from None
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("result index out of range")
        return _result(self._session, self._id(i), bool(self._inserted[i]))

    @property
    def ids(self) -> list[str]:
        """The ids of the messages, in chain order."""
        return [self._id(i) for i in range(len(self))]

    def __repr__(self) -> str:
        added = sum(self._inserted)
        return f"<ImportResults: {len(self)} messages, {added} inserted, session {self._session.session_id!r}>"


# ---------------------------------------------------------------------------
# Import


#: What a merge warning of this importer suggests.
_HINT = "Import each chat into a session of its own (another session id; sessionkit import --session)."


def _writer(session, batches: Batches, results: ImportResults, source: str, watch: RootWatch):
    """``write(items)``: store ``[(message, parent, where)]`` as one record of ``batches``."""
    max_bytes = session.store.max_message_bytes

    def write(chunk: list[tuple[dict, str | None, str]]) -> None:
        items = [(m, p, None) for m, p, _ in chunk]
        written: list = []  # what the last run of store() did (a failure later in its group runs it again)

        def store() -> None:
            written[:] = write_items(session, items, watch)

        def salvage(exc: BaseException) -> BaseException | None:
            for j, (m, _, where) in enumerate(chunk):
                try:
                    _msg.prepare(m, max_bytes=max_bytes)
                except MessageTooLarge as bad:
                    culprit: BaseException = located(bad, source, where)
                except (ValueError, TypeError) as bad:
                    culprit = MalformedInput(source, where, f"cannot store the message: {bad}")
                else:
                    continue
                if j:
                    head = chunk[:j]
                    for (m2, _, _), r in zip(head, write_items(session, [(a, b, None) for a, b, _ in head], watch)):
                        results._add(m2["id"], r.inserted)
                    batches.add(j, head[-1][2])
                return culprit
            return None

        batches.write(chunk[-1][2], store, records=len(chunk), salvage=salvage)
        for (m, _, _), r in zip(chunk, written):
            results._add(m["id"], r.inserted)

    return write


def import_openai(session, source: Any, *, parent_id: str | None = None, progress: Any = None) -> ImportResults:
    """Import an OpenAI-format chat into ``session``; returns one ``AppendResult`` per message kept.

    ``source`` is a list of chat messages, or a path to a JSON array, a JSON-lines
    file (one chat message per line, gzip allowed) or a ``{"messages": [...]}``
    document. The chat becomes one chain under ``parent_id`` (default: a new root).
    Idempotent: ids derive from the content, so importing the same chat twice adds
    nothing.

    A file is read twice, a record at a time, in bounded memory: the first pass
    checks every record and pairs the tool calls with their results, the second
    writes the messages in batches of 500 as they complete. A problem in the
    file's text or shape raises :class:`MalformedInput` naming the record or line
    before anything is written; a message the store refuses stops the import with
    the messages before it stored (the error says how many). The result is an
    :class:`ImportResults` sequence whose messages are read back on demand.
    ``progress`` as in :class:`sessionkit.io.Progress` (messages written).
    """
    if not isinstance(session, Session):
        raise TypeError(f"expected a sessionkit Session (store.session(id)), got {type(session).__name__}")
    if parent_id is not None and not isinstance(parent_id, str):
        raise TypeError("parent_id must be a message id (str) or None")
    check_progress(progress)
    if isinstance(source, (list, tuple)):
        name = "<list>"
        converted = [(m, p, f"record {i}") for i, (m, p) in enumerate(chat_to_messages(source, parent_id=parent_id))]
        if parent_id is not None and session.get(parent_id) is None:
            raise MessageNotFound(f"parent message {parent_id!r} is not in session {session.session_id!r}")
        results = ImportResults(session)
        with (
            watching_roots(session.store, name, _HINT) as watch,
            Progress(progress, total=len(converted), desc="importing <list>", unit="messages") as bar,
            Batches(session.store, source=name, unit="messages", group=4) as batches,
        ):
            write = _writer(session, batches, results, name, watch)
            for start in range(0, len(converted), _BATCH):
                batch = converted[start : start + _BATCH]
                write(batch)
                bar.update(len(batch))
        return results
    path = as_path(source)
    name = str(path)
    results = ImportResults(session)
    with (
        watching_roots(session.store, name, _HINT) as watch,
        Batches(session.store, source=name, unit="messages", group=4) as batches,
    ):

        def earlier(n: int) -> Iterator[Any]:
            return (rec for _, (_, rec) in zip(range(n), _file_records(path)))

        plan = _Chat(name, parent_id, plan=True, earlier=earlier)  # first pass: check every record, pair calls
        for where, rec in _file_records(path):
            plan.feed(rec, where)
        total = plan.count
        ready = plan.plan_ready()
        del plan
        if parent_id is not None and session.get(parent_id) is None:
            raise MessageNotFound(f"parent message {parent_id!r} is not in session {session.session_id!r}")
        with Progress(progress, total=total, desc=f"importing {path.name}", unit="messages") as bar:
            write = _writer(session, batches, results, name, watch)
            chat = _Chat(name, parent_id, ready=ready)  # second pass: write the messages as they complete
            chunk: list = []
            try:
                for where, rec in _file_records(path):
                    chunk += chat.feed(rec, where)
                    if len(chunk) >= _BATCH:
                        write(chunk)
                        bar.update(len(chunk))
                        chunk = []
                chunk += chat.finish()
            except MalformedInput:
                if chunk:  # the messages complete before the problem are written too
                    write(chunk)
                raise
            if chunk:
                write(chunk)
                bar.update(len(chunk))
    return results
