"""The lab's stories and the page's entry point (docs/lab.md).

``SCENARIOS`` are the stories the page replays step by step; ``replay`` makes a
new lab and takes steps; ``call`` is what ``assets/javascripts/lab.js`` calls
in the reader's browser, a JSON request in and the lab's state out. The engine
itself is ``lab_engine``; the page publishes both modules, and the browser
imports them as the package ``docs_support``, as the repository does.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from .lab_engine import ACKS, FREE_EVENTS, LEASE_SECONDS, Lab, LabError

__all__ = ["SCENARIOS", "Scenario", "call", "replay", "state", "verdict"]


@dataclass(frozen=True)
class Scenario:
    """A story the page replays step by step: its messages and its steps with captions."""

    key: str
    title: str
    events: tuple[tuple[str, str], ...]  # (event id, kind of payload)
    steps: tuple[tuple[str, str], ...]  # (action, caption)
    summary: str = ""


SCENARIOS: Final[dict[str, Scenario]] = {
    s.key: s
    for s in (
        Scenario(
            "gc-pause",
            "A GC pause: the stalled worker wakes inside another's lease",
            (("E0001", "book"),),
            (
                ("A.claim", "A claims E0001 for 3 seconds."),
                (
                    "A.pause",
                    "A stalls: a long garbage collection, a stopped virtual machine.",
                ),
                (
                    "clock.lease",
                    "Three seconds pass: A's lease has ended. Nothing in the "
                    "database changed: no sweeper runs.",
                ),
                (
                    "B.claim",
                    "B claims E0001: the next generation, its own claim token.",
                ),
                ("clock.1", "One more second: it is inside B's lease."),
                ("A.wake", "A wakes up, sure it still holds E0001."),
                (
                    "A.complete",
                    "A completes: its effect and its ACK, one transaction. "
                    "The ACK decides.",
                ),
                ("B.complete", "B completes its own lease."),
            ),
            "The fencing chapter's race: queue_core refuses A; the time-only ACK lets A win "
            "and refuses B; no fence counts the money twice.",
        ),
        Scenario(
            "lost-claim",
            "A lost claim: a failover forgets A's claim, the generation comes again",
            (("E0001", "book"),),
            (
                (
                    "db.copy",
                    "A standby copies the database; from here on it lags behind.",
                ),
                ("A.claim", "A claims E0001 on the primary: generation 1."),
                (
                    "db.restore",
                    "The primary dies before the standby got A's claim; the "
                    "standby takes over. A still holds its lease in memory.",
                ),
                ("B.claim", "B claims E0001: generation 1 again, another claim token."),
                ("A.complete", "A completes with its lease from before the failover."),
                ("B.complete", "B completes its own lease."),
            ),
            "Only the claim token tells the two leases apart: the generation-only ACK lets A "
            "finish B's claim.",
        ),
        Scenario(
            "crash",
            "A crash between the effect and the ACK",
            (("E0001", "book"),),
            (
                ("A.claim", "A claims E0001."),
                ("A.crash", "A dies after its effect's INSERT, before its ACK."),
                ("clock.lease", "No one sweeps the lease: it runs out."),
                ("B.claim", "B claims E0001: the next generation."),
                ("B.complete", "B completes: the one effect."),
            ),
            "Nothing of A's attempt stays; the message is done once.",
        ),
        Scenario(
            "poison",
            "A poison message: it crashes every worker that takes it",
            (("E0001", "poison"), ("E0002", "pen")),
            (
                ("A.claim", "A claims E0001, a payload that crashes its handler."),
                ("A.complete", "A's handler crashes the worker."),
                ("clock.lease", "A's lease runs out."),
                ("B.claim", "B claims E0001: attempt 2."),
                ("B.complete", "B crashes the same way."),
                ("clock.lease", "B's lease runs out."),
                ("A.claim", "A starts again and claims E0001: attempt 3, the last."),
                ("A.complete", "A crashes a third time."),
                ("clock.lease", "The last lease runs out."),
                (
                    "B.claim",
                    "B's claim finds E0001's claims spent: E0001 goes to the "
                    "dead letters, and B takes E0002.",
                ),
                (
                    "B.complete",
                    "E0002 is done: the poison message no longer blocks it.",
                ),
            ),
            "After three claims the poison message is a dead letter (lease_expired) and "
            "the queue flows again.",
        ),
    )
}


def replay(folder: Path, scenario: str | None, ack: str, actions: list[str]) -> Lab:
    """A new lab in ``folder`` with ``scenario``'s messages (or E0001 and E0002), after ``actions``."""
    if scenario is not None and scenario not in SCENARIOS:
        raise LabError("unknown_scenario", f"no scenario {scenario!r}")
    events = SCENARIOS[scenario].events if scenario else FREE_EVENTS
    lab = Lab(folder, events, ack)
    for action in actions:
        lab.act(action)
    return lab


def verdict(lab: Lab) -> list[dict[str, Any]]:
    """Each message of ``lab``'s effects, judged: once, doubled, lost, or none yet."""
    effects = lab.effects()
    judged = []
    for row in lab.rows():
        mine = [e for e in effects if e["event_id"] == row["event_id"]]
        if len(mine) > 1:
            kind = "doubled"
        elif row["state"] == "done" and not mine:
            kind = "lost"
        elif mine and not mine[0]["fence_held"]:
            kind = "stale"
        elif mine:
            kind = "once"
        else:
            kind = "none"
        judged.append(
            {
                "event_id": row["event_id"],
                "kind": kind,
                "effects": len(mine),
                "state": row["state"],
            }
        )
    return judged


def state(lab: Lab) -> dict[str, Any]:
    """Everything the page draws: the steps so far, the leases, what may be done next."""
    return {
        "ack": lab.ack,
        "acks": ACKS,
        "clock": lab.clock.now(),
        "lease_seconds": LEASE_SECONDS,
        "steps": lab.steps,
        "leases": [asdict(lease) for lease in lab.leases],
        "allowed": lab.allowed(),
        "verdict": verdict(lab),
        "copied_at": lab.copied_at,
    }


# ---------------------------------------------------------------- the page's entry

_session: dict[str, Any] = {}


def call(request: str) -> str:
    """The page's one entry point: a JSON request in, the lab's state (or an error) out.

    ``{"do": "start", "scenario": key or null, "ack": mode, "actions": [...]}``
    starts a new lab (in a new folder) and replays ``actions``;
    ``{"do": "act", "action": "A.claim"}`` takes one step;
    ``{"do": "query", "sql": "SELECT ..."}`` reads the database (the browser test).
    """
    try:
        asked: Mapping[str, Any] = json.loads(request)
        if asked["do"] == "start":
            old = _session.pop("lab", None)
            if old is not None:
                old.close()
            folder = Path(tempfile.mkdtemp(prefix="queue-core-lab-"))
            _session["lab"] = replay(
                folder,
                asked.get("scenario"),
                asked.get("ack", "fenced"),
                list(asked.get("actions", [])),
            )
            return json.dumps(state(_session["lab"]))
        lab: Lab = _session["lab"]
        if asked["do"] == "act":
            lab.act(str(asked["action"]))
            return json.dumps(state(lab))
        if asked["do"] == "query":
            return json.dumps({"rows": lab.query(str(asked["sql"]))})
        raise LabError("unknown_request", f"no request {asked['do']!r}")
    except LabError as refused:
        return json.dumps({"error": refused.code, "message": str(refused)})
