"""Named fault points inside the protocol's write transactions.

The store calls ``reach("complete.after_insert")`` and the like at every step
of every write operation. Nothing happens unless a test (or the demo's crash
child) has armed that point in *its own process* with ``arm``; the CLI never
arms any. Unarmed, a point costs one truth test of an empty dict.

Point names are ``<operation>.<step>``; ``POINTS`` lists them all so a typo in
a test fails loudly instead of silently never firing.
"""

from __future__ import annotations

from collections.abc import Callable

OPERATIONS = ("enqueue", "claim", "complete", "fail", "redrive")
_COMMON_STEPS = ("after_begin", "after_read", "before_commit", "after_commit")
_EXTRA_STEPS = {
    "enqueue": ("after_insert",),
    "claim": ("after_expire", "after_update"),
    "complete": ("after_insert", "after_recheck", "after_update"),
    "fail": ("after_update",),
    "redrive": ("after_update",),
}
POINTS = frozenset(
    f"{op}.{step}" for op in OPERATIONS for step in _COMMON_STEPS + _EXTRA_STEPS[op]
)

_armed: dict[str, Callable[[], None]] = {}


def reach(point: str) -> None:
    """Called by the store at a fault point; runs the armed action, if any."""
    if _armed:
        action = _armed.get(point)
        if action is not None:
            action()


def arm(point: str, action: Callable[[], None]) -> None:
    """Run ``action`` (e.g. ``lambda: os._exit(86)``) when ``point`` is reached."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {', '.join(sorted(POINTS))}")
    _armed[point] = action


def disarm_all() -> None:
    """Forget every armed action."""
    _armed.clear()
