"""The throwaway PostgreSQL server of the tests: one cluster per session, one fresh database per test.

The server itself (``initdb`` and ``pg_ctl`` in a temporary directory, a Unix
socket only, ``fsync = on``, run as the ``postgres`` user when root) is
``proof/postgres_cluster.py``, which ``scripts/chaos.py --postgres`` uses too.
Here are its fixtures: ``postgres_cluster`` (per test session, stopped and
removed at the end, also when tests failed) and ``postgres_dsn`` (a libpq
conninfo string for psycopg naming a fresh database per test, so that no test
sees another's rows).

Without server binaries or without psycopg the tests that use these fixtures
are skipped with the reason, except when ``QUEUE_CORE_REQUIRE_POSTGRES=1``
(``.ci/run`` sets it): then they fail with it.

``python -m tests.postgres_server`` starts a cluster, times it and removes it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from proof.postgres_cluster import (
    ENV_BIN,
    NO_BINARIES,
    NO_PSYCOPG,
    PORT,
    SERVER_USER,
    Cluster,
    ServerError,
    candidate_bindirs,
    find_bindir,
    unavailable,
)

__all__ = [
    "ENV_BIN",
    "ENV_REQUIRE",
    "NO_BINARIES",
    "NO_PSYCOPG",
    "PORT",
    "SERVER_USER",
    "Cluster",
    "ServerError",
    "candidate_bindirs",
    "find_bindir",
    "postgres_cluster",
    "postgres_dsn",
    "unavailable",
]

ENV_REQUIRE = "QUEUE_CORE_REQUIRE_POSTGRES"


def _skip_or_fail(reason: str) -> None:
    if os.environ.get(ENV_REQUIRE) == "1":
        pytest.fail(f"{reason} ({ENV_REQUIRE}=1: the PostgreSQL tests must run here)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """The session's one throwaway cluster (started on first use)."""
    reason = unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    bindir = find_bindir()
    assert bindir is not None
    cluster = Cluster(bindir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_dsn(postgres_cluster: Cluster) -> Iterator[str]:
    """A conninfo string for psycopg naming a fresh, empty database of the session's cluster."""
    name = postgres_cluster.create_database()
    try:
        yield postgres_cluster.conninfo(name)
    finally:
        postgres_cluster.drop_database(name)


def main() -> None:
    """Start a cluster, create and drop a database, stop it: print what each step took."""
    reason = unavailable()
    if reason is not None:
        raise SystemExit(reason)
    bindir = find_bindir()
    assert bindir is not None
    cluster = Cluster(bindir)
    try:
        cluster.start()
        began = time.monotonic()
        name = cluster.create_database()
        cluster.timings["create database"] = time.monotonic() - began
        began = time.monotonic()
        cluster.drop_database(name)
        cluster.timings["drop database"] = time.monotonic() - began
        print(f"binaries: {bindir}; run as: {cluster.user.pw_name if cluster.user else 'this user'}")
    finally:
        cluster.stop()
    print(", ".join(f"{step} {seconds:.3f} s" for step, seconds in cluster.timings.items()))
    print(f"removed: {not cluster.root.exists()}")


if __name__ == "__main__":
    main()
