"""The whole exception tree of sessionkit.

Every error the library raises on purpose derives from :class:`SessionKitError`.
Where a Python user expects a built-in type, the error also derives from it, so
``except ValueError`` or ``except LookupError`` keep working::

    SessionKitError
    ├── InvalidMessage          (also ValueError)   a message fails validation
    ├── MessageNotFound         (also LookupError)  an unknown message id
    ├── SessionNotFound         (also LookupError)  an unknown session id
    ├── StoreClosed                                 the store was closed
    ├── StoreLocked                                 another process holds the store
    ├── MessageTooLarge         (also ValueError)   over max_message_bytes
    ├── InvalidLabel            (also ValueError)   a label fails its checks
    ├── InvalidDataset          (also ValueError)   a dataset's name, level or selection is refused
    ├── DatasetNotFound         (also LookupError)  an unknown dataset name or version
    ├── InvalidQueue            (also ValueError)   an annotation queue, claim or submission is refused
    ├── QueueNotFound           (also LookupError)  no annotation queue of that name
    ├── SchemaVersionError                          written by a newer sessionkit
    ├── StoreCorrupt                                a damaged store file or schema
    ├── MalformedInput          (also ValueError)   a file or record an importer cannot read
    ├── UsageError                                  a call that cannot be honoured now
    ├── MissingDependency       (also ImportError)  an optional extra is not installed
    └── RunFailed                                   an agent run did not complete
        ├── ModelError                              the model provider failed
        ├── MaxStepsExceeded                        too many model turns
        ├── RunTimeout                              the run took longer than allowed
        ├── RunInterrupted                          RunController.interrupt()
        └── GuardrailTripped                        an input or output guardrail blocked the run
"""

from __future__ import annotations

__all__ = [
    "MalformedInput",
    "SessionKitError",
    "InvalidMessage",
    "MessageNotFound",
    "SessionNotFound",
    "StoreClosed",
    "StoreLocked",
    "MessageTooLarge",
    "InvalidLabel",
    "InvalidDataset",
    "DatasetNotFound",
    "InvalidQueue",
    "QueueNotFound",
    "SchemaVersionError",
    "StoreCorrupt",
    "ScorerFailed",
    "UsageError",
    "QueryTimeout",
    "QueryMemoryExceeded",
    "MissingDependency",
    "RunFailed",
    "ModelError",
    "MaxStepsExceeded",
    "RunTimeout",
    "RunInterrupted",
    "GuardrailTripped",
]


class SessionKitError(Exception):
    """Root of every sessionkit error."""


class InvalidMessage(SessionKitError, ValueError):
    """A message does not have the shape docs/messages.md asks for; nothing was stored."""


class MessageNotFound(SessionKitError, LookupError):
    """No message with that id exists in this session."""

    def __str__(self) -> str:  # LookupError would repr() the message
        return str(self.args[0]) if self.args else "message not found"


class SessionNotFound(SessionKitError, LookupError):
    """No session with that id holds anything in this store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "session not found"


class StoreClosed(SessionKitError):
    """The store was closed; open a new one."""


class StoreLocked(SessionKitError):
    """Another process holds the store (DuckDB file, or a server's lease)."""


class MessageTooLarge(SessionKitError, ValueError):
    """The message is larger than ``max_message_bytes``; nothing was stored."""


class InvalidLabel(SessionKitError, ValueError):
    """A label's tag, rating, note, author or target is refused (docs/labels.md); nothing was stored."""


class InvalidDataset(SessionKitError, ValueError):
    """A dataset's name, version, level or selection is refused (docs/judging.md); nothing was stored."""


class DatasetNotFound(SessionKitError, LookupError):
    """No dataset of that name (or that version of it) is stored."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "dataset not found"


class InvalidQueue(SessionKitError, ValueError):
    """An annotation queue's definition, an annotator or a submission is refused
    (docs/annotation.md); nothing was stored."""


class QueueNotFound(SessionKitError, LookupError):
    """No annotation queue of that name is stored."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "queue not found"


class SchemaVersionError(SessionKitError):
    """The store was written by a newer sessionkit schema than this one understands."""


class StoreCorrupt(SessionKitError):
    """The store's file or schema is damaged (a broken page, a missing table, a garbage
    schema version); nothing was changed. Restore it from a copy, or export what still
    reads with ``sessionkit export``."""


class MalformedInput(SessionKitError, ValueError):
    """A file or record given to an importer does not have the expected shape.

    ``source`` names the file (or ``"<list>"`` for in-memory input) and ``where``
    the line (``"line 12"``) or record (``"record 3"``) at fault; both appear in
    the message. ``imported`` is how many records (trees, pairs, lines or
    messages, as the importer counts them) the failed import had stored before
    it stopped (``None`` outside an import); the message says it too.
    """

    def __init__(self, source: str, where: str | None, problem: str, *, imported: int | None = None):
        self.source = source
        self.where = where
        self.problem = problem
        self.imported = imported
        self._progress = ""
        super().__init__(self._text())

    def _text(self) -> str:
        location = self.source if self.where is None else f"{self.source}, {self.where}"
        return f"{location}: {self.problem}{self._progress}"

    def __reduce__(self):
        return (_rebuild, (self.source, self.where, self.problem, self.imported, self._progress))

    def _set_progress(self, imported: int, note: str) -> None:
        self.imported = imported
        self._progress = f" ({note})"
        self.args = (self._text(),)


def _rebuild(source, where, problem, imported, progress) -> MalformedInput:
    exc = MalformedInput(source, where, problem, imported=imported)
    exc._progress = progress
    exc.args = (exc._text(),)
    return exc


class UsageError(SessionKitError):
    """The call cannot be honoured in the current state (for example no compaction function)."""


class QueryTimeout(UsageError, TimeoutError):
    """An analysis query (``store.sql``, ``store.sql_arrow``) ran past its ``timeout`` and
    was stopped; the store answers the next query as before."""


class QueryMemoryExceeded(UsageError):
    """An analysis query (``store.sql``, ``store.sql_arrow``) needed more memory than the
    store's ``sql_memory_limit`` (or DuckDB's own limit) allows and was stopped; the store
    answers the next query as before."""


class ScorerFailed(SessionKitError):
    """A scorer raised while an experiment scored its replies (the scorer's exception is
    ``__cause__``); the replies stored so far stay, and running the experiment again
    scores the rest."""


class MissingDependency(SessionKitError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class RunFailed(SessionKitError):
    """An agent run failed. ``run_id`` names the run; the conversation is unchanged."""

    def __init__(self, message: str = "", *, run_id: str | None = None):
        super().__init__(message)
        self.run_id = run_id


class ModelError(RunFailed):
    """The model provider returned an error (the original is kept as ``__cause__``)."""


class MaxStepsExceeded(RunFailed):
    """The model kept asking for tools beyond ``max_steps`` turns."""


class RunTimeout(RunFailed):
    """The run did not finish within its ``timeout``."""


class RunInterrupted(RunFailed):
    """The run was interrupted through its controller."""


class GuardrailTripped(RunFailed):
    """A guardrail blocked the run (or raised while checking it); nothing was appended.

    ``reason`` is what the guardrail returned (or, when it raised, the exception's
    type and text, the exception kept as ``__cause__``); ``guardrail`` is the
    guardrail's ``__name__``; ``stage`` is ``"input"`` or ``"output"``.
    """

    def __init__(
        self,
        message: str = "",
        *,
        run_id: str | None = None,
        reason: str = "",
        guardrail: str = "",
        stage: str = "",
    ):
        super().__init__(message or reason, run_id=run_id)
        self.reason = reason
        self.guardrail = guardrail
        self.stage = stage


def missing(extra: str, package: str, exc: ImportError | None = None) -> MissingDependency:
    """Build the error for a missing optional dependency."""
    err = MissingDependency(f"{package} is not installed; install it with: pip install 'sessionkit[{extra}]'")
    if exc is not None:
        err.__cause__ = exc
    return err
