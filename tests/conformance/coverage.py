"""Which tests of the conformance suite would run on one engine only, and were not told to.

A test of ``tests/conformance/`` that reaches the ``engine`` fixture (directly,
or through ``store`` and the like) runs once per engine of ``ENGINES``. It runs
on one engine only where it says so: the marker ``one_engine`` (it never
reaches engine code: refused before any transaction, or a pure value), or by
taking ``db``, the SQLite file itself (a test about that file). Anything else
that runs on fewer engines is a blind spot, and ``blind_spots`` names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ENGINES = ("sqlite", "postgresql")
OPT_OUT = "one_engine"  # the marker (pyproject.toml)
DEFAULT = "sqlite"  # the engine fixture's value where it is not parametrized (tests/conftest.py)
SQLITE_FILE = "db"  # the fixture of the SQLite file: a test that takes it is about that file


@dataclass(frozen=True)
class Case:
    """One collected test item, as far as engines go."""

    function: str  # the node id without its parameters: one test function
    uses_engine: bool  # "engine" is among its fixtures
    engine: str | None  # the engine this item runs on, when "engine" is parametrized
    opted_out: bool  # marked one_engine
    takes_sqlite_file: bool  # takes db


def case(item: Any) -> Case:
    """A ``pytest.Item`` as a ``Case``."""
    fixtures = set(getattr(item, "fixturenames", ()))
    params = getattr(getattr(item, "callspec", None), "params", {})
    return Case(function=item.nodeid.split("[")[0], uses_engine="engine" in fixtures,
                engine=params.get("engine"), opted_out=item.get_closest_marker(OPT_OUT) is not None,
                takes_sqlite_file=SQLITE_FILE in fixtures)


def blind_spots(cases: Iterable[Case]) -> list[str]:
    """Each test function that takes ``engine``, is not opted out, and misses an engine of ENGINES."""
    engines: dict[str, set[str]] = {}
    exempt: set[str] = set()
    for one in cases:
        if not one.uses_engine:
            continue
        engines.setdefault(one.function, set()).add(one.engine or DEFAULT)
        if one.opted_out or one.takes_sqlite_file:
            exempt.add(one.function)
    found = []
    for function, seen in sorted(engines.items()):
        missing = [name for name in ENGINES if name not in seen]
        if missing and function not in exempt:
            found.append(f"{function} does not run on {', '.join(missing)}: let it, or mark it "
                         f"@pytest.mark.{OPT_OUT} if it never reaches engine code")
    return found


# As a pytest plugin (``-p tests.conformance.coverage``): writes every collected
# item of this folder as a Case, in JSON, to the file QUEUE_CORE_ENGINE_CASES names.
def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    import json
    import os
    from dataclasses import asdict
    from pathlib import Path

    target = os.environ.get("QUEUE_CORE_ENGINE_CASES")
    if target:
        here = Path(__file__).resolve().parent
        cases = [asdict(case(item)) for item in items if here in Path(str(item.path)).resolve().parents]
        Path(target).write_text(json.dumps(cases), encoding="utf-8")
