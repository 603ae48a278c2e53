"""Planted bugs: does a documentation test fail when queue_core breaks a promise?

    python scripts/plant_bugs.py --list            # the mutations, one a line
    python scripts/plant_bugs.py --check           # each still applies to this tree's code
    python scripts/plant_bugs.py                   # run them all (about 2 minutes each)
    python scripts/plant_bugs.py --only delay_ignored,backoff_changed --json out.json

Each mutation is a small text replacement in one file of queue_core (a fence
dropped from a statement, a constant changed, a rule matched by prefix). The
replacement must find its text, or the script fails loudly: a list that no
longer applies proves nothing.

Nothing here touches this repository's own queue_core. A run makes a git
worktree of ``--rev`` (default HEAD: commit what you want tested) in a
temporary folder, first runs it unchanged to learn what already fails there
(another page being rewritten), and then, for each mutation, applies it in the
worktree, checks that Python imports the worktree's queue_core (the worktree
comes first on PYTHONPATH; it prints ``queue_core.__file__``), and runs:

1. ``pytest docs/ -x -q -p no:cacheprovider``: the pages' executed blocks.
   A failure here is *on behaviour*: an assertion of a block, or an exception.
2. every ``snippets/*.py`` as a program in an empty folder, its exit status
   only (its printed output is not compared): *on behaviour* too.
3. only if neither caught it: the recorded-output comparisons
   (``tests/test_page_outputs.py``, ``tests/test_snippets.py``,
   ``tests/test_docs_console.py``). A mutant caught only here changed what a
   page prints, but no block says which promise broke.

It prints a table (mutant, what caught it, on behaviour yes/no) and exits 1
if any mutant was caught by nothing, or only by a recorded output.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    """One planted bug: ``replacements`` (old, new) applied to ``path``, each found."""

    name: str
    path: str  # relative to the repository
    replacements: tuple[tuple[str, str], ...]
    breaks: str  # the promise it breaks, in words


S, C = "queue_core/engines/sqlite_queries.sql", "queue_core/completion.py"
# the fenced read that opens complete, fail, extend and release: skipped
_NO_FENCED_READ = (
    "        message, token = found\n",
    "        message, token = found\n"
    "        return message  # planted: no check\n",
)

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "ack_ignores_lease_until", S,
        (("  AND lease_until > :now;\n\n-- name: message",
          "  AND (lease_until > :now OR 1 = 1);\n\n-- name: message"),),
        "the fence (fenced_move: the ACK, a release, an extension) no longer checks "
        "that the lease is unexpired",
    ),
    Mutation(
        "release_unfenced", C,
        (("        self.leased_tx(tx, lease)  # the fence: raises LeaseLost saying why\n"
          "        self._scope.at(\"release.after_read\")",
          "        self._scope.at(\"release.after_read\")\n"
          "        now = tx.ops.lease_locked(tx.conn, self._scope.queue, lease.event_id)\n"
          "        if now is not None:  # planted: released as whatever lease is current\n"
          "            lease = Lease(lease.event_id, now[0].generation, lease.attempt,\n"
          "                          lease.lease_until, now[1])"),),
        "a release no longer checks the lease: a stale lease gives the message back",
    ),
    Mutation(
        "fail_unfenced", C, (_NO_FENCED_READ,),
        "the fenced read is skipped: fail (and a refusal) of a stale lease is recorded",
    ),
    Mutation(
        "complete_unfenced", C,
        (_NO_FENCED_READ, ("        if acked != len(leases):\n", "        if acked != len(leases) and False:\n")),
        "complete no longer fenced: an ACK that changed no row is reported done, "
        "and the effect commits",
    ),
    Mutation(
        "extend_unfenced", C,
        (_NO_FENCED_READ,
         ("        if not tx.ops.extend(tx.conn, self._scope.queue, lease, now=now, until=extended.lease_until):\n",
          "        if not tx.ops.extend(tx.conn, self._scope.queue, lease, now=now, until=extended.lease_until)"
          " and False:\n")),
        "extend no longer fenced: a refused extension is reported as made",
    ),
    Mutation(
        "backoff_changed", "queue_core/rules.py",
        (("delay = min(cap, base << exponent)", "delay = min(cap, base * 3**exponent)"),),
        "the backoff after a temporary failure is 1, 3, 9 s instead of 1, 2, 4 s",
    ),
    Mutation(
        "claim_order_reversed", S,
        (("ORDER BY priority DESC, available_at, event_id\n",
          "ORDER BY priority DESC, available_at DESC, event_id DESC\n"),),
        "a claim takes the newest available message first",
    ),
    Mutation(
        "claim_priority_ignored", S,
        (("ORDER BY priority DESC, available_at, event_id\n", "ORDER BY available_at, event_id\n"),),
        "a claim takes the oldest available message, not the one of the highest priority",
    ),
    Mutation(
        "batch_order_ignores_priority", "queue_core/claims.py",
        (("    return -message.priority, message.available_at, message.event_id",
          "    return 0, message.available_at, message.event_id"),),
        "a batch comes back, and is completed, oldest first, not in the claim order",
    ),
    Mutation(
        "max_messages_ignores_reservations", "queue_core/worker_threads.py",
        (("        return self.limit - self.claimed - self.reserved",
          "        return self.limit - self.claimed"),),
        "max_messages counts only finished claims: N threads together claim more than it",
    ),
    Mutation(
        "read_only_store_writes", "queue_core/engines/sqlite.py",
        (("        if self.read_only:\n            return connect_read_only(",
          "        if False:\n            return connect_read_only("),
         ("        if self.read_only:\n            raise refuse_write(self.where)",
          "        if False:\n            raise refuse_write(self.where)")),
        "a store opened read-only writes like any other",
    ),
    Mutation(
        "claim_ignores_queue", S,
        (("WHERE queue = :queue AND state IN ('ready', 'leased')",
          "WHERE :queue <> '' AND state IN ('ready', 'leased')"),
         ("WHERE queue = :queue AND event_id IN (",
          "WHERE :queue <> '' AND event_id IN (")),
        "a claim takes messages of any queue",
    ),
    Mutation(
        "queue_max_attempts_ignored", "queue_core/store.py",
        (("                found.max_attempts if max_attempts is None else max_attempts,",
          "                DEFAULT_SETTINGS.max_attempts if max_attempts is None else max_attempts,"),),
        "a created queue's claims before dead are ignored (the default's 3 apply)",
    ),
    Mutation(
        "queue_lease_seconds_ignored", "queue_core/scope.py",
        (("            return self.settings.lease_seconds\n", "            return 30\n"),),
        "a created queue's lease is ignored (the default's 30 s apply)",
    ),
    Mutation(
        "id_rule_prefix_match", "queue_core/queues.py",
        (("return None if self.id_rule.fullmatch(event_id)",
          "return None if self.id_rule.match(event_id)"),),
        "an id rule matches a prefix: a valid id with characters after it is accepted",
    ),
    Mutation(
        "prune_drops_hash", "queue_core/reads.py",
        (("(event_id, payload_digest(payload))",
          "(event_id, payload_digest(\"{}\"))"),),
        "prune keeps the hash of the emptied payload, not the payload's: a re-sent "
        "event is no longer recognised as a duplicate",
    ),
    Mutation(
        "pruned_conflict_accepted", "queue_core/enqueues.py",
        (("                    else \"\"\n", "                    else event.payload\n"),),
        "after prune, another payload under a pruned id is taken for a duplicate",
    ),
    Mutation(
        "purge_takes_leased", S,
        (("DELETE FROM messages WHERE queue = :queue AND state = :state\n"
          "  AND state IN ('ready', 'dead');",
          "DELETE FROM messages WHERE queue = :queue AND (state = :state\n"
          "  OR state = 'leased');"),),
        "purge removes leased messages too",
    ),
    Mutation(
        "delay_ignored", "queue_core/rules.py",
        (("return now + delay", "return now"),),
        "a delayed event is claimable at once",
    ),
    Mutation(
        "redrive_keeps_attempts", S,
        (("UPDATE messages SET state = 'ready', attempts = 0, available_at = :now",
          "UPDATE messages SET state = 'ready', available_at = :now"),),
        "redrive no longer resets the attempts: the message goes dead again at its claim",
    ),
    Mutation(
        "release_spends_attempt", S,
        (("  attempts    = CASE :move WHEN 'release' THEN attempts - 1 ELSE attempts END",
          "  attempts    = attempts"),),
        "a release counts the claim that it gives back as an attempt",
    ),
    Mutation(
        "release_loses_place", S,
        (("  attempts    = CASE :move WHEN 'release' THEN attempts - 1 ELSE attempts END",
          "  attempts    = CASE :move WHEN 'release' THEN attempts - 1 ELSE attempts END,\n"
          "  available_at = available_at + (:move = 'release')"),),
        "a released message goes behind the others in the claim order",
    ),
    Mutation(
        "stop_interrupts_message_in_hand", "queue_core/cli/service.py",
        (("again = signum == signal.SIGINT and signal.SIGINT in stopping.received",
          "again = True"),),
        "SIGTERM interrupts the message in hand instead of letting it finish",
    ),
)


class MutationRotted(Exception):
    """A mutation's text is no longer in the code: the list must be updated."""


def mutated(text: str, mutation: Mutation) -> str:
    """``text`` with every replacement of ``mutation`` made; each must be found."""
    for old, new in mutation.replacements:
        if old not in text:
            raise MutationRotted(
                f"{mutation.name}: {mutation.path} no longer holds {old!r}"
            )
        text = text.replace(old, new)
    return text


def check(root: Path = ROOT) -> list[str]:
    """The mutations that no longer apply to ``root``'s code, or compile no more."""
    wrong = []
    for mutation in MUTATIONS:
        source = (root / mutation.path).read_text(encoding="utf-8")
        try:
            changed = mutated(source, mutation)
            if mutation.path.endswith(".py"):
                compile(changed, mutation.path, "exec")
        except (MutationRotted, SyntaxError) as exc:
            wrong.append(str(exc))
            continue
        if changed == source:
            wrong.append(f"{mutation.name}: changes nothing")
    return wrong


# ------------------------------------------------------------------ running


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("QUEUE_CORE_RECORD_PAGES", None)
    return env


def _imports_tree(tree: Path) -> str:
    """``queue_core.__file__`` as the runs see it; it must be the worktree's."""
    out = subprocess.run(
        [sys.executable, "-c", "import queue_core; print(queue_core.__file__)"],
        cwd=tree, env=_env(tree), capture_output=True, text=True, check=True,
    ).stdout.strip()
    if not out.startswith(str(tree)):
        raise SystemExit(f"the runs would import {out}, not the worktree's queue_core")
    return out


def _pytest(tree: Path, args: list[str], stop_first: bool, timeout: float) -> list[dict[str, str]]:
    """Run pytest in ``tree``; its failures as dicts (test id, type, first line)."""
    report = Path(tempfile.mkstemp(suffix=".xml")[1])
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "no:randomly", f"--junitxml={report}", *args]
    if stop_first:
        command.insert(4, "-x")
    try:
        subprocess.run(command, cwd=tree, env=_env(tree), capture_output=True,
                       text=True, timeout=timeout)
        failures = []
        if report.stat().st_size:
            for case in ET.parse(report).iter("testcase"):
                for bad in list(case.findall("failure")) + list(case.findall("error")):
                    message = _why((bad.get("message") or "") + "\n" + (bad.text or ""))
                    cls, name = case.get("classname"), case.get("name")
                    failures.append({
                        "test": f"{cls}::{name}" if cls else str(name),
                        "type": bad.get("type") or bad.tag,
                        "message": message,
                    })
        return failures
    except subprocess.TimeoutExpired:
        return [{"test": " ".join(args), "type": "timeout", "message": f"over {timeout} s"}]
    finally:
        report.unlink(missing_ok=True)


def _why(text: str) -> str:
    """The line that says what failed: the last exception's, else the first line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    raised = [line.removeprefix("E").strip() for line in lines
              if re.match(r"^(E\s+)?[\w.]*(Error|Exception|Lost|Rejected)\b", line)]
    return (raised[-1] if raised else lines[0] if lines else "")[:200]


def _snippets(tree: Path, skip: set[str], stop_first: bool) -> list[dict[str, str]]:
    """Run each snippet as a program in an empty folder; the ones that exit non-zero."""
    failures = []
    for snippet in sorted((tree / "snippets").glob("*.py")):
        if snippet.name in skip:
            continue
        with tempfile.TemporaryDirectory() as folder:
            shutil.copy(snippet, Path(folder) / snippet.name)
            try:
                done = subprocess.run([sys.executable, snippet.name], cwd=folder,
                                      env=_env(tree), capture_output=True, text=True,
                                      timeout=120)
            except subprocess.TimeoutExpired:
                failures.append({"test": f"snippets/{snippet.name}", "type": "timeout",
                                 "message": "over 120 s"})
                continue
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            failures.append({"test": f"snippets/{snippet.name}",
                             "type": f"exit {done.returncode}", "message": last[:200]})
            if stop_first:
                break
    return failures


OUTPUT_TESTS = ["tests/test_page_outputs.py", "tests/test_snippets.py",
                "tests/test_docs_console.py"]


def baseline(tree: Path) -> dict[str, object]:
    """What fails before any mutation: left out of every mutant's run."""
    docs = _pytest(tree, ["docs/", "--continue-on-collection-errors"], False, 1200)
    failing_pages = sorted({_page_of(f["test"]) for f in docs})
    snippets = _snippets(tree, set(), False)
    output = [f["test"] for test in OUTPUT_TESTS for f in _pytest(tree, [test], False, 1200)]
    return {"pages": failing_pages,
            "snippets": sorted(f["test"].removeprefix("snippets/") for f in snippets),
            "output": sorted(set(output))}


def _page_of(test: str) -> str:
    """The page a junit test id belongs to (``docs.lease.md::...`` -> ``docs/lease.md``)."""
    head = test.split("::")[0]
    if head.endswith(".md") and "/" not in head:
        stem = head[: -len(".md")]
        return stem.replace(".", "/") + ".md"
    return head


def run_one(tree: Path, mutation: Mutation, before: dict[str, object]) -> dict[str, object]:
    """Apply ``mutation`` in ``tree``, run the tests, restore the file; what caught it."""
    target = tree / mutation.path
    original = target.read_text(encoding="utf-8")
    target.write_text(mutated(original, mutation), encoding="utf-8")
    started = time.monotonic()
    try:
        imported = _imports_tree(tree)
        pages = [p for p in (tree / "docs").rglob("*.md")
                 if p.relative_to(tree).as_posix() not in before["pages"]]
        docs = _pytest(tree, sorted(p.relative_to(tree).as_posix() for p in pages),
                       True, 1200)
        snippets = _snippets(tree, set(before["snippets"]), False)
        caught = docs[:1] + snippets
        output: list[dict[str, str]] = []
        if not caught:
            for test in OUTPUT_TESTS:  # each alone: one that fails to collect stops none
                output += [f for f in _pytest(tree, [test], True, 1200)
                           if f["test"] not in before["output"]]
    finally:
        target.write_text(original, encoding="utf-8")
    return {
        "mutant": mutation.name,
        "breaks": mutation.breaks,
        "imported": imported,
        "on_behaviour": bool(caught),
        "caught_by": caught,
        "output_only": output,
        "seconds": round(time.monotonic() - started),
    }


def _table(results: list[dict[str, object]]) -> str:
    lines = ["| mutant | caught by | on behaviour |", "| --- | --- | --- |"]
    for r in results:
        found = r["caught_by"] or r["output_only"]
        if found:
            first = found[0]
            more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
            by = f"`{first['test']}`{more}: {first['type']}: {first['message']}"
        else:
            by = "nothing"
        lines.append(f"| {r['mutant']} | {by.replace('|', '/')} | "
                     f"{'yes' if r['on_behaviour'] else 'no'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the mutations")
    parser.add_argument("--check", action="store_true",
                        help="check that every mutation applies to this tree's code")
    parser.add_argument("--only", help="comma-separated mutation names")
    parser.add_argument("--rev", default="HEAD", help="the commit to test (default HEAD)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    # the adversary's own planted bugs (tests/conformance/test_adversary_planted.py runs them)
    sys.path.insert(0, str(ROOT))
    from proof import adversary_planted

    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:<34}{m.path:<28}{m.breaks}")
        for p in adversary_planted.PLANTED:
            print(f"{p.name:<34}{'(the adversary: ' + p.families + ')':<28} {p.breaks}")
        return 0
    if args.check:
        wrong = check() + adversary_planted.check()
        count = len(MUTATIONS) + len(adversary_planted.PLANTED)
        print("\n".join(wrong) or f"all {count} mutations apply")
        return 1 if wrong else 0
    chosen = list(MUTATIONS)
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {m.name for m in MUTATIONS}
        if unknown:
            parser.error(f"no mutation named {', '.join(sorted(unknown))}")
        chosen = [m for m in MUTATIONS if m.name in names]
    tree = Path(tempfile.mkdtemp(prefix="plant-bugs-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                    args.rev], check=True, capture_output=True)
    try:
        wrong = check(tree)
        if wrong:
            raise SystemExit("mutations that do not apply to " + args.rev + ":\n"
                             + "\n".join(wrong))
        print(f"worktree {tree} at {args.rev}; imports {_imports_tree(tree)}", flush=True)
        before = baseline(tree)
        print(f"failing before any mutation (left out): {before}", flush=True)
        results = []
        for mutation in chosen:
            result = run_one(tree, mutation, before)
            results.append(result)
            print(json.dumps(result), flush=True)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                       capture_output=True)
        shutil.rmtree(tree.parent, ignore_errors=True)
    print(_table(results))
    if args.json:
        args.json.write_text(json.dumps({"rev": args.rev, "baseline": before,
                                         "results": results}, indent=1) + "\n")
    return 0 if all(r["on_behaviour"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
