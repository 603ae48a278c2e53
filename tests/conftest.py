"""Shared fixtures: a real SQLite file (or, in tests/conformance/, also a real PostgreSQL database) per test, and a model clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
def engine(request: pytest.FixtureRequest) -> str:
    """The store's engine: "sqlite", or "postgresql" in tests/conformance/ (its conftest.py parametrizes it)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def store(request: pytest.FixtureRequest, engine: str, tmp_path: Path, clock: ModelClock) -> Iterator[Store]:
    """A queue with the reference application (the ledger's ``effects`` table) installed, as the CLI does.

    ``Store(...)`` alone creates only the queue's schema; tests of that use
    ``Store(db, clock=clock)`` directly. The store keeps its connections
    until it is closed, which this fixture does after the test (a test that
    inspects the files themselves closes it first: ``close()`` may be called twice).
    With ``engine == "postgresql"`` it is a fresh database of the session's
    throwaway PostgreSQL server instead of a file.
    """
    target: str | Path = request.getfixturevalue("db") if "db" in request.fixturenames else tmp_path / "queue.sqlite3"
    if engine == "postgresql":
        target = request.getfixturevalue("postgres_url")
    with Store(target, clock=clock) as queue:
        ledger.install(queue)
        yield queue


@pytest.fixture
def postgres_url(postgres_cluster: Any) -> Iterator[str]:
    """A postgresql:// URL of a fresh database (the server listens on its Unix socket only)."""
    from .postgres_server import PORT, SERVER_USER

    name = postgres_cluster.create_database()
    try:
        yield f"postgresql://{SERVER_USER}@/{name}?host={postgres_cluster.root}&port={PORT}"
    finally:
        postgres_cluster.drop_database(name)


@pytest.fixture
def handler() -> Handler:
    return Handler()


# `make check` runs -m "not slow and not postgres": the fast tests on SQLite, for
# contributors between two edits. `make test` (and so CI) runs everything.
SLOW_MODULES = {"test_site", "test_run_here", "test_fuzz", "test_storage_faults", "test_bench", "test_crash_matrix",
                "test_chaos", "test_model", "test_packaging", "test_power_cuts"}
# Pages whose blocks run a proof (the random kills, the crash matrix) when no
# fresh record of it is at hand, as in a new clone.
SLOW_PAGES = {"how-we-know.md"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs the throwaway PostgreSQL server (set by conftest.py)")
    config.addinivalue_line("markers", "slow: a browser, a build, a crash or chaos run, packaging or a benchmark "
                                       "(set by conftest.py for SLOW_MODULES)")


# Shared fixtures that are cheap to make once per pytest-xdist worker: a
# throwaway PostgreSQL server (a temporary folder and Unix socket of its own), a
# browser, a server over a built folder. The local build is shared by all
# workers of a run (tests/site_build.py). Any other session or module fixture of
# ours is expensive, and its tests stay together on one worker.
PER_WORKER = {"postgres_cluster", "browser", "built_site", "served_site", "served_under_prefix"}


def xdist_group(item: pytest.Item) -> str | None:
    """The worker group of a test that shares an expensive fixture, else None.

    `make test` runs the tests on several workers (pytest-xdist, --dist
    loadgroup). A session or module fixture is made once per worker that runs
    one of its tests: the published build (session) would be built twice, a
    module's shared run (a chaos run, a crash matrix) repeated. So the tests of
    such a session fixture share one group, and those of a module fixture one
    group per module.
    """
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    scopes = {name: defs[-1].scope for name, defs in info.name2fixturedefs.items()
              if defs and defs[-1].func.__module__.startswith("tests.") and name not in PER_WORKER}
    if "session" in scopes.values():
        return "session"
    if "module" in scopes.values():
        return item.nodeid.split("::")[0]
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "postgres_cluster" in getattr(item, "fixturenames", ()) or "postgresql" in params.values():
            item.add_marker(pytest.mark.postgres)
        file = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        if file.removesuffix(".py") in SLOW_MODULES or file in SLOW_PAGES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=start_order)


def start_order(item: pytest.Item) -> tuple[bool, bool]:
    """The slow tests first, then the other PostgreSQL tests, then the rest (a stable sort: each
    file keeps its order).

    With ``--no-loadscope-reorder`` (the Makefile's XDIST) pytest-xdist hands out the tests in this
    order, a group or a test at a time to whichever worker is free; so the browser checks, builds
    and proof runs start early and the many short tests fill the end. In collection order a page
    check of a minute could start last and run alone while the other workers had finished.
    """
    return item.get_closest_marker("slow") is None, item.get_closest_marker("postgres") is None
