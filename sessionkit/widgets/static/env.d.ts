// What the JavaScript of this folder runs in, for tsc (make lint): the model a view gets, each
// view's synced state, and the globals the viewer's pages share. Written by hand; the payloads
// they name are generated from the Python TypedDicts into types.d.ts.

/** What every view's state has: the key of the snapshot output it hides once it renders. */
interface SkViewState {
  _snapshot_key?: string;
}

/**
 * A view's model: anywidget's in a notebook, skLocalModel's stand-in where no kernel runs
 * (a page written by to_html, the store viewer). `send` takes the messages the kernel routes.
 */
interface SkModel<S = SkViewState> {
  get<K extends keyof S & string>(key: K): S[K];
  set<K extends keyof S & string>(key: K, value: S[K]): void;
  save_changes(): void;
  on(name: string, fn: (...args: any[]) => void): void;
  off(name: string, fn?: (...args: any[]) => void): void;
  send(msg: ViewRequest | QueueRequest): void;
}

/** What a view module's render gets. */
interface SkRenderArgs<S> {
  model: SkModel<S>;
  el: HTMLElement;
}

/** A message view keyed by message id, for the pages without a kernel. */
type SkMessages = Record<string, MessageView>;

/** BranchTree (sessionkit/widgets/_views.py). */
interface SkTreeState extends SkViewState {
  _tree: TreePayload;
  selected_id: string | null;
  compare_id: string | null;
  diff: BranchDiff | Record<string, never>;
  collapse: boolean;
  height: number;
  _labels: LabelsByMessage;
  _offline?: { messages: SkMessages };
}

/** Transcript. */
interface SkTranscriptState extends SkViewState {
  leaf_id: string | null;
  mode: "model" | "full";
  following: boolean;
  height: number;
  _path: PathPayload;
  _labels: LabelsByMessage;
  _offline?: { paths: PathPair; messages: SkMessages };
}

/** RunView. */
interface SkRunState extends SkViewState {
  summary: RunSummary | Record<string, never>;
  queue: ControllerQueue | { items: QueueItem[]; active?: string | null };
  controls: boolean;
  height: number;
  _timeline?: TimelinePayload;
  /** The message a clicked timeline bar produced (the front end's own: the viewer follows it). */
  selected_id?: string | null;
  _offline?: { events: Record<string, unknown>[] };
}

/** A call of the timeline as the RunView marks it: its run, and which model call of the run it is. */
type SkTimelineCall = TimelineCall & { run_id?: string; model_index?: number };

/** CompareView. */
interface SkCompareState extends SkViewState {
  columns: CompareColumn[];
  height: number;
}

/** ExperimentView. */
interface SkExperimentState extends SkViewState {
  name: string;
  baseline: string | null;
  items: ExperimentItem[];
  selected: { session_id: string; message_id: string } | Record<string, never>;
  height: number;
}

/** QueueView, and the viewer's #/q/NAME. */
interface SkQueueState extends SkViewState {
  queue: string;
  annotator: string | null;
}

/** The store viewer's data, from its server (/api) or from a bundle's files (viewer.js). */
/** What the sessions table asks for (the query string of GET /api/sessions). */
interface SkSessionsQuery {
  offset: number;
  limit: number;
  sort: string;
  desc: string | boolean;
  filter: string;
}

/** A page of the sessions table as the page reads it (a bundle answers these fields only). */
type SkSessionsAnswer = Pick<SessionsPage, "rows" | "total" | "columns"> & { labels?: boolean };

interface SkViewerApi {
  sessions(query: SkSessionsQuery): Promise<SkSessionsAnswer>;
  search(text: string, limit: number): Promise<SearchHitView[]>;
  session(id: string): Promise<SessionPageState>;
  path(id: string, leaf: string): Promise<PathPair>;
  messages(id: string, ids: string[]): Promise<SkMessages>;
  events(id: string): Promise<Record<string, unknown>[]>;
  timeline(id: string): Promise<TimelinePayload>;
  similar(id: string): Promise<SimilarSessions>;
  overview(): Promise<Record<string, any>>;
  remove?(id: string): Promise<unknown>;
  queues?(): Promise<{ queues: Record<string, any>[] }>;
  follow?(onChange: () => void): Promise<void>;
  queue?(name: string, msg: QueueRequest): Promise<QueueReply>;
}

// The globals the viewer's scripts share (each a property of window too).
/** Each view's ES module as a string (modules.js; sessionkit/widgets/viewer.py modules_script). */
declare var SK_MODULES: Record<string, string> | undefined;
/** A bundle's sessions table (data/sessions.js). */
declare var SK_BUNDLE: BundleTable | undefined;
/** Called by each data/s<N>.js of a bundle with its session's data. */
declare var skBundleSession: (id: string, payload: BundleSession) => void;
/** Called by each file of a bundle's search index (search.js reads them). */
declare var skBundleSearchData: (name: string, payload: unknown) => void;
/** The overview page (overview.js), drawn from its figures. */
declare var skOverview: (data: Record<string, any>) => HTMLElement;
