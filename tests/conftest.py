"""Shared fixtures: a real SQLite file per test and a model clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queue_core import Handler, ModelClock, Store, ledger

# The throwaway PostgreSQL server: postgres_cluster (per session), postgres_dsn (a fresh database per test).
from .postgres_server import postgres_cluster, postgres_dsn  # noqa: F401


@pytest.fixture
def clock() -> ModelClock:
    return ModelClock(1000)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite3"


@pytest.fixture
def store(db: Path, clock: ModelClock) -> Iterator[Store]:
    """A queue with the reference application (the ledger's ``effects`` table) installed, as the CLI does.

    ``Store(...)`` alone creates only the queue's schema; tests of that use
    ``Store(db, clock=clock)`` directly. The store keeps its connections
    until it is closed, which this fixture does after the test (a test that
    inspects the files themselves closes it first: ``close()`` may be called twice).
    """
    with Store(db, clock=clock) as queue:
        ledger.install(queue)
        yield queue


@pytest.fixture
def handler() -> Handler:
    return Handler()
