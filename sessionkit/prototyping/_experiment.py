"""``experiment``: every item of a dataset re-asked under each variant, the replies scored
(docs/prototyping.md).

Each (item, variant) is a run of the machinery of :func:`~sessionkit.prototyping.compare`:
the item's last user message asked again, under the message it hangs from in the item's
session (a sibling branch beside the original), with ``labels`` naming the experiment, the
dataset, the item and the variant with its settings. Nothing else is stored: the
experiment *is* its runs, their replies and the scorers' labels on those replies, which
the ``experiments`` view of ``store.sql`` joins (so every store, export and copy keeps it).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias

from ..agent import ROOT, Agent
from ..errors import DatasetNotFound, ScorerFailed, UsageError
from ..io import Progress
from ..parts import text_of
from ..store import DatasetInfo, DatasetItem, Session, Store, Unit, scorer_id
from ._compare import _variant

if TYPE_CHECKING:
    from ..aio import AsyncStore

__all__ = ["EXPERIMENT_COLUMNS", "Experiment", "experiment"]

#: A scorer (``store.score``'s): a callable taking an :class:`~sessionkit.store.Unit`.
Scorer: TypeAlias = Callable[[Unit], object]

#: The columns of :meth:`Experiment.to_pandas`, one row per item and variant.
EXPERIMENT_COLUMNS = [
    "item",
    "variant",
    "prompt",
    "reply",
    "scores",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "latency_s",
    "status",
    "error",
    "resumed",
    "model",
    "session_id",
    "user_id",
    "reply_id",
    "run_id",
]


@dataclass(frozen=True)
class Experiment:
    """What :func:`experiment` returns: a row per item and variant (items in order, each
    item's variants in the order given).

    ``baseline`` is the variant the others are compared with (the first one, unless given);
    ``scorers`` the names of the scorers, the keys of each row's ``scores``.
    """

    name: str
    dataset: str
    version: int
    variants: list[str]
    baseline: str
    scorers: list[str]
    rows: list[dict] = field(repr=False)

    def to_pandas(self):
        """The rows as a DataFrame (needs pandas: the ``analysis`` extra)."""
        from ..analysis import rows_df

        return rows_df(self.rows, EXPERIMENT_COLUMNS)

    def row(self, item: int, variant: str) -> dict:
        """The row of one item and variant (``KeyError`` naming them if there is none)."""
        for row in self.rows:
            if row["item"] == item and row["variant"] == variant:
                return row
        raise KeyError(f"no item {item} under variant {variant!r} in experiment {self.name!r}")

    def summary(self):
        """Per variant: completed rows, the mean of each scorer's numeric scores, summed
        tokens and cost, mean latency (a DataFrame, the baseline first)."""
        import pandas as pd

        out = []
        for variant in self.variants:
            rows = [r for r in self.rows if r["variant"] == variant]
            entry: dict[str, str | int | float | None] = {
                "variant": variant,
                "completed": sum(r["status"] == "completed" for r in rows),
            }
            for name in self.scorers:
                values = [r["scores"].get(name) for r in rows]
                numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
                entry[name] = sum(numbers) / len(numbers) if numbers else None
            for key in ("input_tokens", "output_tokens", "cost_usd"):
                known = [r[key] for r in rows if r[key] is not None]
                entry[key] = sum(known) if known else None
            times = [r["latency_s"] for r in rows if r["latency_s"] is not None]
            entry["latency_s"] = sum(times) / len(times) if times else None
            out.append(entry)
        return pd.DataFrame(out)


def _store(store: object) -> Store:
    reader = getattr(store, "sync", store)  # an sk.aio store reads through its store
    if not isinstance(reader, Store):
        raise UsageError(f"experiment needs store=, a sessionkit store, got {type(store).__name__}")
    return reader


def _dataset(store: Store, dataset: object, version: int | None) -> tuple[str, int, list[DatasetItem]]:
    if isinstance(dataset, DatasetInfo):
        name, version = dataset.name, dataset.version if version is None else version
    elif isinstance(dataset, str):
        name = dataset
    else:
        raise TypeError(f"dataset is a dataset's name or an sk.DatasetInfo, got {type(dataset).__name__}")
    try:
        items = store.dataset_items(name, version)
    except DatasetNotFound as exc:
        known = sorted({d.name for d in store.datasets()})
        raise DatasetNotFound(
            f"{exc} (stored: {', '.join(map(repr, known)) or 'none'}; make one with store.dataset(...))"
        ) from None
    return name, items[0].version if items else int(version or 0), items


def _scorers(scorers: object) -> list[tuple[Scorer, str, str]]:
    """``(fn, name, "name@version")`` of each scorer, checked before anything runs."""
    if scorers is None:
        return []
    if callable(scorers):
        scorers = [scorers]
    if isinstance(scorers, (str, bytes)) or not isinstance(scorers, Iterable):
        raise TypeError(f"scorers is a list of scorers (callables taking an sk.scorers.Unit), got {scorers!r}")
    out: list[tuple[Scorer, str, str]] = []
    for fn in scorers:
        ident, _ = scorer_id(fn)
        out.append((fn, ident.rpartition("@")[0], ident))
    names = [name for _, name, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"two scorers share a name: {names}; give each its own with @sk.scorers.scorer(name=...)")
    return out


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name or ":" in name or not name.isprintable() or len(name) > 100:
        raise ValueError(f"an experiment's name is a non-empty str of at most 100 characters without ':', got {name!r}")
    return name


def _asked(item: DatasetItem) -> tuple[dict, str | None] | None:
    """The item's last user message and the message it hangs from (None for a first message:
    it is asked at ROOT)."""
    for index in range(len(item.history) - 1, -1, -1):
        if item.history[index].get("role") == "user":
            return item.history[index], (item.history[index - 1]["id"] if index else None)
    return None


def _seconds(started: str | None, ended: str | None) -> float | None:
    if not started or not ended:
        return None
    try:
        return (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds()
    except ValueError:
        return None


async def experiment(
    dataset: str | DatasetInfo,
    variants: Mapping[str, Agent | Mapping[str, object]],
    scorers: Scorer | Iterable[Scorer] | None = (),
    *,
    name: str,
    store: Store | AsyncStore,
    version: int | None = None,
    base: Agent | None = None,
    baseline: str | None = None,
    concurrency: int = 4,
    progress: bool | Callable[[int, int | None], object] | None = None,
    on_row: Callable[[dict], object] | None = None,
    context: dict | None = None,
    timeout: float | None = None,
) -> Experiment:
    """Re-ask every item of ``dataset`` under each variant, score the replies, and return the table.

    ``dataset`` is a dataset's name (its latest version, or ``version``) or an
    :class:`~sessionkit.DatasetInfo` of ``store`` (a store, or an ``sk.aio`` store); ``variants`` are as for
    :func:`~sessionkit.prototyping.compare` (an :class:`~sessionkit.Agent` or a dict of
    overrides of ``base``), ``scorers`` as for ``store.score`` (run at the turn level over
    each reply: their labels, with provenance, are the scores). Each item's last user
    message is asked again under the message it hangs from in the item's session: each
    variant a sibling branch beside the original reply, its user message's id
    ``<name>:<item>:<variant>`` and its run labelled ``{"experiment": name, "dataset",
    "version", "item", "variant", "settings"}``.

    Resumable: calling it again with the same ``name`` asks only the item/variant pairs
    with no stored reply (the others are rows with ``resumed``) and scores what is not
    scored yet. A run that fails is a row with its ``error``; the others go on. A scorer
    that raises stops the experiment with :class:`~sessionkit.ScorerFailed` (the replies
    stored so far stay). ``on_row(row)`` hears each row as it changes (running, replied,
    scored): ``sk.widgets.ExperimentView().on_row`` shows it live. ``progress`` is as for
    :func:`~sessionkit.prototyping.replay` (a bar of item/variant pairs).
    """
    name = _check_name(name)
    if not isinstance(variants, Mapping) or not variants:
        raise UsageError("an experiment needs variants: a non-empty dict of name -> Agent or dict of overrides")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a positive int, got {concurrency!r}")
    if base is not None and not isinstance(base, Agent):
        raise TypeError(f"base must be an Agent, got {type(base).__name__}")
    if on_row is not None and not callable(on_row):
        raise TypeError(f"on_row must be a callable fn(row), got {type(on_row).__name__}")
    built = {vname: _variant(vname, spec, base) for vname, spec in variants.items()}
    if baseline is None:
        baseline = next(iter(built))
    elif baseline not in built:
        raise UsageError(f"baseline {baseline!r} is not one of the variants {list(built)}")
    checked = _scorers(scorers)
    sk_store = _store(store)
    ds_name, ds_version, items = await asyncio.to_thread(_dataset, sk_store, dataset, version)
    result = Experiment(
        name=name,
        dataset=ds_name,
        version=ds_version,
        variants=list(built),
        baseline=baseline,
        scorers=[n for _, n, _ in checked],
        rows=[],
    )

    def tell(row: dict) -> None:
        if on_row is not None:
            on_row(copy.deepcopy(row))

    pending: dict[int, int] = {}  # item -> its variants not finished yet
    for item in items:
        asked = _asked(item)
        pending[item.n] = len(built)
        for vname, (_agent, settings) in built.items():
            row: dict[str, object] = dict.fromkeys(EXPERIMENT_COLUMNS)
            row.update(
                item=item.n,
                variant=vname,
                prompt=text_of(asked[0], "") if asked else None,
                scores={},
                status="waiting",
                resumed=False,
                model=settings["model"],
                session_id=item.session_id,
                user_id=f"{name}:{item.n}:{vname}",
            )
            result.rows.append(row)
            tell(row)
    by_key = {(r["item"], r["variant"]): r for r in result.rows}
    gate = asyncio.Semaphore(concurrency)
    score_lock = asyncio.Lock()

    async def ask(item: DatasetItem, vname: str, agent: Agent, settings: dict) -> None:
        row = by_key[(item.n, vname)]
        asked = _asked(item)
        session = sk_store.session(item.session_id)
        if asked is None:
            row.update(status="failed", error=f"item {item.n} has no user message to ask again")
            return
        stored = await asyncio.to_thread(_stored, sk_store, session, row["user_id"], name, ds_name, ds_version)
        if stored is not None:
            row.update(stored, status="completed", resumed=True)
            tell(row)
            return
        user, parent = asked
        if parent is not None and await asyncio.to_thread(session.get, parent) is None:
            row.update(
                status="failed",
                error=f"session {item.session_id!r} no longer holds message {parent!r}, which item {item.n} hangs from",
            )
            tell(row)
            return
        labels = {
            "experiment": name,
            "dataset": ds_name,
            "version": ds_version,
            "item": item.n,
            "variant": vname,
            "settings": settings,
        }
        prompt = {"id": row["user_id"], "role": "user", "parts": copy.deepcopy(user.get("parts") or [])}
        at = ROOT if parent is None else parent
        async with gate:
            row["status"] = "running"
            tell(row)
            started = time.perf_counter()
            try:
                run = await agent.run(prompt, session=session, at=at, context=context, timeout=timeout, labels=labels)
            except Exception as exc:  # a failing run is a row with its error, not a failed experiment
                row.update(status="failed", error=f"{type(exc).__name__}: {exc}", run_id=getattr(exc, "run_id", None))
                tell(row)
                return
            latency = time.perf_counter() - started
        usage = run.usage or {}
        reply = next((m for m in reversed(run.messages) if m.get("role") == "assistant"), None)
        row.update(
            reply=run.text,
            status=run.status,
            input_tokens=usage.get("in"),
            output_tokens=usage.get("out"),
            cost_usd=usage.get("cost_usd"),
            latency_s=latency,
            run_id=run.run_id,
            reply_id=reply["id"] if reply else None,
        )
        tell(row)

    async def score(item: DatasetItem) -> None:
        rows = [r for r in result.rows if r["item"] == item.n and r["reply_id"]]
        if not checked or not rows:
            return
        async with score_lock:
            await asyncio.to_thread(_score, sk_store, checked, item.session_id, rows)
        for row in rows:
            tell(row)

    with Progress(progress, total=len(result.rows), desc=f"experiment {name}", unit="runs", auto_min=20) as shown:

        async def one(item: DatasetItem, vname: str) -> None:
            agent, settings = built[vname]
            await ask(item, vname, agent, settings)
            shown.update(1)
            pending[item.n] -= 1
            if pending[item.n] == 0:
                await score(item)

        tasks = [asyncio.ensure_future(one(item, vname)) for item in items for vname in built]
        try:
            await asyncio.gather(*tasks)
        except BaseException:  # a scorer failed (or the caller was cancelled): the other runs stop
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    return result


def _stored(store: Store, session: Session, user_id: str, name: str, dataset: str, version: int) -> dict | None:
    """What a stored (item, variant) said: its reply, usage and run (None when it was not asked yet).

    A stored user message of this experiment that another dataset or version asked is refused."""
    user = session.get(user_id)
    if user is None:
        return None
    labels = (user.get("metadata") or {}).get("labels") or {}
    if labels.get("experiment") == name and (labels.get("dataset"), labels.get("version")) != (dataset, version):
        raise UsageError(
            f"experiment {name!r} was run over dataset {labels.get('dataset')!r} version {labels.get('version')},"
            f" not {dataset!r} version {version}: give it another name, or the same dataset and version"
        )
    run_id = (user.get("metadata") or {}).get("run_id")
    chain, last = [], user_id
    while True:
        below = [m for m in session.branches(last) if (m.get("metadata") or {}).get("run_id") == run_id]
        if not below:
            break
        chain.append(below[0])
        last = below[0]["id"]
    replies = [m for m in chain if m.get("role") == "assistant"]
    if not replies:
        return None
    record = next((r for r in store.runs(session.session_id) if r.run_id == run_id), None)
    if record is not None and run_id and record.status == "running":
        # Its reply is stored and its end is not: the process that ran it stopped in between.
        # Recorded completed now, as a restarted server records such a run (no usage: the
        # process that knew it is gone).
        store.run_log.end(run_id, status="completed", ended_at=replies[-1].get("createdAt"))
        record = next((r for r in store.runs(session.session_id) if r.run_id == run_id), None)
    usage = (record.usage if record is not None else None) or {}
    return {
        "reply": text_of(replies[-1], ""),
        "reply_id": replies[-1]["id"],
        "run_id": run_id,
        "input_tokens": usage.get("in"),
        "output_tokens": usage.get("out"),
        "cost_usd": usage.get("cost_usd"),
        "latency_s": _seconds(record.started_at, record.ended_at) if record is not None else None,
    }


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _score(store: Store, scorers: list[tuple[Scorer, str, str]], session_id: str, rows: list[dict]) -> None:
    """Score the turns of ``rows`` (one session's) with each scorer, then read their scores back."""
    where = f"user_id IN ({', '.join(_literal(r['user_id']) for r in rows)}) AND reply_id IS NOT NULL"
    for fn, _name, ident in scorers:
        try:
            store.score(fn, sessions=[session_id], where=where, level="turn", progress=False)
        except Exception as exc:
            raise ScorerFailed(
                f"scorer {ident} failed: {type(exc).__name__}: {exc} (the replies stored so far stay;"
                " run the experiment again to score the rest)"
            ) from exc
    wanted = {ident: sname for _, sname, ident in scorers}
    by_reply = {r["reply_id"]: r for r in rows}
    for label in store.labels(session_id=session_id, message_id=list(by_reply)):
        sname = wanted.get(label.scorer or "")
        if sname is not None:
            by_reply[label.message_id]["scores"][sname] = label.rating if label.rating is not None else label.tag
