"""Fault plans: a probe that runs an action when the store reaches a named point.

The store calls its probe (``Store(..., probe=plan)``) at every step of every
write operation, e.g. ``"complete.after_effect"``. A ``FaultPlan`` is such a
probe: nothing happens unless a point was armed, and it lives in the process
(and the store) it was given to, never in a global. The CLI never passes one.

Point names are ``<operation>.<step>``; ``store.PROBE_POINTS`` lists them all,
so a typo in a test fails loudly instead of silently never firing.
"""

from __future__ import annotations

from collections.abc import Callable

from ..store import PROBE_POINTS

__all__ = ["FaultPlan", "PROBE_POINTS", "Tracer"]


class FaultPlan:
    """A probe: run an armed action (e.g. ``lambda: os._exit(86)``) at a point."""

    def __init__(self) -> None:
        self._armed: dict[str, Callable[[], None]] = {}

    def arm(self, point: str, action: Callable[[], None]) -> FaultPlan:
        """Run ``action`` when ``point`` is reached; returns the plan for chaining."""
        if point not in PROBE_POINTS:
            raise ValueError(
                f"unknown fault point {point!r}; known: {', '.join(sorted(PROBE_POINTS))}"
            )
        self._armed[point] = action
        return self

    def disarm_all(self) -> None:
        """Forget every armed action."""
        self._armed.clear()

    def __call__(self, point: str) -> None:
        action = self._armed.get(point)
        if action is not None:
            action()


class Tracer:
    """A probe that only records the points reached, in order."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    def __call__(self, point: str) -> None:
        self.reached.append(point)
