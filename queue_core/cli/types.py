"""``queue-core``'s argument types: each turns one option's text into a value, or says what is wrong.

argparse calls them; a refusal (``argparse.ArgumentTypeError``) becomes a usage
error that names the option (exit 2). Every bound is the library's own
constant, read where the library defines it when its option is given: so
``queue-core --help`` imports none of the library's modules.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from ..clock import MAX_SECONDS

MAX_BUSY_SECONDS = 3600  # --busy-timeout: an hour is already a hung database


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: ASCII digits only (a leading minus when low < 0), within [low, high]."""
    digits = r"-?[0-9]+" if low < 0 else r"[0-9]+"

    def parse(text: str) -> int:
        if not re.fullmatch(digits, text):
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected a number in {low}..{high}, got {text}"
            )
        return value

    return parse


parse_seconds = whole_number(0, MAX_SECONDS)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_age(text: str) -> int:
    """An argparse type: an age such as 3600, 90s, 15m, 12h or 30d, in whole seconds."""
    found = re.fullmatch(r"([0-9]+)([smhd]?)", text)
    if not found:
        raise argparse.ArgumentTypeError(
            f"expected an age such as 3600, 90s, 15m, 12h or 30d, got {text!r}"
        )
    seconds = int(found.group(1)) * UNITS[found.group(2) or "s"]
    if seconds > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text} is longer than the clock's range ({MAX_SECONDS} s)"
        )
    return seconds


def parse_decimal_seconds(text: str, high: float) -> float:
    """Seconds such as 0, 0.5 or 30, at most ``high``."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        raise argparse.ArgumentTypeError(
            f"expected seconds such as 0, 0.5 or 30, got {text!r}"
        )
    seconds = float(text)
    if seconds > high:
        raise argparse.ArgumentTypeError(
            f"expected at most {high:g} seconds, got {text}"
        )
    return seconds


def parse_busy_seconds(text: str) -> float:
    """An argparse type: seconds to wait for a busy database, 0 to an hour."""
    return parse_decimal_seconds(text, MAX_BUSY_SECONDS)


def parse_poll_seconds(text: str) -> float:
    """An argparse type: seconds a --forever worker waits, above 0 (work()'s own bounds)."""
    from ..worker import MAX_POLL_SECONDS

    seconds = parse_decimal_seconds(text, MAX_POLL_SECONDS)
    if seconds == 0:
        raise argparse.ArgumentTypeError("expected more than 0 seconds, got 0")
    return seconds


def parse_lease_seconds(text: str) -> int:
    """An argparse type: a lease in whole seconds, 1 to the library's longest."""
    from ..rules import MAX_LEASE_SECONDS

    return whole_number(1, MAX_LEASE_SECONDS)(text)


def parse_at(text: str) -> int:
    """An argparse type: ISO 8601 with a timezone, or Unix seconds; returns Unix seconds."""
    from datetime import datetime

    if re.fullmatch(r"[0-9]+", text):
        return parse_seconds(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "expected ISO 8601 with a timezone (2026-12-05T09:00:00+01:00, or Z for "
            f"UTC) or Unix seconds, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no timezone: add one (Z, +00:00, +01:00...), "
            "or give Unix seconds"
        )
    seconds = math.ceil(moment.timestamp())
    if not 0 <= seconds <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected a time after 1970, got {text!r}")
    return seconds


def parse_priority(text: str) -> int:
    """An argparse type: a priority within the library's range."""
    from ..rules import MAX_PRIORITY, MIN_PRIORITY

    return whole_number(MIN_PRIORITY, MAX_PRIORITY)(text)


def parse_every(text: str) -> int:
    """An argparse type: a period such as 60, 90s, 15m, 12h or 1d, 1 s to a year."""
    from ..schedules import MAX_PERIOD_SECONDS

    seconds = parse_age(text)
    if not 1 <= seconds <= MAX_PERIOD_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected a period of 1..{MAX_PERIOD_SECONDS} seconds, got {text}"
        )
    return seconds


def parse_fraction(text: str) -> float:
    """An argparse type: a fraction 0..1 such as 0, 0.2 or 1."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", text) or not float(text) <= 1:
        raise argparse.ArgumentTypeError(
            f"expected a fraction 0..1 such as 0, 0.2 or 1, got {text!r}"
        )
    return float(text)


def parse_queue_name(text: str) -> str:
    """A queue name, checked before any SQL runs."""
    from ..errors import InvalidQueue
    from ..queues import check_queue_name

    try:
        return check_queue_name(text)
    except InvalidQueue as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


parse_count = whole_number(0, 10**9)


def parse_delay(text: str) -> int:
    """An argparse type: a delay in whole seconds, 0 to the library's longest."""
    from ..rules import MAX_DELAY_SECONDS

    return whole_number(0, MAX_DELAY_SECONDS)(text)


def parse_batch(text: str) -> int:
    """An argparse type: messages per transaction, 1 to the library's most."""
    from ..rules import MAX_BATCH

    return whole_number(1, MAX_BATCH)(text)


def parse_concurrency(text: str) -> int:
    """An argparse type: a worker's threads, 1 to the worker's limit."""
    from ..worker import MAX_CONCURRENCY

    return whole_number(1, MAX_CONCURRENCY)(text)


def parse_heartbeat_seconds(text: str) -> float:
    """An argparse type: a two-step handler's heartbeat interval, above 0, at most a lease."""
    from ..rules import MAX_LEASE_SECONDS

    seconds = parse_decimal_seconds(text, MAX_LEASE_SECONDS)
    if seconds == 0:
        raise argparse.ArgumentTypeError("expected more than 0 seconds, got 0")
    return seconds


def parse_error_code(text: str) -> str:
    """An argparse type: an error code to match last_error with."""
    from ..claims import check_error_code

    try:
        check_error_code(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
