"""``queue-core``'s argument types: each turns one option's text into a value, or says what is wrong.

argparse calls them; a refusal (``argparse.ArgumentTypeError``) becomes a usage
error that names the option (exit 2).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import datetime

from .claims import check_error_code
from .clock import MAX_SECONDS
from .errors import InvalidQueue
from .queues import check_queue_name
from .rules import MAX_PRIORITY, MIN_PRIORITY
from .schedules import MAX_PERIOD_SECONDS
from .store import MAX_LEASE_SECONDS
from .worker import MAX_POLL_SECONDS

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
        raise argparse.ArgumentTypeError(f"expected at most {high:g} seconds, got {text}")
    return seconds


def parse_busy_seconds(text: str) -> float:
    """An argparse type: seconds to wait for a busy database, 0 to an hour."""
    return parse_decimal_seconds(text, MAX_BUSY_SECONDS)


def parse_poll_seconds(text: str) -> float:
    """An argparse type: seconds a --forever worker waits, above 0 (work()'s own bounds)."""
    seconds = parse_decimal_seconds(text, MAX_POLL_SECONDS)
    if seconds == 0:
        raise argparse.ArgumentTypeError("expected more than 0 seconds, got 0")
    return seconds


parse_lease_seconds = whole_number(1, MAX_LEASE_SECONDS)


def parse_at(text: str) -> int:
    """An argparse type: ISO 8601 with a timezone, or Unix seconds; returns Unix seconds."""
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


parse_priority = whole_number(MIN_PRIORITY, MAX_PRIORITY)


def parse_every(text: str) -> int:
    """An argparse type: a period such as 60, 90s, 15m, 12h or 1d, 1 s to a year."""
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
    try:
        return check_queue_name(text)
    except InvalidQueue as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


parse_count = whole_number(0, 10**9)


def parse_error_code(text: str) -> str:
    """An argparse type: an error code to match last_error with."""
    try:
        check_error_code(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# The one example line of the help text; tests check that it is a valid line the
# handler accepts.
