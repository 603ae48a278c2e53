"""The "Run them" command under every proof table runs exactly the tests it names.

A test id too long for its line is selected with ``pytest -k`` and a keyword
(docs_support.proof.keyword). Here real pytest collects with those keywords:
for every test of the suite whose id would not fit, the keywords of its file
select exactly the long tests of that file, no other.
"""

from __future__ import annotations

import ast
import json
import os
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


def selected(expressions: dict[str, str], tmp_path: Path) -> set[str]:
    """What each file's expression selects in that file, with pytest's own ``-k`` matching."""
    out = tmp_path / "selected.txt"
    env = {**os.environ, "QUEUE_CORE_KEYWORDS": json.dumps(expressions), "QUEUE_CORE_KEYWORDS_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", "-p", "no:xdist",
         "-p", "tests.keyword_probe", *expressions],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("[")[0] for line in out.read_text(encoding="utf-8").splitlines()}


@pytest.mark.slow
def test_each_keyword_selects_exactly_its_long_tests(tmp_path: Path) -> None:
    files = long_tests()
    assert files, "no test id is too long for a line: nothing to select with -k"
    expressions = {f"tests/{file}": " or ".join(keyword(file, name) for name in names)
                   for file, names in files.items()}
    expected = {f"tests/{file}::{name}" for file, names in files.items() for name in names}
    assert selected(expressions, tmp_path) == expected


@pytest.mark.slow
def test_the_keyword_probe_sees_a_keyword_that_selects_too_much(tmp_path: Path) -> None:
    # the probe's negative control: an expression that matches every test of
    # its file is reported as such, not filtered to the expected ones
    file = "tests/test_proof_commands.py"
    assert selected({file: "test"}, tmp_path) == {
        f"{file}::{name}" for name in ("test_each_keyword_selects_exactly_its_long_tests",
                                       "test_the_keyword_probe_sees_a_keyword_that_selects_too_much",
                                       "test_the_command_fits_its_lines_and_names_every_test")}


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
