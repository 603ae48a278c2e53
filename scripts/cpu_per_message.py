"""CPU time per message of ``queue-core work``, on a database in memory (tmpfs).

On a file system in memory an fsync costs nothing, so what is left is the
code's own cost: the process's CPU time (user + system, as the kernel counts
it for the child) divided by the messages it drained. Each round fills a
fresh SQLite file in ``/dev/shm`` with N messages of the reference ledger,
then times one ``python -m queue_core --db FILE work --quiet`` process that
drains them. The figure is the minimum over K rounds (the least disturbed
run on a shared machine); several checkouts are measured in alternating
rounds in one run, so that they share the machine's state.

Each checkout runs its own code: the child's ``PYTHONPATH`` is the
checkout's root (queue_core has no runtime dependency). A git revision is
extracted first (``git archive``) into a temporary folder.

    python scripts/cpu_per_message.py                       # this checkout
    python scripts/cpu_per_message.py --rev 3c09e6b --rev . # main and this one
    python scripts/cpu_per_message.py --checkout ../other --json

``start`` is the CPU of the same command on an empty queue (imports, opening
the file, one empty claim); ``net`` is the figure without it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # this checkout's root
MESSAGES = 10_000
ROUNDS = 4
NOW = 1_000_000  # model time: every round the same
# the child that fills a queue: the checkout's own Store and ledger
FILL = """
import sys
from queue_core import ModelClock, Store, ledger
from queue_core.envelope import MAX_LINES
path, count, now = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with Store(path, clock=ModelClock(now)) as store:
    ledger.install(store)
    for first in range(0, count, MAX_LINES):
        store.enqueue("".join(
            '{"event_id": "E%04d", "payload": {"category": "book", "amount_cents": 100}}\\n' % n
            for n in range(first, min(first + MAX_LINES, count))))
"""
CHECK = """
import sys
from queue_core import ModelClock, Store
with Store(sys.argv[1], clock=ModelClock(int(sys.argv[2])), create=False) as store:
    print(store.status().count("done"))
"""


@dataclass(frozen=True)
class Checkout:
    label: str  # what the user named: a folder or a revision
    root: Path  # where its queue_core/ is
    commit: str  # its commit, or "" when not a git checkout


def _commit_of(root: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _extract(rev: str, into: Path) -> Checkout:
    """Revision ``rev`` of this repository, written out under ``into``."""
    if rev == ".":
        dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "queue_core"],
                               capture_output=True, text=True, check=False).stdout.strip()
        commit = _commit_of(HERE) + ("+changes" if dirty else "")
        return Checkout(".", HERE, commit)
    commit = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", rev],
                            capture_output=True, text=True, check=True).stdout.strip()
    folder = into / f"rev-{commit}"
    folder.mkdir()
    archive = folder / "source.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(HERE), "archive", rev, "queue_core"], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    archive.unlink()
    return Checkout(rev, folder, commit)


def _env(checkout: Checkout) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("QUEUE_CORE_")}
    env["PYTHONPATH"] = str(checkout.root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled once, then reused: start-up is not the subject
    return env


def _child_cpu(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Run ``command``; its CPU seconds (user + system) and its wall seconds."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {process.returncode}")
    return usage.ru_utime + usage.ru_stime, wall


def _which_queue_core(checkout: Checkout, env: dict[str, str], cwd: Path) -> Path:
    found = subprocess.run([sys.executable, "-c", "import queue_core; print(queue_core.__file__)"],
                           env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    return Path(found).resolve()


def one_round(checkout: Checkout, folder: Path, messages: int) -> dict[str, float]:
    """Fill a new queue in ``folder`` and drain it with ``queue-core work``; CPU and wall times."""
    env = _env(checkout)
    path = folder / "queue.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    subprocess.run([sys.executable, "-c", FILL, str(path), str(messages), str(NOW)],
                   env=env, cwd=folder, check=True)
    work = [sys.executable, "-m", "queue_core", "--db", str(path), "--now", str(NOW), "work", "--quiet"]
    cpu, wall = _child_cpu(work, env, folder)
    done = subprocess.run([sys.executable, "-c", CHECK, str(path), str(NOW)], env=env, cwd=folder,
                          capture_output=True, text=True, check=True).stdout.strip()
    if done != str(messages):
        raise SystemExit(f"{checkout.label}: {done} messages done, expected {messages}")
    start, _ = _child_cpu(work, env, folder)  # the same command, nothing left: its start-up
    return {"cpu": cpu, "wall": wall, "start": start}


def measure(checkouts: list[Checkout], messages: int, rounds: int, folder: Path) -> list[dict[str, object]]:
    results: dict[str, list[dict[str, float]]] = {c.label: [] for c in checkouts}
    for round_number in range(rounds):
        # alternate the order, so that neither checkout always runs first
        order = checkouts if round_number % 2 == 0 else list(reversed(checkouts))
        for checkout in order:
            results[checkout.label].append(one_round(checkout, folder, messages))
    report = []
    for checkout in checkouts:
        runs = results[checkout.label]
        best = min(runs, key=lambda run: run["cpu"])
        report.append({
            "checkout": checkout.label,
            "commit": checkout.commit,
            "messages": messages,
            "rounds": rounds,
            "cpu_us_per_message": round(best["cpu"] / messages * 1e6, 1),
            "net_us_per_message": round((best["cpu"] - min(r["start"] for r in runs)) / messages * 1e6, 1),
            "start_ms": round(min(r["start"] for r in runs) * 1e3, 1),
            "wall_s": round(best["wall"], 2),
            "every_round_us": [round(r["cpu"] / messages * 1e6, 1) for r in runs],
        })
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", action="append", default=[],
                        help="a git revision of this repository to measure (repeatable; '.' is the work tree)")
    parser.add_argument("--checkout", action="append", default=[], type=Path,
                        help="another checkout's folder to measure (repeatable)")
    parser.add_argument("--messages", type=int, default=MESSAGES, help=f"messages per round (default {MESSAGES})")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per checkout (default {ROUNDS})")
    parser.add_argument("--tmp", type=Path, default=Path("/dev/shm"),
                        help="the file system in memory for the databases (default /dev/shm)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if not 1 <= args.messages <= MESSAGES or args.rounds < 1:
        # the default queue's ids are E0000..E9999
        parser.error(f"--messages must be 1..{MESSAGES} and --rounds at least 1")
    if not args.tmp.is_dir():
        parser.error(f"{args.tmp} is not a folder (a tmpfs such as /dev/shm)")
    with tempfile.TemporaryDirectory(prefix="cpu-per-message-", dir=args.tmp) as scratch:
        folder = Path(scratch)
        checkouts = [_extract(rev, folder) for rev in args.rev]
        checkouts += [Checkout(str(path), path.resolve(), _commit_of(path)) for path in args.checkout]
        if not checkouts:
            checkouts = [_extract(".", folder)]
        if len({c.label for c in checkouts}) != len(checkouts):
            parser.error("each checkout once")
        for checkout in checkouts:
            imported = _which_queue_core(checkout, _env(checkout), folder)
            if checkout.root.resolve() not in imported.parents:
                raise SystemExit(f"{checkout.label}: the child imports {imported}, not the checkout's")
        work_folder = folder / "db"
        work_folder.mkdir()
        report = measure(checkouts, args.messages, args.rounds, work_folder)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"CPU per message of `queue-core work`, {args.messages:,} messages on {args.tmp}, "
          f"min of {args.rounds} alternating rounds ({sys.platform}, Python {sys.version.split()[0]})")
    for row in report:
        print(f"  {row['checkout']:<12} {row['commit']:<16} {row['cpu_us_per_message']:>7} µs/message "
              f"(net of start-up {row['net_us_per_message']} µs; start-up {row['start_ms']} ms; "
              f"wall {row['wall_s']} s; rounds {row['every_round_us']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
