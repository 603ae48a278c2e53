"""The "Run them" command under every proof table runs exactly the tests it names.

A test id too long for its line is selected with ``pytest -k`` and a keyword
(docs_support.proof.keyword). Here real pytest collects with those keywords:
for every test of the suite whose id would not fit, the keywords of its file
select exactly the long tests of that file, no other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from docs_support.proof import WIDTH, command, keyword

pytestmark = [pytest.mark.one_engine, pytest.mark.timeout(300)]

TESTS = Path(__file__).resolve().parent


def long_tests() -> dict[str, list[str]]:
    """File -> its test functions whose id does not fit on a line of the command."""
    found: dict[str, list[str]] = {}
    for path in sorted([*TESTS.glob("test_*.py"), *TESTS.glob("conformance/test_*.py")]):
        file = path.relative_to(TESTS).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                if len(f"    tests/{file}::{node.name} \\") > WIDTH:
                    found.setdefault(file, []).append(node.name)
    return found


def collected(args: list[str]) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", *args],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {line.split("[")[0] for line in out.stdout.splitlines() if "::" in line}


@pytest.mark.slow
def test_each_keyword_selects_exactly_its_long_tests() -> None:
    files = long_tests()
    assert files, "no test id is too long for a line: nothing to select with -k"
    for file, names in files.items():
        expression = " or ".join(keyword(file, name) for name in names)
        assert collected([f"tests/{file}", "-k", expression]) == {f"tests/{file}::{n}" for n in names}, file


def test_the_command_fits_its_lines_and_names_every_test() -> None:
    files = long_tests()
    ids = ["test_protocol.py::test_lease_is_immutable", "test_batch.py"]
    ids += [f"{file}::{name}" for file, names in files.items() for name in names]
    text = command(ids)
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    # a conformance file named by its name alone is shown with its folder
    assert "tests/conformance/test_protocol.py::test_lease_is_immutable" in text
    assert "tests/conformance/test_batch.py \\" not in text
    for file, names in files.items():
        assert all(keyword(file, name) in text for name in names)
    # bash removes a backslash-newline, also inside the double quotes of -k
    joined = text.replace("\\\n", "")
    for file, names in files.items():
        found = re.search(rf'tests/{re.escape(file)}\s+-k "([^"]*)"', joined)
        assert found is not None, file
        assert found[1].split()[::2] == [keyword(file, name) for name in names]
