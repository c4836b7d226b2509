// The payloads and messages between sessionkit's Python and this JavaScript (sessionkit/widgets/_payloads.py).
// Written by `python -m sessionkit.widgets._jstypes`: do not edit; change the TypedDicts and regenerate.

type LabelsByMessage = Record<string, LabelView[]>;

type PartView = TextPartView | ReasoningPartView | ToolPartView | FilePartView | OtherPartView;

type ViewRequest = FetchRequest | DetailRequest | AddLabelRequest | RemoveLabelRequest | HelloRequest | SteerRequest | FollowUpRequest | ClearRequest | InterruptRequest;

type QueueRequest = QueueStateRequest | QueueNextRequest | QueueSubmitRequest | QueueReleaseRequest;

type ViewReply = PreviewsReply | DetailReply | MessagesReply | LabelAddedReply | LabelRemovedReply | EventsReply | ResetReply | ErrorReply;

type QueueReply = QueueStateReply | QueueUnitReply | QueueSubmittedReply | QueueReleasedReply | ErrorReply;

/** A label as a badge shows it (docs/labels.md). */
interface LabelView {
  id: string;
  tag: string;
  rating: number | null;
  target: string;
  note: string | null;
  author: string | null;
  source: string;
  scorer: string | null;
  rationale: string | null;
}

interface CompactionBand {
  id: string;
  from: number;
  to: number;
  from_id: string;
  to_id: string;
  summary: string;
  messages: number;
  tokens_before: number;
  tokens_after: number;
  created_at: string;
  superseded: boolean;
}

/** A session's tree as parallel arrays (index = position in write order), no message text. */
interface TreePayload {
  v: number;
  session_id: string;
  n: number;
  ids: string[];
  parent: number[];
  role: number[];
  roles: string[];
  tokens: number[];
  latest: number;
  compactions: CompactionBand[];
  linear: boolean;
}

/** A compaction on a path: the summary the model sees instead of ``messages`` messages. */
interface PathCompaction {
  id: string;
  overlay_id: string;
  from_id: string;
  to_id: string;
  summary: string;
  messages: number;
  tokens_before: number;
  tokens_after: number;
  created_at: string;
}

/** One row of a transcript: a message, a compaction's summary, or (full history) a hidden message. */
interface PathEntry {
  id: string;
  role: string;
  tokens: number;
  kind: "message" | "summary" | "hidden";
  compaction?: number;
}

/** The path to ``leaf_id`` as transcript entries (no message text). */
interface PathPayload {
  leaf_id: string | null;
  entries: PathEntry[];
  compactions: PathCompaction[];
  tokens_model: number;
  tokens_full: number;
}

/** A path in both modes: what the model sees, and the full history. */
interface PathPair {
  model: PathPayload;
  full: PathPayload;
}

interface TextPartView {
  type: "text";
  text: string;
}

interface ReasoningPartView {
  type: "reasoning";
  text: string;
}

interface ToolPartView {
  type: "tool";
  name: string;
  id: string | null;
  state: string | null;
  input: string | null;
  output: string | null;
  error: string | null;
}

interface FilePartView {
  type: "file";
  mediaType: string | null;
  name: string | null;
  url: string | null;
}

interface OtherPartView {
  type: "other";
  kind: string;
  json: string;
}

/** A message as the views render it: long texts cut, tool input and output as text. */
interface MessageView {
  id: string | null;
  role: string | null;
  createdAt: string | null;
  preview: string;
  parts: PartView[];
  usage: Record<string, unknown> | null;
  run_id: string | null;
  tokens?: number;
}

interface BranchSide {
  leaf_id: string | null;
  messages: number;
  tokens: number;
  roles: Record<string, number>;
  tool_calls: number;
  usage_in: number | null;
  usage_out: number | null;
  usage_known: number;
  cost_usd: number | null;
  cost_known_usd: number | null;
  cost_known: number;
  cost_unknown: number;
  first_id: string | null;
  first_preview: string | null;
}

interface BranchDiff {
  a_id: string;
  b_id: string;
  fork_id: string | null;
  shared_messages: number;
  shared_tokens: number;
  a: BranchSide;
  b: BranchSide;
  tokens_delta: number;
}

interface UsageTotals {
  in: number;
  out: number;
  cache_read: number;
  cache_write: number;
  cost_usd: number;
  calls: number;
  unpriced: number;
}

interface TurnUsage {
  in: number | null;
  out: number | null;
  cache_read: number | null;
  cache_write: number | null;
  cost_usd: number | null;
  model: string | null;
}

interface ToolState {
  id: string | null;
  name: string | null;
  input: unknown;
  output: unknown;
  error: unknown;
  done: boolean;
}

interface TurnState {
  turn: number;
  input: unknown;
  mode: string | null;
  text: string;
  reasoning: string;
  tools: ToolState[];
  usage: TurnUsage | null;
  stop_reason: string | null;
  done: boolean;
}

interface RunState {
  run_id: string | null;
  input: unknown;
  status: string;
  error: unknown;
  started: string | null;
  ended: string | null;
  turns: TurnState[];
  usage: UsageTotals;
}

/** Everything a RunView shows, folded from the events (``_runlog``, ``run_view.js`` ``rvApply``). */
interface RunViewState {
  runs: RunState[];
  usage: UsageTotals;
  last_seq: number;
}

interface RunSummary {
  runs: number;
  turns: number;
  status: string;
  run_id: string | null;
  usage: UsageTotals;
}

interface QueueItem {
  mode: string;
  text: string;
}

/** A run controller's queue: the active run, and the messages waiting for it. */
interface ControllerQueue {
  active: string | null;
  queued: number;
  items: QueueItem[];
}

/** One variant's column of a comparison. */
interface CompareColumn {
  variant: string;
  status: string;
  model: string | null;
  text: string;
  tools: string[];
  input_tokens: number | null;
  output_tokens: number | null;
  cost_usd: number | null;
  error: string | null;
}

interface ExperimentScore {
  name: string;
  value: unknown;
  delta: number | null;
}

/** One variant's result for one item, with its scores' differences from the baseline's. */
interface ExperimentCell {
  variant: string;
  status: string;
  reply: string;
  error: string | null;
  scores: ExperimentScore[];
  output_tokens: number | null;
  cost_usd: number | null;
  latency_s: number | null;
  session_id: string | null;
  reply_id: string | null;
  href: string | null;
  baseline: boolean;
}

interface ExperimentItem {
  item: unknown;
  prompt: unknown;
  cells: ExperimentCell[];
}

/** A model or tool call on a run's timeline (times ISO 8601, seconds from the run's start). */
interface TimelineCall {
  kind: "model" | "tool";
  index: number;
  name: string | null;
  turn: number | null;
  start: string | null;
  end: string | null;
  offset_s: number | null;
  duration_s: number | null;
  error: string | null;
  message_id: string | null;
  tokens_in?: number | null;
  tokens_out?: number | null;
  cost_usd?: number | null;
  model?: string | null;
  tool_call_id?: string;
}

interface TimelineRun {
  run_id: string;
  start: string | null;
  end: string | null;
  duration_s: number | null;
  status: string | null;
  error: string | null;
  calls: TimelineCall[];
}

interface TimelinePayload {
  runs: TimelineRun[];
}

/** An extra column of the sessions table as the page shows it. */
interface ColumnHead {
  name: string;
  label: string;
}

/** An extra column of the sessions table: its query, and the query's value column. */
interface ColumnSpec {
  name: string;
  label: string;
  sql: string;
  value: string;
}

/** One page of the sessions table (``GET /api/sessions``); a row is a column name -> value. */
interface SessionsPage {
  rows: Record<string, unknown>[];
  total: number;
  offset: number;
  limit: number;
  sort: string;
  desc: boolean;
  labels: boolean;
  columns: ColumnHead[];
}

interface SearchHitView {
  session_id: string;
  id: string;
  role: string;
  snippet: string;
  score: number;
}

interface RunStatus {
  run_id: string;
  status: string;
}

/** What a session's page opens with (``GET /api/session``). */
interface SessionPageState {
  session_id: string;
  tree: TreePayload;
  latest: string | null;
  runs: RunStatus[];
  labels: Record<string, LabelView[]>;
}

interface SimilarSession {
  session_id: string;
  score: number;
  messages: number;
}

interface SimilarSessions {
  model: string | null;
  sessions: SimilarSession[];
  note: string | null;
}

/** A session of a bundle (``data/s<N>.js``): its page's state and everything the page asks for. */
interface BundleSession {
  session_id: string;
  tree: TreePayload;
  latest: string | null;
  runs: RunStatus[];
  labels: Record<string, LabelView[]>;
  paths: PathPair | null;
  messages: Record<string, MessageView>;
  events: Record<string, unknown>[];
  timeline: TimelinePayload;
  similar: SimilarSessions;
}

/** A bundle's sessions table (``data/sessions.js``): every row, each session's data file, the overview. */
interface BundleTable {
  rows: Record<string, unknown>[];
  files: Record<string, string>;
  labels: boolean;
  columns: ColumnHead[];
  overview: Record<string, unknown>;
}

/** A queue's definition, progress and agreement (``QueueInfo.to_dict``, ``QueueProgress.to_dict``). */
interface QueuePageState {
  queue: Record<string, unknown>;
  progress: Record<string, unknown>;
  agreement: Record<string, unknown>[];
  annotator: string | null;
}

interface UnitMessage {
  id: string | null;
  role: string | null;
  text: string;
}

/** A claimed unit (``QueueUnit``'s fields) with its messages as text. */
interface UnitView {
  queue: string;
  n: number;
  session_id: string;
  message_id: string;
  level: string;
  target: string;
  annotator: string;
  expires_at: string;
  hidden: number;
  messages: UnitMessage[];
}

/** The text of messages: previews (BranchTree) or message views (Transcript). */
interface FetchRequest {
  type: "fetch";
  ids: string[];
  req: number;
}

/** One message in full (BranchTree's detail pane). */
interface DetailRequest {
  type: "detail";
  id: string;
  req: number;
}

interface AddLabelRequest {
  type: "add-label";
  id: string;
  tag: string;
  rating: number | null;
  target: "message" | "branch";
  req: number;
}

interface RemoveLabelRequest {
  type: "remove-label";
  label: string;
  req: number;
}

/** A RunView front end asks for every batch sent so far. */
interface HelloRequest {
  type: "hello";
  req: number;
}

interface SteerRequest {
  type: "steer";
  text: string;
}

interface FollowUpRequest {
  type: "follow_up";
  text: string;
}

/** Remove the queued message at ``index``. */
interface ClearRequest {
  type: "clear";
  index: number;
}

interface InterruptRequest {
  type: "interrupt";
}

interface QueueStateRequest {
  type: "state";
  req: number;
  annotator: string | null;
}

interface QueueNextRequest {
  type: "next";
  req: number;
  annotator: string | null;
}

interface QueueSubmitRequest {
  type: "submit";
  req: number;
  annotator: string | null;
  n: number;
  tag: string;
  rating: number | null;
  note: string;
}

/** Give a claimed unit back (``POST /api/queue`` only: queue_view.js never sends it). */
interface QueueReleaseRequest {
  type: "release";
  req?: number;
  annotator?: string | null;
  n: number;
}

interface PreviewsReply {
  type: "previews";
  req: unknown;
  items: Record<string, string>;
}

interface DetailReply {
  type: "detail";
  req: unknown;
  id: unknown;
  message: MessageView | null;
}

interface MessagesReply {
  type: "messages";
  req: unknown;
  items: Record<string, MessageView>;
}

interface LabelAddedReply {
  type: "label-added";
  req: unknown;
  label: string;
}

interface LabelRemovedReply {
  type: "label-removed";
  req: unknown;
  removed: boolean;
}

/** A batch of run events (consecutive text deltas merged), each numbered by ``_i``. */
interface EventsReply {
  type: "events";
  events: Record<string, unknown>[];
}

interface ResetReply {
  type: "reset";
  req: unknown;
  events: Record<string, unknown>[];
}

/** A request that failed: ``error`` says why. */
interface ErrorReply {
  type: "error";
  req: unknown;
  error: string;
}

interface QueueStateReply {
  queue: Record<string, unknown>;
  progress: Record<string, unknown>;
  agreement: Record<string, unknown>[];
  annotator: string | null;
  type: "state";
  req: unknown;
}

interface QueueUnitReply {
  type: "unit";
  req: unknown;
  unit: UnitView | null;
}

interface QueueSubmittedReply {
  type: "submitted";
  req: unknown;
  label: Record<string, unknown>;
}

interface QueueReleasedReply {
  type: "released";
  req: unknown;
  released: boolean;
}
