"""The adversary's negative controls: each hole it found, planted back, must be found again.

Issue #44 asks that the adversary fail on each of its three holes when the
fix is reverted. Each ``Planted`` here reverts one fix by a small text
replacement in a copy of queue_core (the pattern of ``scripts/plant_bugs.py``,
which checks that every replacement still applies): receipts keyed without
their scope (hole 1), a ``ROLLBACK TO`` that lifts the doom (hole 2), a COMMIT
that ignores the doom (hole 3), and the extra holes it found (transaction
control through ``tx.execute``, a lost lease in the caller's
``complete_many_tx``, the store's own savepoint names, a savepoint one handler of
a batch leaves open for the next). ``run_planted`` copies
``queue_core`` and ``proof`` into a folder, plants the bug there, and runs the
adversary's quick budget with the bug's attack families in a process of its
own, which imports the copy (it says so, or fails). Nothing here changes this
repository's own queue_core.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = ["PLANTED", "Planted", "check", "plant", "run_planted"]

ROOT: Final = Path(__file__).resolve().parent.parent
_SQL = ("queue_core/engines/sqlite_queries.sql", "queue_core/engines/postgres_queries.sql")


@dataclass(frozen=True)
class Planted:
    """One fix reverted: ``edits`` (path, old, new), each old text found in its file; the
    attack families that must find it, and the clauses it may be reported under."""

    name: str
    edits: tuple[tuple[str, str, str], ...]  # (path relative to the repository, old, new)
    breaks: str  # the hole, in words
    families: str  # comma-separated, as ``scripts/adversary.py --families`` takes them
    clauses: frozenset[str]


_CALLER = "queue_core/engines/caller_statements.py"
PLANTED: Final = (
    Planted(
        "receipt_scope_dropped",
        tuple((path, f"WHERE scope = {param} AND tenant", f"WHERE {param} <> '' AND tenant")
              for path, param in zip(_SQL, (":scope", "%(scope)s"))),
        "hole 1 of #44: a receipt is looked up by tenant and operation alone, so scopes "
        "share their receipts",
        "scopes", frozenset({"exactly one effect", "receipts"}),
    ),
    Planted(
        "rollback_to_lifts_doom",
        (("queue_core/transactions.py", "            self.doom(exc)\n            raise\n        return rows\n",
          "            self.doom(exc)\n            raise\n"
          "        if sql.split(None, 1)[0].upper() == \"ROLLBACK\":\n"
          "            self._doomed = None  # planted: any ROLLBACK TO forgets the failure\n"
          "        return rows\n"),),
        "hole 2 of #44: a ROLLBACK TO (of a savepoint opened after the failure, or before "
        "it) forgets a failed statement",
        "savepoints,recovery", frozenset({"failed statement"}),
    ),
    Planted(
        "commit_ignores_doom",
        (("queue_core/transactions.py", "                yield tx\n                tx.raise_if_doomed()\n",
          "                yield tx\n"),),
        "hole 3 of #44: store.transaction() commits after a refused fence the caller "
        "caught (a swallowed LeaseLost)",
        "swallow", frozenset({"effect and ACK together", "at most once", "exactly one effect"}),
    ),
    Planted(
        "transaction_control_allowed",
        ((_CALLER, "    if first not in _ENDS_OR_BEGINS:\n        return\n",
          "    if True:  # planted: COMMIT, ROLLBACK, BEGIN run\n        return\n"),),
        "control: COMMIT, ROLLBACK or BEGIN run through tx.execute",
        "control", frozenset({"effect and ACK together", "exactly one effect"}),
    ),
    Planted(
        "batch_tx_lost_lease_kept",
        (("queue_core/completion.py", "        if lost:\n            tx.doom(", "        if lost and False:\n            tx.doom("),),
        "batch_tx: complete_many_tx reports a lost lease as an outcome and the caller's "
        "transaction still commits its own writes",
        "batch_tx", frozenset({"effect and ACK together"}),
    ),
    Planted(
        "store_savepoints_named_allowed",
        ((_CALLER, "    if first in _SAVEPOINT_WORDS and RESERVED_SAVEPOINT_PREFIX in sql.lower():",
          "    if first in _SAVEPOINT_WORDS and RESERVED_SAVEPOINT_PREFIX in sql.lower() and False:"),),
        "names: a handler's ROLLBACK TO queue_core_batch (the store's own savepoint) runs",
        "names", frozenset({"exactly one effect", "effect and ACK together"}),
    ),
    Planted(
        "batch_handlers_share_savepoints",
        (("queue_core/completion.py", "                    tx.savepoint(_HANDLER)",
          "                    pass  # planted: no savepoint of its own"),
         ("queue_core/completion.py", "                    tx.release(_HANDLER)",
          "                    pass  # planted"),),
        "leftover: a savepoint one handler of a claimed batch leaves open is rolled back to by "
        "a later handler, undoing the earlier message's effect",
        "leftover", frozenset({"exactly one effect"}),
    ),
)


def plant(tree: Path, planted: Planted) -> None:
    """Make ``planted``'s edits in the copy ``tree``; each old text must be found (else ValueError)."""
    for path, old, new in planted.edits:
        target = tree / path
        text = target.read_text(encoding="utf-8")
        if old not in text:
            raise ValueError(f"{planted.name}: {path} no longer holds {old!r}")
        target.write_text(text.replace(old, new), encoding="utf-8")


def check(root: Path = ROOT) -> list[str]:
    """The planted bugs that no longer apply to ``root``'s code, or no longer compile."""
    wrong = []
    for planted in PLANTED:
        for path, old, new in planted.edits:
            text = (root / path).read_text(encoding="utf-8")
            if old not in text:
                wrong.append(f"{planted.name}: {path} no longer holds {old!r}")
            elif path.endswith(".py"):
                try:
                    compile(text.replace(old, new), path, "exec")
                except SyntaxError as exc:
                    wrong.append(f"{planted.name}: {exc}")
    return wrong


# The process that runs the adversary on the copy: it must import the copy's queue_core.
_RUNNER: Final = """
import json, sys
tree, engine, where, families, examples, shrink, seeded = sys.argv[1:8]
sys.path[:0] = [tree]
import queue_core
if not queue_core.__file__.startswith(tree):
    raise SystemExit(f"imported {queue_core.__file__}, not the planted copy in {tree}")
from proof.adversary import QUICK, Budget, run
from proof.adversary_db import PostgresTarget, RunningServer, SqliteTarget
target = SqliteTarget(where) if engine == "sqlite" else PostgresTarget(RunningServer(where))
budget = Budget(int(examples) or QUICK.examples, QUICK.steps)
result = run(target, budget, frozenset(families.split(",")), shrink=shrink == "shrink",
             derandomize=seeded == "seeded")
print(json.dumps(result.to_dict()))
"""


def run_planted(planted: Planted, folder: Path, *, engine: str = "sqlite", server: Path | None = None,
                examples: int = 0, shrink: bool = False, timeout: float = 600,
                derandomize: bool = True) -> dict[str, Any]:
    """Plant ``planted`` in a copy of queue_core under ``folder`` and run the adversary there
    (quick budget, or ``examples``; seeded draws unless ``derandomize`` is False); returns its
    result (``AdversaryResult.to_dict()``).

    On PostgreSQL, ``server`` is the folder of a running throwaway server
    (``proof.postgres_cluster.Cluster.root``): the run makes a database of its own on it.
    """
    tree = folder / "tree"
    for package in ("queue_core", "proof"):
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    plant(tree, planted)
    where = str(server) if engine == "postgresql" and server is not None else str(folder)
    if engine == "postgresql" and server is None:
        raise ValueError("run_planted on PostgreSQL needs the folder of a running server")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    ran = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(tree), engine, where, planted.families, str(examples),
         "shrink" if shrink else "no", "seeded" if derandomize else "random"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)
    if ran.returncode != 0 or not ran.stdout.strip():
        raise RuntimeError(f"the planted run of {planted.name} failed ({ran.returncode}): "
                           f"{ran.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])
    return result
