"""A network cut between a worker and PostgreSQL: real processes, a real link.

The worker runs in its own network namespace, joined to the root namespace
by a veth pair; the server listens on the root end's address. The harness
pauses the worker at a fault point of the store (``queue_core.testing.faults``:
a ``FaultPlan`` whose action waits for a word on stdin), takes the link down
(``ip link set ... down``: packets are dropped silently, as on a cut cable),
lets the worker go on, and records what happened, with times:

* ``claim``: cut after the claim's COMMIT; the completion's first request
  is never acknowledged;
* ``effect``: cut between the effect and COMMIT; the COMMIT never reaches
  the server, whose session (holding the row lock) ends when the server's own
  keepalives give up;
* ``commit``: cut while the server is inside COMMIT (a deferred trigger
  on ``effects`` makes it sleep there, so the request is acknowledged and
  the reply is lost); the COMMIT takes effect, the worker cannot know.

Then another worker (``queue-core work`` in the root namespace) finishes the
message if it is still to do, the link is restored, and the cut worker tries
to complete its lease again: fencing must refuse it (``lease_lost``).

Needs root, ``ip`` (iproute2) and network namespaces (``unavailable()``).
``python -m proof.netcut worker ...`` is the paused worker (run by ``run_cut``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from queue_core import ledger
from queue_core.app.ledger import Handler
from queue_core.errors import QueueError, StorageError
from queue_core.store import Store
from queue_core.testing.faults import FaultPlan

from .invariants import check_invariants

REPO: Final = Path(__file__).resolve().parent.parent
WHENS: Final = ("claim", "effect", "commit")
# where the worker waits while the link is cut, per scenario
PAUSE_AT: Final = {"claim": "claim.after_commit", "effect": "complete.before_commit",
                   "commit": ""}
EVENT_ID: Final = "E0001"
PAYLOAD: Final = {"category": "book", "amount_cents": 1200}
# Short libpq bounds for the tests: about 3 s for either case of a dead link.
SHORT: Final = {"connect_timeout": "3", "keepalives": "1", "keepalives_idle": "1",
                "keepalives_interval": "1", "keepalives_count": "2",
                "tcp_user_timeout": "2000"}
SHORT_BOUND: Final = 3.0  # seconds after the cut, by SHORT
COMMIT_SLEEP: Final = 3.0  # seconds the server spends inside COMMIT (scenario commit)
SLOW_COMMIT: Final = f"""
CREATE FUNCTION netcut_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep({COMMIT_SLEEP}); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER netcut_slow_commit AFTER INSERT ON effects
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION netcut_slow_commit();
"""
WAIT: Final = 30.0  # seconds for any one step before the run is declared stuck


def unavailable() -> str | None:
    """Why no network namespace can be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed"
    name = f"qcprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _free_block() -> tuple[str, int]:
    """A /30 of 10.231.0.0/16 that no interface here uses (picked by our pid).

    Its first three octets and its last octet's base.
    """
    used = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    start = os.getpid() % 16384
    for step in range(16384):
        index = (start + step) % 16384
        head, base = f"10.231.{index // 64}", index % 64 * 4
        if not any(f"inet {head}.{base + k}/" in used for k in range(4)):
            return head, base
    raise RuntimeError("no free /30 in 10.231.0.0/16")


@dataclass
class Link:
    """A network namespace for the worker and the veth pair to the root namespace."""

    namespace: str
    host_side: str  # in the root namespace: the server's address
    worker_side: str  # in the worker's namespace
    block: str  # the /30 of both ends
    server_address: str
    worker_address: str

    @classmethod
    @contextmanager
    def made(cls) -> Iterator[Link]:
        """Make the namespace and the link; remove both at the end, also on failure."""
        pid = os.getpid()
        head, base = _free_block()
        link = cls(f"qcnetcut{pid}", f"qcnh{pid}", f"qcnw{pid}", f"{head}.{base}/30",
                   f"{head}.{base + 1}", f"{head}.{base + 2}")
        try:
            _ip("netns", "add", link.namespace)
            _ip("link", "add", link.host_side, "type", "veth", "peer", "name", link.worker_side)
            _ip("link", "set", link.worker_side, "netns", link.namespace)
            _ip("addr", "add", f"{link.server_address}/30", "dev", link.host_side)
            _ip("link", "set", link.host_side, "up")
            _ip("-n", link.namespace, "addr", "add", f"{link.worker_address}/30",
                "dev", link.worker_side)
            _ip("-n", link.namespace, "link", "set", link.worker_side, "up")
            _ip("-n", link.namespace, "link", "set", "lo", "up")
            yield link
        finally:
            link.close()

    def cut(self) -> None:
        _ip("-n", self.namespace, "link", "set", self.worker_side, "down")

    def restore(self) -> None:
        _ip("-n", self.namespace, "link", "set", self.worker_side, "up")

    def close(self) -> None:
        # deleting one end of a veth pair deletes both
        subprocess.run(["ip", "link", "del", self.host_side], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.namespace], capture_output=True)

    def inside(self, command: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *command]


def server_settings(folder: Path, link: Link) -> tuple[str, ...]:
    """postgresql.conf lines for a server on the link's root end (an hba file in ``folder``)."""
    hba = folder / "netcut_hba.conf"
    # trust: the address is reachable only from the test's own namespace
    hba.write_text("local all all trust\n"
                   f"host all all {link.block} trust\n")
    hba.chmod(0o644)
    # No keepalive settings of the server's own: the store gives each session
    # its client's bounds (engines.postgres.server_bounds), so a cut worker's
    # session and its row locks end seconds after its last packet, not hours.
    return (f"listen_addresses = '{link.server_address}'", f"hba_file = '{hba}'")


def tcp_url(link: Link, dbname: str, params: Mapping[str, str], port: int = 5432) -> str:
    """The worker's URL: over TCP to the server's end of the link, with ``params``."""
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"postgresql://postgres@{link.server_address}:{port}/{dbname}?{query}"


# ----------------------------------------------------------- the paused worker

def _emit(event: str, **detail: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), "wall": time.time(),
                      **detail}), flush=True)


def _wait_for(word: str) -> None:
    if sys.stdin.readline().strip() != word:
        os._exit(4)  # the harness is gone


def worker_main(argv: Sequence[str]) -> int:
    """Claim, complete (pausing at ``--pause``), report the error; then ``retry``."""
    parser = argparse.ArgumentParser(prog="python -m proof.netcut worker")
    parser.add_argument("--db", required=True)
    parser.add_argument("--lease-seconds", type=int, required=True)
    parser.add_argument("--pause", default="")
    args = parser.parse_args(argv)

    def pause() -> None:
        _emit("paused", point=args.pause)
        _wait_for("go")

    def before_commit() -> None:
        if args.pause == "complete.before_commit":
            pause()
        _emit("commit_sent")

    plan = FaultPlan().arm("complete.after_effect", lambda: _emit("effect"))
    plan.arm("complete.before_commit", before_commit)
    if args.pause == "claim.after_commit":
        plan.arm("claim.after_commit", pause)
    with Store(args.db, create=False, probe=plan) as store:
        lease = store.claim(args.lease_seconds)
        if lease is None:
            _emit("nothing")
            return 1
        _emit("claimed", lease_until=lease.lease_until, generation=lease.generation)
        try:
            store.complete(lease, Handler())
            _emit("completed")
        except StorageError as exc:
            _emit("error", code=exc.code, message=str(exc))
        _wait_for("retry")
        plan.disarm_all()
        try:
            store.complete(lease, Handler())
            _emit("completed")
        except QueueError as exc:
            _emit("refused", code=exc.code)
    return 0


class Worker:
    """The paused worker as the harness sees it: its events, read as they come."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True)
        self.events: list[dict[str, Any]] = []
        self._lines: queue.Queue[str] = queue.Queue()
        # a thread reads, so that waiting for an event can have a deadline
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put("")  # the end

    def expect(self, *names: str, within: float = WAIT) -> dict[str, Any] | None:
        """The first event among ``names`` not taken yet; None after ``within`` s."""
        deadline = time.monotonic() + within
        while True:
            for event in self.events:
                if event["event"] in names and not event.get("taken"):
                    event["taken"] = True
                    return event
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if not line:
                self.process.wait(timeout=WAIT)
                raise RuntimeError(f"the worker ended ({self.process.returncode}): "
                                   f"{self.stderr()}")
            self.events.append(json.loads(line))

    def send(self, word: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read()[-2000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()  # SIGKILL: a worker stuck on a dead socket ignores nothing else
        self.process.wait(timeout=WAIT)
        if self.process.stdin is not None:
            self.process.stdin.close()  # stdout ends by itself: the reader closes it


# ------------------------------------------------------------------ the run

@dataclass
class Cut:
    """What one cut did: a timeline (seconds from the claim) and the verdicts."""

    when: str
    params: dict[str, str]
    timeline: list[tuple[str, float]] = field(default_factory=list)
    error_code: str | None = None
    error_after_cut: float | None = None  # None: still waiting at the end
    commit_fate: str = ""  # committed / not committed (by the cut worker)
    completed_by: str = ""
    retry_code: str | None = None
    effects: int = 0
    violations: list[str] = field(default_factory=list)
    _origin: float = 0.0

    def at(self, event: str, moment: float) -> None:
        if not self.timeline:
            self._origin = moment
        self.timeline.append((event, round(moment - self._origin, 2)))

    def to_dict(self) -> dict[str, Any]:
        return {"when": self.when, "params": self.params,
                "timeline": [{"event": e, "at": t} for e, t in self.timeline],
                "error_code": self.error_code,
                "error_after_cut": None if self.error_after_cut is None
                else round(self.error_after_cut, 2),
                "commit_fate": self.commit_fate, "completed_by": self.completed_by,
                "retry_code": self.retry_code, "effects": self.effects,
                "violations": self.violations}


def prepare(admin_url: str, when: str) -> None:
    """The queue, the ledger and one message; for ``commit`` the slow COMMIT."""
    import psycopg

    with Store(admin_url) as store:
        ledger.install(store)
        store.enqueue(json.dumps({"event_id": EVENT_ID, "payload": PAYLOAD}) + "\n")
    if when == "commit":
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(SLOW_COMMIT.encode())


def _row(admin_url: str, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row: tuple[Any, ...] | None = conn.execute(sql.encode(), params).fetchone()
        return row


def _message(admin_url: str) -> tuple[str, int]:
    row = _row(admin_url, "SELECT state, attempts FROM messages WHERE event_id = %s",
               (EVENT_ID,))
    assert row is not None
    return str(row[0]), int(row[1])


def _session(admin_url: str, link: Link) -> tuple[str, str] | None:
    """The cut worker's server session (state, wait event), or None when it ended."""
    row = _row(admin_url, "SELECT state, coalesce(wait_event, '') FROM pg_stat_activity "
               "WHERE client_addr = %s::inet", (link.worker_address,))
    return None if row is None else (str(row[0]), str(row[1]))


def _until(what: str, test: Any, within: float = WAIT) -> float:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if test():
            return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"not within {within} s: {what}")


def run_cut(link: Link, worker_url: str, admin_url: str, when: str, *,
            params: Mapping[str, str], lease_seconds: int = 4,
            hang_check: float | None = None) -> Cut:
    """Cut the link at ``when`` (one of WHENS) and follow it to its end.

    ``admin_url`` reaches the same, prepared database without the link (the
    Unix socket). With ``hang_check``, only see whether the worker's error
    comes within that many seconds of the cut (a control: the run ends there).
    """
    cut = Cut(when, dict(params))
    command = [sys.executable, "-m", "proof.netcut", "worker", "--db", worker_url,
               "--lease-seconds", str(lease_seconds), "--pause", PAUSE_AT[when]]
    worker = Worker(link.inside(command))
    other: subprocess.Popen[bytes] | None = None
    try:
        claimed = None
        if when == "commit":
            claimed = worker.expect("claimed")
            assert claimed is not None, "the worker did not claim"
            cut.at("claim", claimed["t"])
            cut.at("effect", _need(worker.expect("effect"))["t"])
            cut.at("COMMIT sent", _need(worker.expect("commit_sent"))["t"])
            # the server has the COMMIT (it sleeps inside it): its ACK went out
            _until("COMMIT on the server", lambda: _session(admin_url, link)
                   == ("active", "PgSleep"))
            time.sleep(0.3)
        else:
            paused = _need(worker.expect("paused"))
            if when == "claim":
                cut.at("claim", paused["t"])
            else:
                claimed = _need(worker.expect("claimed"))
                cut.at("claim", claimed["t"])
                cut.at("effect", _need(worker.expect("effect"))["t"])
        link.cut()
        cut_at = time.monotonic()
        cut.at("link cut", cut_at)
        if when != "commit":
            worker.send("go")
        if when == "claim":
            claimed = _need(worker.expect("claimed"))
        if when == "effect":
            cut.at("COMMIT sent", _need(worker.expect("commit_sent"))["t"])
        assert claimed is not None
        error = worker.expect("error", "completed",
                              within=hang_check if hang_check is not None else WAIT)
        if error is None:
            return cut  # still waiting: a control's answer
        cut.at(f"error seen ({error.get('code', 'none')})", error["t"])
        cut.error_code = error.get("code")
        cut.error_after_cut = error["t"] - cut_at
        if hang_check is not None:
            return cut
        expiry = claimed["t"] + (claimed["lease_until"] - claimed["wall"])
        other = subprocess.Popen([sys.executable, "-m", "queue_core", "work", "--db",
                                  admin_url, "--forever", "--poll", "0.2"], cwd=REPO,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _follow_server(cut, admin_url, link, expiry)
        other.send_signal(signal.SIGTERM)
        other.wait(timeout=WAIT)
        link.restore()
        cut.at("link restored", time.monotonic())
        worker.send("retry")
        retried = _need(worker.expect("refused", "completed"))
        cut.retry_code = retried.get("code", "completed")
        cut.at(f"retry: {cut.retry_code}", retried["t"])
        cut.effects = int(_need(_row(admin_url, "SELECT count(*) FROM effects "
                                                "WHERE event_id = %s", (EVENT_ID,)))[0])
        cut.violations = check_invariants(admin_url)
        return cut
    finally:
        if other is not None and other.poll() is None:
            other.kill()
            other.wait()
        worker.stop()
        link.restore()  # the next run uses the same link


def _follow_server(cut: Cut, admin_url: str, link: Link, expiry: float) -> None:
    """Server side after the error: session ended, lease expiry, the other worker."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        # Each moment is read after the query that saw the change: a moment
        # read before it could precede the change (a slow query on a loaded
        # machine), and put the other worker's claim before the lease's end.
        if "session" not in seen and _session(admin_url, link) is None:
            seen["session"] = time.monotonic()
        state, attempts = _message(admin_url)
        now = time.monotonic()
        if attempts >= 2 and "claim" not in seen:
            seen["claim"] = now
        if state == "done":
            seen["done"] = now
            break
        time.sleep(0.02)
    else:
        raise RuntimeError(f"the message was not done within {WAIT} s")
    _until("the cut session ends", lambda: _session(admin_url, link) is None)
    seen.setdefault("session", time.monotonic())
    events = [("server ends the cut session", seen["session"])]
    if "claim" in seen:
        events += [("lease expiry", expiry), ("other worker's claim", seen["claim"]),
                   ("other worker's completion", seen["done"])]
        cut.commit_fate, cut.completed_by = "not committed", "other worker"
    else:
        cut.commit_fate, cut.completed_by = "committed", "cut worker"
    for event, moment in sorted(events, key=lambda item: item[1]):
        cut.at(event, moment)


# --------------------------------------------------------------- the page

_ARROWS: Final = {
    "claim": "W->>P: claim {id} (generation 1), COMMIT",
    "effect": "W->>P: BEGIN, INSERT the effect, UPDATE to done",
    "link cut": "Note over W,P: +{at} s the link is cut",
    "server ends the cut session": "Note over P: +{at} s the server ends the cut session",
    "lease expiry": "Note over P: +{at} s the lease of generation 1 expires",
    "other worker's claim": "O->>P: +{at} s claim {id} (generation 2)",
    "other worker's completion": "O->>P: +{at} s effect, done, COMMIT",
    "link restored": "Note over W,P: +{at} s the link is back",
}


def sequence_diagram(cut: Mapping[str, Any]) -> str:
    """A mermaid sequenceDiagram of one recorded cut (``Cut.to_dict()``)."""
    lines = ["sequenceDiagram", "    participant W as cut worker",
             "    participant P as PostgreSQL", "    participant O as other worker"]
    committed = cut["commit_fate"] == "committed"
    for item in cut["timeline"]:
        event, at = item["event"], f"{item['at']:.2f}"
        if event == "COMMIT sent":
            arrow = "W->>P" if cut["when"] == "commit" else "W-xP"
            lines.append(f"    {arrow}: +{at} s COMMIT")
        elif event.startswith("error seen"):
            if cut["when"] == "claim":
                lines.append("    W-xP: complete: BEGIN, SELECT (never acknowledged)")
            if committed:
                lines.append("    P--xW: COMMIT done, its answer is lost")
            lines.append(f"    Note over W: +{at} s StorageError {cut['error_code']}")
        elif event.startswith("retry"):
            lines.append("    W->>P: complete again, same lease (generation 1)")
            code = event.removeprefix("retry: ")
            said = "LeaseLost, nothing written" if code == "lease_lost" else code
            lines.append(f"    P-->>W: +{at} s {said}")
        else:
            lines.append("    " + _ARROWS[event].format(at=at, id=EVENT_ID))
            if event == "server ends the cut session" and cut["when"] == "effect":
                lines.append("    P->>P: rolls back the effect, unlocks the row")
    return "\n".join(lines) + "\n"


def _need(value: Any) -> Any:
    if value is None:
        raise RuntimeError("the worker did not report in time")
    return value


if __name__ == "__main__":
    if sys.argv[1:2] != ["worker"]:
        raise SystemExit("usage: python -m proof.netcut worker --db URL ...")
    sys.exit(worker_main(sys.argv[2:]))
