"""How much CPU ``queue-core --help`` and ``queue-core status`` cost to start, and what they import.

    python scripts/startup.py                   # this checkout: min and median over 20 runs
    python scripts/startup.py --runs 40
    python scripts/startup.py --compare main    # also a commit's queue_core, runs interleaved
    python scripts/startup.py --importtime      # then what each command still imports

Each run is a real process, ``python -m queue_core ...``, started by this
interpreter (so with the same installed packages); its CPU time (user +
system) is read with ``resource.getrusage(RUSAGE_CHILDREN)`` around it. A
first run of each command compiles the modules (``__pycache__``), and is not
counted. ``python -c pass`` is measured the same way: the interpreter's own
start, which no change to queue_core can remove. ``status`` reads a database
made for the purpose (the reference demo's batch, worked once, so that the
ledger's money is read too) with ``--now``.

``--compare REV`` extracts ``queue_core/`` at ``REV`` (``git archive``) into a
temporary folder and runs it through ``PYTHONPATH``, taking turns with this
checkout's run by run, so that both see the same machine at the same time.
A figure here is this machine's; the tests never check a time (they check
what a command imports: tests/test_cli_table.py).
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH = ROOT / "snippets" / "demo.jsonl"
COMMANDS = {"--help": ["--help"], "status": ["status"]}


def cpu_ms(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """The CPU time (user + system) of one child process running ``argv``, in ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=True, timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used * 1000


class Tree:
    """A queue_core to run: this checkout's, or one extracted at a revision."""

    def __init__(self, label: str, path: Path | None, folder: Path) -> None:
        self.label = label
        self.env = dict(os.environ)
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)  # keep the compiled modules
        if path is not None:
            self.env["PYTHONPATH"] = str(path)
        else:
            self.env.pop("PYTHONPATH", None)
        self.folder = folder
        self.db = folder / "queue.sqlite3"
        self.prepare()

    def argv(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "queue_core", "--db", str(self.db), "--now", "1000", *args] \
            if args != ["--help"] else [sys.executable, "-m", "queue_core", "--help"]

    def prepare(self) -> None:
        """A database with the demo's batch worked once; compiles the modules."""
        for args in (["enqueue", str(BATCH)], ["work"], ["status"], ["--help"]):
            subprocess.run(self.argv(args), env=self.env, cwd=self.folder, check=True,
                           capture_output=True, timeout=120)

    def importtime(self, args: list[str]) -> str:
        proc = subprocess.run([sys.executable, "-X", "importtime", *self.argv(args)[1:]],
                              env=self.env, cwd=self.folder, capture_output=True, text=True,
                              check=True, timeout=60)
        return proc.stderr


def extract(rev: str, into: Path) -> Path:
    """``queue_core/`` as it is at ``rev``, in ``into``."""
    archive = subprocess.run(["git", "archive", rev, "queue_core"], cwd=ROOT, capture_output=True,
                             check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def heaviest(report: str, count: int) -> list[str]:
    """The ``count`` imports with the most time of their own, from ``-X importtime``."""
    rows = []
    for line in report.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, total, name = line[len("import time:"):].split("|")
        rows.append((int(own), int(total), name.rstrip()))
    rows.sort(reverse=True)
    total_us = sum(own for own, _, _ in rows)
    lines = [f"    {len(rows)} modules imported, {total_us / 1000:.1f} ms of import time in all"]
    lines += [f"    {own / 1000:6.1f} ms  {name.strip()}" for own, _, name in rows[:count]]
    ours = sorted(name.strip() for _, _, name in rows if name.strip().startswith("queue_core"))
    lines.append(f"    queue_core modules: {', '.join(ours)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each command (default: 20)")
    parser.add_argument("--compare", metavar="REV", help="also measure queue_core at this git revision")
    parser.add_argument("--importtime", action="store_true",
                        help="then show what each command imports (python -X importtime)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="queue-core-startup-") as tmp:
        base = Path(tmp)
        trees = []
        if args.compare:
            folder = base / "compare"
            folder.mkdir()
            source = extract(args.compare, base / "source")
            trees.append(Tree(args.compare, source, folder))
        here = base / "here"
        here.mkdir()
        trees.append(Tree("this checkout", None, here))
        floor_env = dict(trees[-1].env)
        samples: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.runs):
            samples.setdefault(("python", "-c pass"), []).append(
                cpu_ms([sys.executable, "-c", "pass"], floor_env, here))
            for tree in trees:
                for name, command in COMMANDS.items():
                    samples.setdefault((tree.label, name), []).append(
                        cpu_ms(tree.argv(command), tree.env, tree.folder))
        print(f"CPU time per process (user + system), {args.runs} runs each, "
              f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
        print(f"{'what':<32} {'min ms':>8} {'median ms':>10}")
        for (label, name), values in samples.items():
            what = f"{label}: {name}" if label != "python" else "python -c pass (the floor)"
            print(f"{what:<32} {min(values):>8.1f} {statistics.median(values):>10.1f}")
        if args.importtime:
            for tree in trees:
                for name, command in COMMANDS.items():
                    print(f"\n{tree.label}: queue-core {name}, the heaviest imports (own time):")
                    print("\n".join(heaviest(tree.importtime(command), 12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
