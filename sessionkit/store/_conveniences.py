"""The conveniences of stores and sessions (DataFrames: docs/analysis.md; notebook display:
docs/widgets.md), served by upper layers.

``store.messages_df()``, ``store.sql()``, ``session.to_pandas()`` come from
:mod:`sessionkit.analysis`; a store or session shown in a notebook is drawn by
:mod:`sessionkit.widgets`. The store sits below both, so it reaches them only
here, lazily (on first use: importing the store loads neither pandas, DuckDB nor
ipywidgets). Embeddings reach litellm (``sessionkit.agent.models``) and the progress
display of imports (``sessionkit.io.Progress``) the same way. This is the one module
of ``sessionkit.store`` allowed to import from a layer above it (the layering test
checks it).
"""

from __future__ import annotations

from typing import Any


def messages_df(store: Any, session_ids: Any = None) -> Any:
    from ..analysis import messages_df as build

    return build(store, session_ids)


def sql(store: Any, query: str, params: Any = None, *, files: bool = False, timeout: float | None = None) -> Any:
    from ..analysis import sql as run

    return run(store, query, params, files=files, timeout=timeout)


def runs_df(store: Any) -> Any:
    from ..analysis import runs_df as build

    return build(store)


def events_df(store: Any, session_ids: Any = None) -> Any:
    from ..analysis import events_df as build

    return build(store, session_ids)


def to_pandas(session: Any) -> Any:
    from ..analysis import to_pandas as build

    return build(session)


def store_bundle(store: Any) -> Any:
    from ..widgets import display

    return display.store_bundle(store)


def store_html(store: Any) -> str:
    from ..widgets import display

    return display.store_html(store)


def session_bundle(session: Any) -> Any:
    from ..widgets import display

    return display.session_bundle(session)


def session_html(session: Any) -> str:
    from ..widgets import display

    return display.session_html(session)


def display_store(store: Any) -> None:
    from ..widgets import display

    display.display_store(store)


def display_session(session: Any) -> None:
    from ..widgets import display

    display.display_session(session)


def litellm_embed(model: str, texts: list[str], options: Any = None) -> Any:
    from ..agent.models import embed_texts

    return embed_texts(model, texts, **(options or {}))


def progress(progress: Any, *, total: int | None, desc: str, unit: str) -> Any:
    from ..io import Progress

    return Progress(progress, total=total, desc=desc, unit=unit)
