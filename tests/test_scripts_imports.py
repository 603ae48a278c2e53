"""scripts/ imports the proof machinery (proof/), never the test suite (tests/).

A script runs from a clean checkout with the package and proof/ alone; what it
shares with the tests lives in proof/ (the throwaway PostgreSQL server,
proof.postgres_cluster). Every scripts/*.py is read with ``ast``: an
``import tests...``, a ``from tests... import``, or a module of tests named in
a string (``importlib.import_module("tests.x")``) fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"

# (script, why it still imports tests). Remove a line when the import is gone:
# the test fails on a listed script that no longer imports tests.
KNOWN: tuple[tuple[str, str], ...] = ()


def imports_of_tests(source: str) -> list[str]:
    """Each place where ``source`` imports the test suite, as ``line N: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("tests."):
            names = [node.value] if node.value.replace(".", "").replace("_", "").isalnum() else []
        found += [f"line {node.lineno}: {name}" for name in names if name == "tests" or name.startswith("tests.")]
    return found


def test_the_scripts_are_read() -> None:
    assert {"bench.py", "netcut.py", "chaos.py"} <= {path.name for path in SCRIPTS.glob("*.py")}


@pytest.mark.parametrize("script", sorted(path.name for path in SCRIPTS.glob("*.py")))
def test_a_script_imports_nothing_of_the_tests(script: str) -> None:
    found = imports_of_tests((SCRIPTS / script).read_text(encoding="utf-8"))
    if script in dict(KNOWN):
        assert found, f"scripts/{script} no longer imports tests: remove it from KNOWN"
    else:
        assert found == [], f"scripts/{script} imports the test suite: {found}"


@pytest.mark.parametrize("source", [
    "import tests.postgres_server",
    "from tests.postgres_server import Cluster",
    "from tests import support",
    "import os, tests",
    "def main():\n    from tests.support import until\n",
    "import importlib\nimportlib.import_module('tests.postgres_server')\n",
])
def test_an_import_of_the_tests_is_found(source: str) -> None:  # negative controls
    assert imports_of_tests(source)


@pytest.mark.parametrize("source", [
    "from proof.postgres_cluster import Cluster", "import testsuite", "from .tests import x",
    "print('tests. are run by make test')",
])
def test_what_is_not_an_import_of_the_tests_is_not_found(source: str) -> None:
    assert imports_of_tests(source) == []
