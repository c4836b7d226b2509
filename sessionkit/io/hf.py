"""A dataset of the store as a Hugging Face ``datasets.Dataset`` (docs/judging.md).

>>> ds = sk.io.to_hf_dataset(store, "refusals")         # the latest version
>>> ds[0]["history"][-1]["role"], ds[0]["reference"], ds[0]["tags"]
>>> ds.push_to_hub("me/refusals")                        # or ds.to_parquet, ds.save_to_disk

The columns are those of the ``dataset_items`` file of a Parquet export
(:func:`~sessionkit.io.export_parquet`), with the messages structured instead of JSON
text: ``name``, ``version``, ``n`` (the item's place), ``session_id``, ``message_id``,
``history`` (a list of UIMessage objects, root first), ``reference`` (the reply, an
object, or None) and ``tags`` (a list of str). ``history`` and ``reference`` are of
the ``datasets.Json`` feature type: any message fits, whatever its parts, and each
comes back as a dict.

The ``datasets`` package is needed only here (``pip install datasets``); ``import
sessionkit`` does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import messages as _msg
from ..errors import MissingDependency

if TYPE_CHECKING:
    from ..store import Store

__all__ = ["to_hf_dataset", "HF_COLUMNS"]

#: The columns of the Dataset, as in the ``dataset_items`` file of a Parquet export.
HF_COLUMNS = ("name", "version", "n", "session_id", "message_id", "history", "reference", "tags")


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as exc:
        err = MissingDependency(
            "the datasets package is not installed; install it with: pip install datasets"
            " (a dataset of the store becomes a Hugging Face datasets.Dataset with it)"
        )
        raise err from exc
    if not hasattr(datasets, "Json"):  # the Json feature type came with datasets 4.7
        raise MissingDependency(
            f"datasets {getattr(datasets, '__version__', '?')} has no Json feature type, which the messages"
            " are stored as; install a newer one with: pip install -U datasets"
        )
    return datasets


def to_hf_dataset(store: Store, name: str, version: int | None = None) -> Any:
    """One version of a dataset of ``store`` (the latest when ``version`` is None) as a
    ``datasets.Dataset``, a row per item in the order frozen (docs/judging.md).

    Columns: ``name``, ``version``, ``n``, ``session_id``, ``message_id``, ``history``
    (the messages before the item's message, UIMessage dicts), ``reference`` (the
    assistant reply, or None) and ``tags``. The Dataset's ``info.description`` names the
    dataset, its version and level. An unknown name or version raises
    :class:`~sessionkit.DatasetNotFound`; without the ``datasets`` package,
    :class:`~sessionkit.MissingDependency` saying ``pip install datasets``.
    """
    hf = _datasets()
    items = store.dataset_items(name, version)
    features = hf.Features(
        {
            "name": hf.Value("string"),
            "version": hf.Value("int64"),
            "n": hf.Value("int64"),
            "session_id": hf.Value("string"),
            "message_id": hf.Value("string"),
            "history": hf.List(hf.Json()),
            "reference": hf.Json(),
            "tags": hf.List(hf.Value("string")),
        }
    )
    # Messages go in as the store's own JSON text (Json keeps a str that parses as is),
    # so their numbers are written exactly as stored.
    columns: dict[str, list[Any]] = {
        "name": [it.name for it in items],
        "version": [it.version for it in items],
        "n": [it.n for it in items],
        "session_id": [it.session_id for it in items],
        "message_id": [it.message_id for it in items],
        "history": [[_msg.dumps(m) for m in it.history] for it in items],
        "reference": [None if it.reference is None else _msg.dumps(it.reference) for it in items],
        "tags": [list(it.tags) for it in items],
    }
    described = next(d for d in store.datasets() if d.name == items[0].name and d.version == items[0].version)
    description = f"sessionkit dataset {described.name!r} version {described.version}: {len(items)} {described.level}s"
    if described.query:
        description += f", chosen by: {described.query.strip()}"
    info = hf.DatasetInfo(description=description, features=features)
    return hf.Dataset.from_dict(columns, features=features, info=info)
