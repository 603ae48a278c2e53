"""The conformance suite: every test here that reaches the ``engine`` fixture (directly,
or through ``store``) runs on each engine, SQLite and PostgreSQL, by default.

A test opts out explicitly: ``@pytest.mark.one_engine`` when it never reaches
engine code (refused before any transaction, or a pure value), or by taking
``db``, the SQLite file, when it is about that file. ``test_engine_coverage.py``
fails on any other test of this folder that would run on one engine only.
"""

from __future__ import annotations

import pytest

from .coverage import ENGINES, OPT_OUT, SQLITE_FILE


def _parametrizes_engine_itself(metafunc: pytest.Metafunc) -> bool:
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
        if "engine" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return True
    return False


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if ("engine" in metafunc.fixturenames and SQLITE_FILE not in metafunc.fixturenames
            and metafunc.definition.get_closest_marker(OPT_OUT) is None
            and not _parametrizes_engine_itself(metafunc)):  # its own list: the guard judges it
        metafunc.parametrize("engine", list(ENGINES), indirect=True)
