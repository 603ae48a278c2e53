"""The one "Proof" format of the site: a page's claims and the tests that hold them.

A page ends its chapter with::

    ```python exec="on"
    from docs_support.proof import table
    print(table([
        ("a stale generation cannot complete", "test_protocol.py::test_old_generation_cannot_complete"),
        ("the batched path, all of it", "test_batch.py"),  # a whole file
    ]))
    ```

A file of the conformance suite (``tests/conformance/``) may be named by its
name alone, as above: ``resolve`` finds its folder, and the table and the
command show its whole path. At build time (and under pytest) every named test is looked up in its file:
a renamed or deleted test fails the build instead of leaving a dead claim.
Each test id links to its line in the repository when ``REPO_URL`` is set
(the Pages workflow sets it), and the table is followed by the command that
runs exactly those tests, with the step that installs pytest first: the
``.venv`` that ``make serve`` and ``make site`` make holds the documentation's
requirements only, and ``make test`` adds the test requirements.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"  # the repository's test suite
# Folders of the suite a page may name a test file of by its name alone: the
# conformance suite (every engine alike) lives in tests/conformance/.
FOLDERS = ("", "conformance/")


def resolve(test: str) -> str:
    """``test_protocol.py::name`` -> ``conformance/test_protocol.py::name``: its path under tests/."""
    file, sep, name = test.partition("::")
    found = [folder + file for folder in FOLDERS if (TESTS / (folder + file)).is_file()]
    if len(found) > 1:
        raise AssertionError(f"proof names {file}, which is ambiguous: {found}")
    return f"{found[0]}{sep}{name}" if found and "/" not in file else test


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
    test = resolve(test)
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


WIDTH = 88  # a line of the command, as its page shows it
PYTEST = ".venv/bin/python -m pytest"
# What a reader runs first: `make serve` installs no pytest into .venv.
RUN_THEM = (
    "Run them: `make test` installs pytest and the test requirements into `.venv`"
    " and runs everything; `make .venv/.test-installed` only installs them. After"
    " either, this runs exactly the tests above:"
)


def _test_names(file: str) -> tuple[str, ...]:
    path = TESTS / file
    return _names_in(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _names_in(path: Path, mtime_ns: int) -> tuple[str, ...]:
    # parsed once per version of the file: a page's proof table asks for each of its tests
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return tuple(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    )


def keyword(file: str, name: str) -> str:
    """The shortest start of ``name``, in whole words, that names no other test of ``file``.

    ``pytest -k`` matches a keyword anywhere in a test's name, its file's name
    and its markers: the keyword is checked against all of them.
    """
    others = [other for other in _test_names(file) if other != name]
    words = name.removeprefix("test_").split("_")
    for count in range(min(3, len(words)), len(words) + 1):
        candidate = "_".join(words[:count])
        if candidate in file or any(candidate in other for other in others):
            continue
        return candidate
    raise AssertionError(f"no keyword selects tests/{file}::{name} alone")


def _keyword_command(file: str, keywords: list[str]) -> str:
    """``pytest tests/FILE -k "a or b ..."``, on lines of at most WIDTH.

    Lines break between keywords with a backslash, which bash removes even
    inside the double quotes, leaving the expression whole.
    """
    lines = [f'{PYTEST} tests/{file} -k "{keywords[0]}']
    if len(f"{lines[0]} \\") > WIDTH:  # a long path (tests/conformance/...): -k on a line of its own
        lines = [f"{PYTEST} tests/{file} \\", f'    -k "{keywords[0]}']
    for word in keywords[1:]:
        if len(f"{lines[-1]} or {word} \\") > WIDTH:
            lines[-1] += " \\"
            lines.append(f"    or {word}")
        else:
            lines[-1] += f" or {word}"
    lines[-1] += '"'
    return "\n".join(lines)


def command(ids: list[str]) -> str:
    """Shell commands that run exactly ``ids`` (``file`` or ``file::name``), no line over WIDTH.

    A test id that would not fit on its line is selected with ``-k`` instead,
    by a keyword that names it alone in its file.
    """
    fitting: list[str] = []
    by_keyword: dict[str, list[str]] = {}
    for test in map(resolve, ids):
        file, _, name = test.partition("::")
        # brackets are shell patterns: quote them
        shown = f"'tests/{test}'" if "[" in test else f"tests/{test}"
        if not name or len(f"    {shown} \\") <= WIDTH:
            fitting.append(shown)
        else:
            by_keyword.setdefault(file, []).append(keyword(file, name.split("[")[0]))
    commands: list[str] = []
    if fitting:
        commands.append(" \\\n    ".join([PYTEST, *fitting]))
    for file, keywords in by_keyword.items():
        commands.append(_keyword_command(file, keywords))
    return "\n".join(commands)


def table(rows: list[tuple[str, str]]) -> str:
    """Markdown: a claim | test table, each test checked to exist, and the command that runs them."""
    if not rows:
        raise AssertionError("a proof needs at least one test")
    lines = ["| claim | test |", "| --- | --- |"]
    ids: list[str] = []
    for claim, named in rows:
        test = resolve(named)
        lines.append(f"| {claim} | {cell(test)} |")
        if test not in ids:
            ids.append(test)
    return "\n".join(lines) + f"\n\n{RUN_THEM}\n\n```bash\n{command(ids)}\n```\n"
