"""Shared fixtures: a real SQLite file per test and a model clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from queue_core import Handler, ModelClock, Store


@pytest.fixture
def clock() -> ModelClock:
    return ModelClock(1000)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "queue.sqlite3"


@pytest.fixture
def store(db: Path, clock: ModelClock) -> Store:
    return Store(db, clock=clock)


@pytest.fixture
def handler() -> Handler:
    return Handler()
