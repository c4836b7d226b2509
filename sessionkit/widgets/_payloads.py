"""The boundary between the views' Python and their front end (``static/*.js``), declared once.

Every value the kernel (or the store viewer's data and API) hands a front end, and every
message a front end sends back, is a ``TypedDict`` here: the functions that build or receive
them name these types, mypy checks them, and ``tools/gen_js_types.py`` writes them out as the
JSDoc typedefs of ``static/types.d.ts``, which ``tsc`` checks the JavaScript against (``make
lint``). ``tests/widgets/test_payloads.py`` checks that the typedefs are current and that every
message type the JavaScript sends has its type here and a handler in a view.

A field whose value is any JSON the store kept (a message's metadata, a tool's input, a run
event) is ``object``: the front end renders it as it comes. The front end's messages come from
a page and are checked by their handlers before use, whatever their declared type says.
"""

from collections.abc import Callable
from typing import Literal, NotRequired, TypedDict

__all__ = [
    "LabelView",
    "LabelsByMessage",
    "CompactionBand",
    "TreePayload",
    "PathCompaction",
    "PathEntry",
    "PathPayload",
    "PathPair",
    "TextPartView",
    "ReasoningPartView",
    "ToolPartView",
    "FilePartView",
    "OtherPartView",
    "PartView",
    "MessageView",
    "BranchSide",
    "BranchDiff",
    "UsageTotals",
    "TurnUsage",
    "ToolState",
    "TurnState",
    "RunState",
    "RunViewState",
    "RunSummary",
    "QueueItem",
    "ControllerQueue",
    "CompareColumn",
    "ExperimentScore",
    "ExperimentCell",
    "ExperimentItem",
    "TimelineCall",
    "TimelineRun",
    "TimelinePayload",
    "ColumnHead",
    "ColumnSpec",
    "SessionsPage",
    "SearchHitView",
    "RunStatus",
    "SessionPageState",
    "SimilarSession",
    "SimilarSessions",
    "BundleSession",
    "BundleTable",
    "QueuePageState",
    "UnitMessage",
    "UnitView",
    "FetchRequest",
    "DetailRequest",
    "AddLabelRequest",
    "RemoveLabelRequest",
    "HelloRequest",
    "SteerRequest",
    "FollowUpRequest",
    "ClearRequest",
    "InterruptRequest",
    "ViewRequest",
    "QueueStateRequest",
    "QueueNextRequest",
    "QueueSubmitRequest",
    "QueueReleaseRequest",
    "QueueRequest",
    "PreviewsReply",
    "DetailReply",
    "MessagesReply",
    "LabelAddedReply",
    "LabelRemovedReply",
    "EventsReply",
    "ResetReply",
    "ErrorReply",
    "ViewReply",
    "QueueStateReply",
    "QueueUnitReply",
    "QueueSubmittedReply",
    "QueueReleasedReply",
    "QueueReply",
    "Handler",
    "QueueHandler",
    "VIEW_REQUESTS",
    "QUEUE_REQUESTS",
    "API_ONLY_REQUESTS",
    "VIEW_REPLIES",
    "QUEUE_REPLIES",
    "PAYLOADS",
]


# -- labels (BranchTree, Transcript: the synced ``_labels``; the viewer's session state) ----------


class LabelView(TypedDict):
    """A label as a badge shows it (docs/labels.md)."""

    id: str
    tag: str
    rating: float | None
    target: str
    note: str | None
    author: str | None
    source: str
    scorer: str | None
    rationale: str | None


#: A session's labels by message id, in the order they were added.
LabelsByMessage = dict[str, list[LabelView]]


# -- the tree (BranchTree's synced ``_tree``) -----------------------------------------------------

#: A compaction over the tree's messages; ``from``/``to`` are indices in the tree's arrays (-1: not in it).
CompactionBand = TypedDict(
    "CompactionBand",
    {
        "id": str,
        "from": int,
        "to": int,
        "from_id": str,
        "to_id": str,
        "summary": str,
        "messages": int,
        "tokens_before": int,
        "tokens_after": int,
        "created_at": str,
        "superseded": bool,
    },
)


class TreePayload(TypedDict):
    """A session's tree as parallel arrays (index = position in write order), no message text."""

    v: int
    session_id: str
    n: int
    ids: list[str]
    parent: list[int]
    role: list[int]
    roles: list[str]
    tokens: list[int]
    latest: int
    compactions: list[CompactionBand]
    linear: bool


# -- one path (Transcript's synced ``_path``) -------------------------------------------------------


class PathCompaction(TypedDict):
    """A compaction on a path: the summary the model sees instead of ``messages`` messages."""

    id: str
    overlay_id: str
    from_id: str
    to_id: str
    summary: str
    messages: int
    tokens_before: int
    tokens_after: int
    created_at: str


class PathEntry(TypedDict):
    """One row of a transcript: a message, a compaction's summary, or (full history) a hidden message."""

    id: str
    role: str
    tokens: int
    kind: Literal["message", "summary", "hidden"]
    compaction: NotRequired[int]


class PathPayload(TypedDict):
    """The path to ``leaf_id`` as transcript entries (no message text)."""

    leaf_id: str | None
    entries: list[PathEntry]
    compactions: list[PathCompaction]
    tokens_model: int
    tokens_full: int


class PathPair(TypedDict):
    """A path in both modes: what the model sees, and the full history."""

    model: PathPayload
    full: PathPayload


# -- a message condensed for display (message_view) ------------------------------------------------


class TextPartView(TypedDict):
    type: Literal["text"]
    text: str


class ReasoningPartView(TypedDict):
    type: Literal["reasoning"]
    text: str


class ToolPartView(TypedDict):
    type: Literal["tool"]
    name: str
    id: str | None
    state: str | None
    input: str | None
    output: str | None
    error: str | None


class FilePartView(TypedDict):
    type: Literal["file"]
    mediaType: str | None
    name: str | None
    url: str | None


class OtherPartView(TypedDict):
    type: Literal["other"]
    kind: str
    json: str


PartView = TextPartView | ReasoningPartView | ToolPartView | FilePartView | OtherPartView


class MessageView(TypedDict):
    """A message as the views render it: long texts cut, tool input and output as text."""

    id: str | None
    role: str | None
    createdAt: str | None
    preview: str
    parts: list[PartView]
    usage: dict[str, object] | None
    run_id: str | None
    tokens: NotRequired[int]


# -- two branches compared (BranchTree's synced ``diff``) ----------------------------------------


class BranchSide(TypedDict):
    leaf_id: str | None
    messages: int
    tokens: int
    roles: dict[str, int]
    tool_calls: int
    usage_in: int | None
    usage_out: int | None
    usage_known: int
    cost_usd: float | None
    cost_known_usd: float | None
    cost_known: int
    cost_unknown: int
    first_id: str | None
    first_preview: str | None


class BranchDiff(TypedDict):
    a_id: str
    b_id: str
    fork_id: str | None
    shared_messages: int
    shared_tokens: int
    a: BranchSide
    b: BranchSide
    tokens_delta: int


# -- runs (RunView: the fold of run events, its synced ``summary`` and ``queue``) --------------------

UsageTotals = TypedDict(
    "UsageTotals",
    {
        "in": int,
        "out": int,
        "cache_read": int,
        "cache_write": int,
        "cost_usd": float,
        "calls": int,
        "unpriced": int,
    },
)

#: One model call's usage as its event gave it.
TurnUsage = TypedDict(
    "TurnUsage",
    {
        "in": float | None,
        "out": float | None,
        "cache_read": float | None,
        "cache_write": float | None,
        "cost_usd": float | None,
        "model": str | None,
    },
)


class ToolState(TypedDict):
    id: str | None
    name: str | None
    input: object
    output: object
    error: object
    done: bool


class TurnState(TypedDict):
    turn: int
    input: object
    mode: str | None
    text: str
    reasoning: str
    tools: list[ToolState]
    usage: TurnUsage | None
    stop_reason: str | None
    done: bool


class RunState(TypedDict):
    run_id: str | None
    input: object
    status: str
    error: object
    started: str | None
    ended: str | None
    turns: list[TurnState]
    usage: UsageTotals


class RunViewState(TypedDict):
    """Everything a RunView shows, folded from the events (``_runlog``, ``run_view.js`` ``rvApply``)."""

    runs: list[RunState]
    usage: UsageTotals
    last_seq: int


class RunSummary(TypedDict):
    runs: int
    turns: int
    status: str
    run_id: str | None
    usage: UsageTotals


class QueueItem(TypedDict):
    mode: str
    text: str


class ControllerQueue(TypedDict):
    """A run controller's queue: the active run, and the messages waiting for it."""

    active: str | None
    queued: int
    items: list[QueueItem]


# -- CompareView and ExperimentView ----------------------------------------------------------------


class CompareColumn(TypedDict):
    """One variant's column of a comparison."""

    variant: str
    status: str
    model: str | None
    text: str
    tools: list[str]
    input_tokens: int | None
    output_tokens: int | None
    cost_usd: float | None
    error: str | None


class ExperimentScore(TypedDict):
    name: str
    value: object
    delta: float | None


class ExperimentCell(TypedDict):
    """One variant's result for one item, with its scores' differences from the baseline's."""

    variant: str
    status: str
    reply: str
    error: str | None
    scores: list[ExperimentScore]
    output_tokens: int | None
    cost_usd: float | None
    latency_s: float | None
    session_id: str | None
    reply_id: str | None
    href: str | None
    baseline: bool


class ExperimentItem(TypedDict):
    item: object
    prompt: object
    cells: list[ExperimentCell]


# -- the timeline of a session's runs (RunView's ``_timeline``, the viewer's timeline) --------------


class TimelineCall(TypedDict):
    """A model or tool call on a run's timeline (times ISO 8601, seconds from the run's start)."""

    kind: Literal["model", "tool"]
    index: int
    name: str | None
    turn: int | None
    start: str | None
    end: str | None
    offset_s: float | None
    duration_s: float | None
    error: str | None
    message_id: str | None
    tokens_in: NotRequired[float | int | None]
    tokens_out: NotRequired[float | int | None]
    cost_usd: NotRequired[float | int | None]
    model: NotRequired[str | None]
    tool_call_id: NotRequired[str]


class TimelineRun(TypedDict):
    run_id: str
    start: str | None
    end: str | None
    duration_s: float | None
    status: str | None
    error: str | None
    calls: list[TimelineCall]


class TimelinePayload(TypedDict):
    runs: list[TimelineRun]


# -- the store viewer's data (its API answers, a bundle's data files) ------------------------------


class ColumnHead(TypedDict):
    """An extra column of the sessions table as the page shows it."""

    name: str
    label: str


class ColumnSpec(TypedDict):
    """An extra column of the sessions table: its query, and the query's value column."""

    name: str
    label: str
    sql: str
    value: str


class SessionsPage(TypedDict):
    """One page of the sessions table (``GET /api/sessions``); a row is a column name -> value."""

    rows: list[dict[str, object]]
    total: int
    offset: int
    limit: int
    sort: str
    desc: bool
    labels: bool
    columns: list[ColumnHead]


class SearchHitView(TypedDict):
    session_id: str
    id: str
    role: str
    snippet: str
    score: float


class RunStatus(TypedDict):
    run_id: str
    status: str


class SessionPageState(TypedDict):
    """What a session's page opens with (``GET /api/session``)."""

    session_id: str
    tree: TreePayload
    latest: str | None
    runs: list[RunStatus]
    labels: LabelsByMessage


class SimilarSession(TypedDict):
    session_id: str
    score: float
    messages: int


class SimilarSessions(TypedDict):
    model: str | None
    sessions: list[SimilarSession]
    note: str | None


class BundleSession(SessionPageState):
    """A session of a bundle (``data/s<N>.js``): its page's state and everything the page asks for."""

    paths: PathPair | None
    messages: dict[str, MessageView]
    events: list[dict[str, object]]
    timeline: TimelinePayload
    similar: SimilarSessions


class BundleTable(TypedDict):
    """A bundle's sessions table (``data/sessions.js``): every row, each session's data file, the overview."""

    rows: list[dict[str, object]]
    files: dict[str, str]
    labels: bool
    columns: list[ColumnHead]
    overview: dict[str, object]


# -- annotation queues (QueueView, the viewer's #/q/NAME) ------------------------------------------


class QueuePageState(TypedDict):
    """A queue's definition, progress and agreement (``QueueInfo.to_dict``, ``QueueProgress.to_dict``)."""

    queue: dict[str, object]
    progress: dict[str, object]
    agreement: list[dict[str, object]]
    annotator: str | None


class UnitMessage(TypedDict):
    id: str | None
    role: str | None
    text: str


class UnitView(TypedDict):
    """A claimed unit (``QueueUnit``'s fields) with its messages as text."""

    queue: str
    n: int
    session_id: str
    message_id: str
    level: str
    target: str
    annotator: str
    expires_at: str
    hidden: int
    messages: list[UnitMessage]


# -- what a view's front end sends the kernel (routed by each view's handler table) -----------------
# ``req`` numbers a request; the reply carries it back.


class FetchRequest(TypedDict):
    """The text of messages: previews (BranchTree) or message views (Transcript)."""

    type: Literal["fetch"]
    ids: list[str]
    req: int


class DetailRequest(TypedDict):
    """One message in full (BranchTree's detail pane)."""

    type: Literal["detail"]
    id: str
    req: int


class AddLabelRequest(TypedDict):
    type: Literal["add-label"]
    id: str
    tag: str
    rating: float | None
    target: Literal["message", "branch"]
    req: int


class RemoveLabelRequest(TypedDict):
    type: Literal["remove-label"]
    label: str
    req: int


class HelloRequest(TypedDict):
    """A RunView front end asks for every batch sent so far."""

    type: Literal["hello"]
    req: int


class SteerRequest(TypedDict):
    type: Literal["steer"]
    text: str


class FollowUpRequest(TypedDict):
    type: Literal["follow_up"]
    text: str


class ClearRequest(TypedDict):
    """Remove the queued message at ``index``."""

    type: Literal["clear"]
    index: int


class InterruptRequest(TypedDict):
    type: Literal["interrupt"]


ViewRequest = (
    FetchRequest
    | DetailRequest
    | AddLabelRequest
    | RemoveLabelRequest
    | HelloRequest
    | SteerRequest
    | FollowUpRequest
    | ClearRequest
    | InterruptRequest
)


class QueueStateRequest(TypedDict):
    type: Literal["state"]
    req: int
    annotator: str | None


class QueueNextRequest(TypedDict):
    type: Literal["next"]
    req: int
    annotator: str | None


class QueueSubmitRequest(TypedDict):
    type: Literal["submit"]
    req: int
    annotator: str | None
    n: int
    tag: str
    rating: float | None
    note: str


class QueueReleaseRequest(TypedDict):
    """Give a claimed unit back (``POST /api/queue`` only: queue_view.js never sends it)."""

    type: Literal["release"]
    req: NotRequired[int]
    annotator: NotRequired[str | None]
    n: int


QueueRequest = QueueStateRequest | QueueNextRequest | QueueSubmitRequest | QueueReleaseRequest


# -- what the kernel answers ------------------------------------------------------------------------


class PreviewsReply(TypedDict):
    type: Literal["previews"]
    req: object
    items: dict[str, str]


class DetailReply(TypedDict):
    type: Literal["detail"]
    req: object
    id: object
    message: MessageView | None


class MessagesReply(TypedDict):
    type: Literal["messages"]
    req: object
    items: dict[str, MessageView]


class LabelAddedReply(TypedDict):
    type: Literal["label-added"]
    req: object
    label: str


class LabelRemovedReply(TypedDict):
    type: Literal["label-removed"]
    req: object
    removed: bool


class EventsReply(TypedDict):
    """A batch of run events (consecutive text deltas merged), each numbered by ``_i``."""

    type: Literal["events"]
    events: list[dict[str, object]]


class ResetReply(TypedDict):
    type: Literal["reset"]
    req: object
    events: list[dict[str, object]]


class ErrorReply(TypedDict):
    """A request that failed: ``error`` says why."""

    type: Literal["error"]
    req: object
    error: str


ViewReply = (
    PreviewsReply
    | DetailReply
    | MessagesReply
    | LabelAddedReply
    | LabelRemovedReply
    | EventsReply
    | ResetReply
    | ErrorReply
)


class QueueStateReply(QueuePageState):
    type: Literal["state"]
    req: object


class QueueUnitReply(TypedDict):
    type: Literal["unit"]
    req: object
    unit: UnitView | None


class QueueSubmittedReply(TypedDict):
    type: Literal["submitted"]
    req: object
    label: dict[str, object]


class QueueReleasedReply(TypedDict):
    type: Literal["released"]
    req: object
    released: bool


QueueReply = QueueStateReply | QueueUnitReply | QueueSubmittedReply | QueueReleasedReply | ErrorReply


#: A view's handler of one front-end message: called with the view and the message.
Handler = Callable[..., None]
#: The handler of one request of a queue's page: ``(store, queue name, annotator, request)``.
QueueHandler = Callable[..., QueueReply]

#: Every message a view's front end sends the kernel, by its ``type``: each view routes the
#: ones it understands through its handler table (``_views._View._handlers``); any other is ignored.
VIEW_REQUESTS: dict[str, type] = {
    "fetch": FetchRequest,
    "detail": DetailRequest,
    "add-label": AddLabelRequest,
    "remove-label": RemoveLabelRequest,
    "hello": HelloRequest,
    "steer": SteerRequest,
    "follow_up": FollowUpRequest,
    "clear": ClearRequest,
    "interrupt": InterruptRequest,
}

#: The requests of an annotation queue's page (``queue_view.js``), answered by ``_queue.answer``
#: for the notebook's QueueView and the viewer's ``POST /api/queue`` alike.
QUEUE_REQUESTS: dict[str, type] = {
    "state": QueueStateRequest,
    "next": QueueNextRequest,
    "submit": QueueSubmitRequest,
    "release": QueueReleaseRequest,
}

#: Requests only other clients of the viewer's API send (docs/annotation.md), never a page.
API_ONLY_REQUESTS = frozenset({"release"})

#: What the kernel answers a view's front end, by ``type``.
VIEW_REPLIES: dict[str, type] = {
    "previews": PreviewsReply,
    "detail": DetailReply,
    "messages": MessagesReply,
    "label-added": LabelAddedReply,
    "label-removed": LabelRemovedReply,
    "events": EventsReply,
    "reset": ResetReply,
    "error": ErrorReply,
}

#: What ``_queue.answer`` replies, by ``type``.
QUEUE_REPLIES: dict[str, type] = {
    "state": QueueStateReply,
    "unit": QueueUnitReply,
    "submitted": QueueSubmittedReply,
    "released": QueueReleasedReply,
    "error": ErrorReply,
}

#: Every TypedDict of the boundary, in the order the typedefs are written.
PAYLOADS: tuple[type, ...] = (
    LabelView,
    CompactionBand,
    TreePayload,
    PathCompaction,
    PathEntry,
    PathPayload,
    PathPair,
    TextPartView,
    ReasoningPartView,
    ToolPartView,
    FilePartView,
    OtherPartView,
    MessageView,
    BranchSide,
    BranchDiff,
    UsageTotals,
    TurnUsage,
    ToolState,
    TurnState,
    RunState,
    RunViewState,
    RunSummary,
    QueueItem,
    ControllerQueue,
    CompareColumn,
    ExperimentScore,
    ExperimentCell,
    ExperimentItem,
    TimelineCall,
    TimelineRun,
    TimelinePayload,
    ColumnHead,
    ColumnSpec,
    SessionsPage,
    SearchHitView,
    RunStatus,
    SessionPageState,
    SimilarSession,
    SimilarSessions,
    BundleSession,
    BundleTable,
    QueuePageState,
    UnitMessage,
    UnitView,
    *VIEW_REQUESTS.values(),
    *QUEUE_REQUESTS.values(),
    *VIEW_REPLIES.values(),
    *(t for k, t in QUEUE_REPLIES.items() if k != "error"),
)
