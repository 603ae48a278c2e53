"""The one "Proof" format of the site: a page's claims and the tests that hold them.

A page ends its chapter with::

    ```python exec="on"
    from docs_support.proof import table
    print(table([
        ("a stale generation cannot complete", "test_protocol.py::test_old_generation_cannot_complete"),
        ("the batched path, all of it", "test_batch.py"),  # a whole file
    ]))
    ```

At build time (and under pytest) every named test is looked up in its file:
a renamed or deleted test fails the build instead of leaving a dead claim.
Each test id links to its line in the repository when ``REPO_URL`` is set
(the Pages workflow sets it), and the table is followed by the command that
runs exactly those tests.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"  # the repository's test suite


def _line_of(file: str, name: str) -> int:
    path = TESTS / file
    if not path.is_file():
        raise AssertionError(f"proof names tests/{file}, which does not exist")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.name == name
        ):
            return node.lineno
    raise AssertionError(f"proof names tests/{file}::{name}, which does not exist")


def cell(test: str) -> str:
    """A test id for a table cell: checked to exist, linked to its line when ``REPO_URL`` is set."""
    file, _, name = test.partition("::")
    if name:
        anchor = f"#L{_line_of(file, name.split('[')[0])}"
    elif (TESTS / file).is_file():
        anchor = ""  # a whole test file
    else:
        raise AssertionError(f"proof names tests/{file}, which does not exist")
    repo = os.environ.get("REPO_URL", "").rstrip("/")
    label = f"`tests/{test}`"
    return f"[{label}]({repo}/blob/main/tests/{file}{anchor})" if repo else label


def table(rows: list[tuple[str, str]]) -> str:
    """Markdown: a claim | test table, each test checked to exist, and the command that runs them."""
    if not rows:
        raise AssertionError("a proof needs at least one test")
    lines = ["| claim | test |", "| --- | --- |"]
    ids: list[str] = []
    for claim, test in rows:
        lines.append(f"| {claim} | {cell(test)} |")
        if f"tests/{test}" not in ids:
            ids.append(f"tests/{test}")
    # brackets are shell patterns
    quoted = [f"'{test}'" if "[" in test else test for test in ids]
    command = " \\\n    ".join([".venv/bin/python -m pytest", *quoted])
    return "\n".join(lines) + f"\n\nRun them:\n\n```bash\n{command}\n```\n"
