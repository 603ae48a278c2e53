"""The suite as a tool: its workers keep a shared fixture's tests together (tests/conftest.py:
xdist_group), and its test servers keep the log clean.

`make test` runs on several pytest-xdist workers with ``--dist loadgroup``. If the
grouping stops working, nothing fails: each worker silently makes the module's
shared run again (a chaos run, a crash matrix, a site build). That happened once,
with pytest 9.2 (pytest-dev/pytest-xdist#1386), so this test runs a small suite on
two workers and counts how often its module fixture was made.
"""
from __future__ import annotations

import functools
import http.server
import os
import socket
import struct
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import start_order, xdist_group
from tests.site_build import QuietHandler, SubPathHandler, serving, site_server

ROOT = Path(__file__).resolve().parent.parent
PROBE = "QUEUE_CORE_GROUP_PROBE"  # where the probe's fixture writes one line per making


@pytest.fixture(scope="module")
def made_once() -> str:
    record = os.environ.get(PROBE)
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\n")
    return "made"


@pytest.mark.parametrize("n", range(6))
def test_the_probe_uses_a_module_fixture(made_once: str, n: int) -> None:
    assert made_once == "made"


@pytest.mark.parametrize("n", range(6))
def test_the_probe_has_ungrouped_tests_too(n: int) -> None:
    assert n in range(6)


def test_a_module_fixture_is_made_once_on_two_workers(tmp_path: Path) -> None:
    record = tmp_path / "made.txt"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup",
         "-v", f"{Path(__file__).relative_to(ROOT)}", "-k", "probe"],
        cwd=ROOT, env={**os.environ, PROBE: str(record)}, capture_output=True, text=True, timeout=110)
    assert result.returncode == 0, result.stdout + result.stderr
    workers = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("[gw")}
    assert workers == {"[gw0]", "[gw1]"}, result.stdout  # both workers ran tests of the probe
    made = record.read_text("utf-8").split()
    assert len(made) == 1, f"the module fixture was made on {made}: the tests of its group were split"


def test_the_group_is_the_module_of_the_shared_fixture(request: pytest.FixtureRequest) -> None:
    own = [item for item in request.session.items if item.nodeid.split("@")[0].split("::")[0].endswith(
        "test_suite_workers.py")]
    groups = {item.name: xdist_group(item) for item in own}
    assert {groups[f"test_the_probe_uses_a_module_fixture[{n}]"] for n in range(6)} == {"tests/test_suite_workers.py"}
    assert {groups[f"test_the_probe_has_ungrouped_tests_too[{n}]"] for n in range(6)} == {None}


def make_echo(shell_words: str, **environment: str) -> str:
    """What a recipe of the Makefile echoes (``shell_words`` after make expanded its variables),
    run with ``environment`` added to this process's."""
    shown = subprocess.run(
        ["make", "-s", "--eval", f"make-echo:; @echo {shell_words}", "make-echo", "WORKERS=2"],
        cwd=ROOT, env={**os.environ, **environment}, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip()


def test_the_long_tests_are_handed_out_first(request: pytest.FixtureRequest) -> None:
    """The run's tests are in start order (slow, then PostgreSQL, then the rest), and the Makefile's
    pytest-xdist options keep that order instead of putting the biggest groups first."""
    order = [start_order(item) for item in request.session.items]
    assert order == sorted(order)
    assert "--no-loadscope-reorder" in make_echo('"$(XDIST)"').split()


def test_make_lets_python_keep_its_compiled_modules() -> None:
    """A recipe of the Makefile does not see PYTHONDONTWRITEBYTECODE even where the environment sets
    it, so the thousands of Python processes of a run do not each compile the project again."""
    assert make_echo('"$${PYTHONDONTWRITEBYTECODE-unset}"', PYTHONDONTWRITEBYTECODE="1") == "unset"


# ------------------------------------------------- the test servers of the site


def _drop_requests(server: http.server.ThreadingHTTPServer, count: int = 3) -> None:
    """Ask ``server`` for a big file ``count`` times and reset each connection at once, as a
    browser that leaves a page does; return when every handler thread has ended."""
    # A ThreadingHTTPServer's handler threads are daemons, and server_close() does not wait
    # for daemons: without this a handler could print its error after the caller has read.
    server.daemon_threads = False
    with serving(server) as url:
        port = int(url.rsplit(":", 1)[1])
        for _ in range(count):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(b"GET /big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                client.recv(1)  # the answer has begun
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = reset
    # serving() ends with server_close(), which waits for the handler threads


@pytest.mark.timeout(60)
def test_the_site_server_says_nothing_of_a_dropped_request_and_reports_other_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "big.bin").write_bytes(bytes(64 * 1024 * 1024))
    _drop_requests(site_server(tmp_path))
    assert "Exception occurred" not in capsys.readouterr().err
    # Negative control: the standard server prints each dropped request as a traceback.
    plain = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(tmp_path)))
    _drop_requests(plain)
    err = capsys.readouterr().err
    assert "Exception occurred during processing of request" in err
    assert "BrokenPipeError" in err or "ConnectionResetError" in err

    class Failing(SubPathHandler):
        def do_GET(self) -> None:
            raise RuntimeError("a handler that fails")

    with serving(site_server(tmp_path, Failing)) as url:
        with pytest.raises(Exception):
            urllib.request.urlopen(url + "/big.bin", timeout=10)
    assert "RuntimeError: a handler that fails" in capsys.readouterr().err  # any other error is still printed
