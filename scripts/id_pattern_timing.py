"""How long the slowest id of the maximum length takes to judge, on the id patterns
``create`` accepts, and what the refused shapes would cost.

Run: ``python scripts/id_pattern_timing.py``. For each pattern it tries ids of
``MAX_EVENT_ID_CHARS`` characters built to make a backtracking matcher work
hardest (one character repeated, then one that breaks the match), and prints
the slowest time per pattern and the worst of all accepted ones. A refused
pattern is timed on short ids only (22 characters): the longer ones would not end.
"""

from __future__ import annotations

import re
import time

from queue_core.errors import InvalidQueue
from queue_core.queues import MAX_EVENT_ID_CHARS, check_id_pattern_safe, compile_id_pattern

ACCEPTED = [
    "E[0-9]{4}", "[a-z0-9-]{1,64}", "order-[0-9]+",
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "([0-9]{3}-){2}[0-9]{4}", r"(\d|[0-9a-f])+", "(a|b)*c", "(a|ab)*c",
    # adjacent repeats that overlap: polynomial, not exponential
    ".*.*a", "[a-z]+[a-z]+!", "[a-z]+-[a-z]+-[a-z]+-[0-9]+", "([a-z]{4}-){1,8}",
]
REFUSED = ["(a{1,10}){1,20}", "a*a*a*a*a*b", r"\w+\w+\w+\w+x", ".*.*.*a", r"(a+)+$", "(a*)*b", "(a|a)*b", "(.*a){12}", r"(\w+\s?)+$", "(x+x+)+y"]
FILLERS = "aAxE0-_ .!"


def candidates(length: int) -> list[str]:
    ids = []
    for c in FILLERS:
        for end in "!#b":
            ids.append(c * (length - 1) + end)
        ids.append((c + "-") * (length // 2))
    return ids


def slowest(rule: re.Pattern[str], length: int) -> float:
    worst = 0.0
    for event_id in candidates(length):
        started = time.perf_counter()
        rule.fullmatch(event_id)
        worst = max(worst, time.perf_counter() - started)
    return worst


def main() -> None:
    worst_of_all = 0.0
    for pattern in ACCEPTED:
        check_id_pattern_safe(pattern)  # raises if create would refuse it
        rule = compile_id_pattern(pattern)
        took = slowest(rule, MAX_EVENT_ID_CHARS)
        worst_of_all = max(worst_of_all, took)
        print(f"accepted {pattern!r:70} {took * 1000:9.3f} ms")
    for pattern in REFUSED:
        try:
            check_id_pattern_safe(pattern)
        except InvalidQueue as exc:
            took = slowest(re.compile(pattern), 22)
            print(f"refused  {pattern!r:70} {took * 1000:9.3f} ms at 22 chars ({exc.code})")
        else:
            raise SystemExit(f"{pattern!r} was accepted")
    print(f"worst accepted, {MAX_EVENT_ID_CHARS} characters: {worst_of_all * 1000:.3f} ms")


if __name__ == "__main__":
    main()
