"""The store conformance suite: the store's contract, run against any engine.

An engine runs it by importing everything from this package into a test module
and providing a ``make_store`` fixture: a function ``make_store(**options)`` that
opens a fresh, empty store on a new target each call. The suite builds its
``store``, ``store_factory`` and ``reopen`` fixtures on it. An engine may also
override ``raw_sql`` to give the schema checks raw access::

    import pytest
    import sessionkit as sk
    from sessionkit.testing.conformance import *  # noqa: F401,F403

    @pytest.fixture
    def make_store(tmp_path):
        n = iter(range(1000))
        return lambda **opts: sk.open_store(tmp_path / f"t{next(n)}.db", **opts)

One module per part of the contract: ``messages`` (what a message is), ``stores``
(opening, closing, sessions, capabilities), ``writing`` (appends, chains, imports,
updates, deletes, transactions), ``reading`` (histories, the tree read model, scans),
``compaction``, ``search``, ``feed`` (change events), ``runs`` (runs, events, records),
``labels`` (labels on messages and branches) and ``bad_input`` (refused input, nothing
stored lost).
"""

from __future__ import annotations

from .bad_input import TestBadInput, TestBadInputProperties
from .compaction import TestCompaction
from .feed import TestChangeFeed
from .fixtures import open_target, raw_sql, reopen, store, store_factory
from .labels import TestLabels
from .messages import TestMessages
from .reading import TestReading, TestScan, TestTreeReadModel
from .runs import TestRunsEventsRecords
from .search import TestSearch
from .stores import TestCapabilities, TestStoresAndSessions
from .writing import TestAppendMany, TestImports, TestTransactions, TestWriting

__all__ = [
    "store_factory",
    "store",
    "reopen",
    "open_target",
    "raw_sql",
    "TestMessages",
    "TestStoresAndSessions",
    "TestWriting",
    "TestReading",
    "TestCompaction",
    "TestSearch",
    "TestChangeFeed",
    "TestAppendMany",
    "TestImports",
    "TestTransactions",
    "TestRunsEventsRecords",
    "TestTreeReadModel",
    "TestScan",
    "TestCapabilities",
    "TestBadInput",
    "TestBadInputProperties",
    "TestLabels",
]
