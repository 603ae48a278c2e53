"""Named queues: a queue's name, and the settings it keeps in the database.

One database holds any number of queues; each message belongs to one, and an
event id is unique within its queue. A queue's settings are stored with it
(table ``queues``) and read when a store opens it, so every process agrees on
them. The queue ``default`` exists in every database, with the teaching
settings the chapters use: ids ``E`` and four digits, 3 claims, a 30 s lease,
payloads up to 10,000 bytes, retries after 1 s then 2 s (no jitter).

Names and patterns are checked here, before any SQL runs; a name is always a
bound value, never part of a statement's text.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Final

from .errors import InvalidQueue
from .rules import (
    BACKOFF_BASE_SECONDS,
    BACKOFF_JITTER,
    BACKOFF_MAX_SECONDS,
    DEFAULT_LEASE_SECONDS,
    MAX_ATTEMPTS,
    MAX_ATTEMPTS_LIMIT,
    MAX_BACKOFF_BASE_SECONDS,
    MAX_DELAY_SECONDS,
    MAX_LEASE_SECONDS,
    backoff_seconds,
)

# The parser behind re.compile (private, hence imported by name): its tree is
# what the backtracking matcher walks.
_sre: Any = importlib.import_module("re._parser")

DEFAULT_QUEUE: Final = "default"
# lowercase letters, digits, "_" and "-"; a letter first; 1 to 63 characters
QUEUE_NAME: Final = re.compile(r"[a-z][a-z0-9_-]{0,62}")
MAX_EVENT_ID_CHARS: Final = 200
MAX_PATTERN_CHARS: Final = 1_000
# the bounds a new setting must keep; the schema's CHECKs hold them too, except
# max_attempts, whose CHECK still admits the 1,000 an older version allowed
SETTING_BOUNDS: Final = {
    "max_attempts": (1, MAX_ATTEMPTS_LIMIT),
    "lease_seconds": (1, MAX_LEASE_SECONDS),
    "max_payload_bytes": (1, 1_000_000),
    "backoff_base_seconds": (1, MAX_BACKOFF_BASE_SECONDS),
    "backoff_max_seconds": (1, MAX_DELAY_SECONDS),
}
# A new queue's jitter: a demanding user expects the messages that one outage
# failed together not to come back in the same second, so new queues take up to
# a fifth off each delay (the spread of River's and Oban's +-10%); the queue
# default keeps none, so that the teaching pages' times stay exact.
NEW_QUEUE_BACKOFF_JITTER: Final = 0.2


@dataclass(frozen=True)
class QueueSettings:
    """One queue and the rules its messages live by."""

    name: str
    # a Python regular expression an event id must match in full
    id_pattern: str
    max_attempts: int  # claims per cycle before dead
    lease_seconds: int  # a claim's lease when the caller names none
    max_payload_bytes: int  # the canonical payload's limit, in UTF-8 bytes
    # the retry policy: min(max, base * 2**(attempt-1)), less up to jitter of it
    backoff_base_seconds: int = BACKOFF_BASE_SECONDS
    backoff_max_seconds: int = BACKOFF_MAX_SECONDS
    backoff_jitter: float = BACKOFF_JITTER  # the fraction 0..1 a delay may lose
    id_rule: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id_rule", compile_id_pattern(self.id_pattern))

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "id_pattern": self.id_pattern,
            "max_attempts": self.max_attempts,
            "lease_seconds": self.lease_seconds,
            "max_payload_bytes": self.max_payload_bytes,
            "backoff_base_seconds": self.backoff_base_seconds,
            "backoff_max_seconds": self.backoff_max_seconds,
            "backoff_jitter": self.backoff_jitter,
        }

    def backoff(
        self, attempt: int, draw: float = 0.0, retry_after: float | None = None
    ) -> int:
        """This queue's delay after a temporary failure of ``attempt``."""
        return backoff_seconds(
            attempt,
            base=self.backoff_base_seconds,
            cap=self.backoff_max_seconds,
            jitter=self.backoff_jitter,
            draw=draw,
            retry_after=retry_after,
        )

    def refuses(self, event_id: str) -> str | None:
        """Why ``event_id`` breaks this queue's id rule, or None if it keeps it."""
        if len(event_id) > MAX_EVENT_ID_CHARS:
            return (
                f"event_id has {len(event_id)} characters; the limit is "
                f"{MAX_EVENT_ID_CHARS}"
            )
        return None if self.id_rule.fullmatch(event_id) else self.id_sentence

    @property
    def id_sentence(self) -> str:
        """The id rule, as an error says it."""
        if self.name == DEFAULT_QUEUE and self.id_pattern == TEACHING_ID_PATTERN:
            return (
                "event_id must be 'E' and four digits (the default queue's rule "
                f"{self.id_pattern}; for ids of your own, create a queue: "
                "queue-core create NAME --id-pattern REGEX)"
            )
        return (
            f"event_id must be a string matching the id rule of queue {self.name}, "
            f"{self.id_pattern}"
        )


# "\d" would take Unicode digits: [0-9] takes only ASCII ones
TEACHING_ID_PATTERN: Final = "E[0-9]{4}"


def check_queue_name(name: object) -> str:
    """``name`` if it is a usable queue name; else ``InvalidQueue`` naming it."""
    if not isinstance(name, str):
        raise InvalidQueue(
            f"a queue name is a string, got {type(name).__name__}",
            code="invalid_queue_name",
        )
    if not QUEUE_NAME.fullmatch(name):
        shown = name if len(name) <= 70 else f"{name[:60]}... ({len(name)} characters)"
        raise InvalidQueue(
            f"invalid queue name {shown!r}: 1 to 63 lowercase letters, digits, "
            "'_' or '-', starting with a letter",
            code="invalid_queue_name",
        )
    return name


def compile_id_pattern(pattern: object) -> re.Pattern[str]:
    """The compiled id rule; ``InvalidQueue`` if it cannot be one."""
    if not isinstance(pattern, str) or not 1 <= len(pattern) <= MAX_PATTERN_CHARS:
        raise InvalidQueue(
            f"an id pattern is a regular expression of 1 to {MAX_PATTERN_CHARS} "
            f"characters, got {pattern!r:.80}",
            code="invalid_id_pattern",
        )
    try:
        rule = re.compile(pattern)
    except re.error as exc:
        raise InvalidQueue(
            f"the id pattern {pattern!r} is not a regular expression: {exc}",
            code="invalid_id_pattern",
        ) from None
    if rule.fullmatch(""):
        raise InvalidQueue(
            f"the id pattern {pattern!r} matches the empty string; an id "
            "must never be empty",
            code="invalid_id_pattern",
        )
    return rule


def check_id_pattern_safe(pattern: str) -> None:
    """Refuse (``id_pattern_unsafe``) a pattern that may backtrack catastrophically."""
    why = backtracking_risk(pattern)
    if why is not None:
        raise InvalidQueue(
            f"the id pattern {pattern!r} can take exponential or high polynomial "
            f"time on a non-matching id: {why}; write it with one repeat per "
            "part (e.g. [a-z0-9-]{1,64} rather than ([a-z0-9]+-?)+)",
            code="id_pattern_unsafe",
        )


# A repeat inside a repeat is let through only when the inner one has a fixed
# count and both are bounded with a small product: one way to match, no choice.
NESTED_REPEAT_LIMIT: Final = MAX_EVENT_ID_CHARS
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` may backtrack catastrophically, or None.

    Python's matcher backtracks: a repeat whose body can match one string in
    several ways tries every way before it fails. Two shapes cause it, and are
    refused: a repeat inside a repeat (``(a+)+``, ``(a*)*``, ``(.*a){20}``,
    unless the inner one has a fixed count: ``([0-9]{3}-){2}``) and a repeated alternation
    whose branches can start with the same character (``(a|a)*``, ``(a|ab)+``
    is fine). A static check, so conservative: it may refuse a pattern that a
    separator makes safe (``([a-z]+\\.)+``); rewrite it as one character class.
    """
    return _risk(_sre.parse(pattern), outer=None)


# A repeat this long or unbounded counts as long; three long repeats side by
# side that can take the same characters backtrack as n to the third power.
LONG_REPEAT: Final = 32
MOST_LONG_REPEATS_SIDE_BY_SIDE: Final = 2


def _side_by_side(items: Any) -> str | None:
    """Three or more long repeats in a row with nothing between them that they cannot take."""
    run: list[frozenset[int] | None] = []
    for op, value in _flat(items):
        name = str(op)
        if name in _REPEATS and value[1] >= LONG_REPEAT:
            run.append(_first_chars(value[2]) if len(value[2]) else None)
            if len(run) > MOST_LONG_REPEATS_SIDE_BY_SIDE:
                return "long repeats side by side that can take the same characters"
            continue
        if name in _REPEATS and value[0] == 0:
            continue  # optional: it separates nothing
        first = _first_chars([(op, value)])
        known = [chars for chars in run if chars is not None]
        if first is not None and len(known) == len(run):
            if not any(first & chars for chars in known):
                run = []  # a separator none of them takes: a fresh start
    return None


def _flat(items: Any) -> list[Any]:
    """A sequence with its plain groups opened: ``(a*)(a*)`` is ``a*a*``."""
    flat = []
    for op, value in items:
        if str(op) == "SUBPATTERN":
            flat.extend(_flat(value[-1]))
        else:
            flat.append((op, value))
    return flat


def _risk(items: Any, outer: tuple[int, int] | None) -> str | None:
    """Walk a parsed pattern; ``outer`` is the (min, max) of the repeat around it."""
    side = _side_by_side(items)
    if side is not None:
        return side
    for op, value in items:
        name = str(op)
        if name in _REPEATS:
            low, high, body = value
            unbounded = high == _sre.MAXREPEAT
            if outer is not None and high > 1:
                outer_unbounded = outer[1] == _sre.MAXREPEAT
                varies = low != high  # several ways to split the same characters
                if unbounded or outer_unbounded or varies or outer[1] * high > NESTED_REPEAT_LIMIT:
                    return "a repeat inside a repeat"
            if high > 1:
                found = _alternation_risk(body) if unbounded or high > 8 else None
                if found is not None:
                    return found
                found = _risk(body, (low, high))
            else:
                found = _risk(body, outer)
        elif name == "SUBPATTERN":
            found = _risk(value[-1], outer)
        elif name == "BRANCH":
            found = next(
                (r for branch in value[1] if (r := _risk(branch, outer)) is not None),
                None,
            )
        elif name in ("ASSERT", "ASSERT_NOT"):
            found = _risk(value[1], outer)
        elif name == "ATOMIC_GROUP":
            found = _risk(value, outer)
        elif name == "GROUPREF_EXISTS":
            found = _risk(value[1], outer) or (
                _risk(value[2], outer) if value[2] is not None else None
            )
        else:
            found = None
        if found is not None:
            return found
    return None


def _alternation_risk(body: Any) -> str | None:
    """A repeated body whose alternatives overlap: ``(a|a)*``, ``(\\d|[0-9a-f])+``."""
    items = list(body)
    while len(items) == 1 and str(items[0][0]) == "SUBPATTERN":
        items = list(items[0][1][-1])
    for op, value in items:
        if str(op) != "BRANCH":
            continue
        if sum(1 for branch in value[1] if not len(branch)) > 1:
            return "a repeated alternation whose branches match alike"
        starts = [_first_chars(branch) for branch in value[1] if len(branch)]
        for i, first in enumerate(starts):
            for other in starts[i + 1 :]:
                if first is None or other is None or first & other:
                    return "a repeated alternation whose branches can start alike"
    return None


def _first_chars(items: Any) -> frozenset[int] | None:
    """The characters a sequence can start with; None when not simply known."""
    op, value = items[0]
    name = str(op)
    if name in _REPEATS and value[0] >= 1 and len(value[2]):
        return _first_chars(value[2])
    if name == "LITERAL":
        return frozenset([value])
    if name == "SUBPATTERN":
        return _first_chars(value[-1]) if len(value[-1]) else None
    if name == "IN":
        chars: set[int] = set()
        for kind, arg in value:
            if str(kind) == "LITERAL":
                chars.add(arg)
            elif str(kind) == "RANGE" and arg[1] - arg[0] < 0x3000:
                chars.update(range(arg[0], arg[1] + 1))
            else:
                return None  # a category (\\d, \\w), a negation, a wide range
        return frozenset(chars)
    return None


def settings(
    name: str,
    *,
    id_pattern: str,
    max_attempts: int,
    lease_seconds: int,
    max_payload_bytes: int,
    backoff_base_seconds: int,
    backoff_max_seconds: int,
    backoff_jitter: float,
) -> QueueSettings:
    """Validated settings for queue ``name`` (``InvalidQueue`` names what is wrong)."""
    check_queue_name(name)
    numbers = {
        "max_attempts": max_attempts,
        "lease_seconds": lease_seconds,
        "max_payload_bytes": max_payload_bytes,
        "backoff_base_seconds": backoff_base_seconds,
        "backoff_max_seconds": backoff_max_seconds,
    }
    for key, value in numbers.items():
        low, high = SETTING_BOUNDS[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidQueue(
                f"{key} must be a whole number {low}..{high:,}, got {value!r}",
                code="invalid_setting",
            )
    if backoff_base_seconds > backoff_max_seconds:
        raise InvalidQueue(
            f"backoff_base_seconds {backoff_base_seconds} is above "
            f"backoff_max_seconds {backoff_max_seconds}",
            code="invalid_setting",
        )
    if (
        isinstance(backoff_jitter, bool)
        or not isinstance(backoff_jitter, (int, float))
        or not 0 <= backoff_jitter <= 1  # NaN fails this too
    ):
        raise InvalidQueue(
            f"backoff_jitter must be a fraction 0..1, got {backoff_jitter!r}",
            code="invalid_setting",
        )
    made = QueueSettings(
        name,
        id_pattern,
        max_attempts,
        lease_seconds,
        max_payload_bytes,
        backoff_base_seconds,
        backoff_max_seconds,
        float(backoff_jitter),
    )
    # a new queue only: a queue stored before this check still opens, to be drained
    check_id_pattern_safe(id_pattern)
    return made


# The teaching settings: the protocol's own defaults, and payloads up to 10,000 bytes.
DEFAULT_SETTINGS: Final = QueueSettings(
    DEFAULT_QUEUE, TEACHING_ID_PATTERN, MAX_ATTEMPTS, DEFAULT_LEASE_SECONDS, 10_000
)
