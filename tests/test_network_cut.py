"""A network cut between a worker and PostgreSQL (issue #24): real processes, a real link.

The worker runs in its own network namespace and reaches the server over a
veth pair (``proof.netcut``); the link is taken down after the claim, between
the effect and COMMIT, and during COMMIT. No effect is doubled, the cut
worker sees ``connection_lost`` within the bound its libpq settings give
(never hangs), the message is finished once (by the other worker, or by the
cut worker's COMMIT that reached the server), and the cut worker is fenced
when the link returns. Controls: without keepalives a lost reply, and
without tcp_user_timeout an unacknowledged request, leave the worker waiting
well past that bound.

Needs root and ``ip netns``: otherwise skipped with the reason, except with
QUEUE_CORE_REQUIRE_POSTGRES=1 (CI, as root), where that fails instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proof import netcut
from proof.records import save_record
from queue_core.engines.postgres import CONNECT_DEFAULTS

from .postgres_server import PORT, SERVER_USER, Cluster, _skip_or_fail, find_bindir, unavailable

pytestmark = pytest.mark.postgres

EVIDENCE = Path(__file__).resolve().parent.parent / "test-artifacts" / "evidence"
# Scheduling on a loaded machine, beyond the kernel's own timers.
SLACK = 3.0
# A control waits this long: four times the bound.
HANG_CHECK = 4 * netcut.SHORT_BOUND


@pytest.fixture(scope="module")
def network() -> Iterator[tuple[netcut.Link, Cluster]]:
    """The worker's namespace and link, and a server listening on the link's root end."""
    reason = unavailable() or netcut.unavailable()
    if reason is not None:
        _skip_or_fail(reason)
    bindir = find_bindir()
    assert bindir is not None
    with netcut.Link.made() as link:
        cluster = Cluster(bindir)
        try:
            cluster.settings = netcut.server_settings(cluster.root, link)
            cluster.start()
            yield link, cluster
        finally:
            cluster.stop()


@pytest.fixture
def database(network: tuple[netcut.Link, Cluster]) -> Iterator[tuple[str, str]]:
    """A fresh database: its name, and its URL on the Unix socket (not through the link)."""
    _, cluster = network
    name = cluster.create_database()
    try:
        yield name, f"postgresql://{SERVER_USER}@/{name}?host={cluster.root}&port={PORT}"
    finally:
        cluster.drop_database(name)


def cut(network: tuple[netcut.Link, Cluster], database: tuple[str, str], when: str,
        record: str, hang_check: float | None = None, **params: str) -> netcut.Cut:
    link, _ = network
    name, admin_url = database
    netcut.prepare(admin_url, when)
    settings = {**netcut.SHORT, **params}
    began = time.monotonic()
    result = netcut.run_cut(link, netcut.tcp_url(link, name, settings), admin_url, when,
                            params=settings, hang_check=hang_check)
    save_record(f"network-cut-{record}", {"when": when, **settings}, result,
                by="tests/test_network_cut.py", seconds=time.monotonic() - began,
                folder=EVIDENCE)
    return result


def bounded(result: netcut.Cut) -> None:
    assert result.error_code == "connection_lost", result.to_dict()
    assert result.error_after_cut is not None
    assert result.error_after_cut <= netcut.SHORT_BOUND + SLACK, result.to_dict()


def finished_once(result: netcut.Cut) -> None:
    assert result.effects == 1, result.to_dict()  # no double effect, none lost
    assert result.violations == [], result.violations
    assert result.retry_code == "lease_lost", result.to_dict()  # fenced after the link returns
    events = [event for event, _ in result.timeline]
    assert events.index("link restored") < events.index("retry: lease_lost")


def test_cut_after_the_claim(network: tuple[netcut.Link, Cluster],
                             database: tuple[str, str]) -> None:
    result = cut(network, database, "claim", "claim")
    bounded(result)
    finished_once(result)
    assert result.completed_by == "other worker" and result.commit_fate == "not committed"
    events = [event for event, _ in result.timeline]
    assert events.index("lease expiry") < events.index("other worker's claim")


def test_cut_between_the_effect_and_commit(network: tuple[netcut.Link, Cluster],
                                           database: tuple[str, str]) -> None:
    result = cut(network, database, "effect", "effect")
    bounded(result)
    finished_once(result)
    # the COMMIT never reached the server: the effect went with the transaction
    assert result.completed_by == "other worker" and result.commit_fate == "not committed"
    events = [event for event, _ in result.timeline]
    # the row stays locked until the server ends the cut session
    assert events.index("server ends the cut session") < events.index("other worker's claim")
    assert events.index("lease expiry") < events.index("other worker's claim")


def test_cut_during_commit(network: tuple[netcut.Link, Cluster],
                           database: tuple[str, str]) -> None:
    result = cut(network, database, "commit", "commit")
    bounded(result)
    finished_once(result)
    # the server had the COMMIT: it took effect, and the worker could not know
    assert result.completed_by == "cut worker" and result.commit_fate == "committed"


def test_keepalives_bound_a_lost_reply(network: tuple[netcut.Link, Cluster],
                                       database: tuple[str, str]) -> None:
    # The COMMIT was acknowledged, its answer is lost: nothing unacknowledged,
    # so only keepalives can tell (tcp_user_timeout switched off).
    result = cut(network, database, "commit", "keepalives", hang_check=HANG_CHECK,
                 tcp_user_timeout="0")
    bounded(result)


def test_without_keepalives_a_lost_reply_hangs(network: tuple[netcut.Link, Cluster],
                                               database: tuple[str, str]) -> None:
    # The negative control of the test above.
    result = cut(network, database, "commit", "no-keepalives", hang_check=HANG_CHECK,
                 tcp_user_timeout="0", keepalives="0")
    assert result.error_after_cut is None, result.to_dict()


def test_tcp_user_timeout_bounds_an_unacknowledged_request(
        network: tuple[netcut.Link, Cluster], database: tuple[str, str]) -> None:
    # The completion's first request goes into the cut link; keepalives would
    # wait an hour (not off: see the next test).
    result = cut(network, database, "claim", "user-timeout", hang_check=HANG_CHECK,
                 keepalives_idle="3600")
    bounded(result)


def test_keepalives_off_switch_tcp_user_timeout_off_too(
        network: tuple[netcut.Link, Cluster], database: tuple[str, str]) -> None:
    # libpq sets tcp_user_timeout only on a socket with keepalives: a URL with
    # keepalives=0 loses both bounds (the docs say so).
    result = cut(network, database, "claim", "keepalives-off", hang_check=HANG_CHECK,
                 keepalives="0")
    assert result.error_after_cut is None, result.to_dict()


def test_keepalives_alone_do_not_bound_an_unacknowledged_request(
        network: tuple[netcut.Link, Cluster], database: tuple[str, str]) -> None:
    # The negative control: while data is unacknowledged the kernel sends no
    # keepalive probe, and retransmits for many minutes.
    result = cut(network, database, "claim", "no-user-timeout", hang_check=HANG_CHECK,
                 tcp_user_timeout="0")
    assert result.error_after_cut is None, result.to_dict()


def test_the_engine_sets_bounds_that_a_url_overrides(postgres_url: str) -> None:
    from queue_core.engines.postgres import PostgresConnection

    def options(url: str) -> dict[str, str]:
        conn = PostgresConnection(url, busy_timeout_ms=100)
        try:
            return {o.keyword.decode(): (o.val or b"").decode()
                    for o in conn.raw.pgconn.info if o.keyword.decode() in CONNECT_DEFAULTS}
        finally:
            conn.close()

    assert options(postgres_url) == CONNECT_DEFAULTS
    given = options(postgres_url + "&keepalives_idle=7&tcp_user_timeout=0")
    assert given == {**CONNECT_DEFAULTS, "keepalives_idle": "7", "tcp_user_timeout": "0"}


def test_the_server_side_of_the_session_gets_the_clients_bounds() -> None:
    # Without them the server keeps a cut worker's transaction, and its row
    # lock, until the kernel's keepalives give up (two hours by default): the
    # cut tests above fail when the store does not send these (checked).
    from queue_core.engines.postgres import CONNECT_DEFAULTS, server_bounds

    assert server_bounds(CONNECT_DEFAULTS) == (
        "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; "
        "SET tcp_keepalives_count = 3; SET tcp_user_timeout = 60000")
    shorter = server_bounds({**CONNECT_DEFAULTS, "keepalives_idle": "7"})  # the URL's own wins
    assert shorter is not None and shorter.startswith("SET tcp_keepalives_idle = 7;")
    assert server_bounds({**CONNECT_DEFAULTS, "keepalives": "0"}) is None  # as libpq: no bounds at all
    with pytest.raises(ValueError):
        server_bounds({**CONNECT_DEFAULTS, "keepalives_idle": "1; DROP TABLE messages"})
