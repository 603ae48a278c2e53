"""The reference page of codes lists every code queue_core can raise or record, and no other.

The codes are found in the source with ``ast``, independently of how the page
finds them:

* a ``code="..."`` keyword in any call (``raise WrongPath(..., code="no_database")``);
* a class's ``code = "..."`` (the default code of an error class);
* the first argument of ``_Reject``, ``BatchRejected``, ``PermanentFailure``,
  ``TemporaryFailure`` and ``HandlerFailure``, and the third of the store's
  ``_refuse``, as a string or a module constant;
* every module-level ``NAME: Final = "snake_case"`` constant (the codes the
  store and the applications write into ``last_error``);
* the code tables: ``sqlite_engine.ERROR_CODES`` and the table of ``envelope``'s
  docstring.

The page is rendered the way markdown-exec renders it (each executed block
run, its output kept), and a code counts as listed when it opens a row of one
of its tables (`` | `code` | ... ``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import io
import re
from pathlib import Path

import queue_core
from queue_core import envelope
from queue_core.engines import sqlite as sqlite_engine

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "codes.md"
PACKAGE = Path(queue_core.__file__).resolve().parent
SNAKE = re.compile(r"[a-z]+(?:_[a-z0-9]+)+|[a-z]+")
CODE_FIRST = {"_Reject", "BatchRejected", "PermanentFailure", "TemporaryFailure", "HandlerFailure"}
# a Final snake_case constant that is not a code: name -> why
NOT_CODES: dict[str, str] = {"DEFAULT_QUEUE": "the name of the queue every database has"}


def _called(node: ast.Call) -> str:
    return getattr(node.func, "id", "") or getattr(node.func, "attr", "")


def codes_in_source() -> dict[str, set[str]]:
    """Every code in queue_core's source, with the places it was found."""
    found: dict[str, set[str]] = {}

    def add(code: object, where: str) -> None:
        if isinstance(code, str):
            assert SNAKE.fullmatch(code), f"{where}: {code!r} does not look like a code"
            found.setdefault(code, set()).add(where)

    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        name = path.relative_to(PACKAGE.parent).as_posix()
        constants = {}
        for node in tree.body:
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                    and "Final" in ast.unparse(node.annotation)):
                constants[node.target.id] = node.value.value
                if SNAKE.fullmatch(node.value.value) and node.target.id not in NOT_CODES:
                    add(node.value.value, f"{name}:{node.lineno} {node.target.id}")

        def value(node: ast.expr) -> object:
            if isinstance(node, ast.Constant):
                return node.value
            if isinstance(node, ast.Name):
                return constants.get(node.id)
            return None

        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "code":
                        add(value(keyword.value), f"{name}:{node.lineno} code=")
                if _called(node) in CODE_FIRST and node.args:
                    add(value(node.args[0]), f"{name}:{node.lineno} {_called(node)}")
                if _called(node) == "_refuse" and len(node.args) > 2:
                    add(value(node.args[2]), f"{name}:{node.lineno} _refuse")
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    target = (item.targets[0] if isinstance(item, ast.Assign) else
                              item.target if isinstance(item, ast.AnnAssign) else None)
                    if isinstance(target, ast.Name) and target.id == "code" and item.value is not None:
                        add(value(item.value), f"{name}:{item.lineno} class {node.name}")
    for sqlite_name, code, _ in sqlite_engine.ERROR_CODES:
        add(code, f"sqlite_engine.ERROR_CODES {sqlite_name}")
    for code in re.findall(r"^``([a-z0-9_]+)``", envelope.__doc__ or "", re.M):
        add(code, "envelope's table")
    return found


@functools.lru_cache(maxsize=1)
def rendered_page() -> str:
    """The page as markdown-exec makes it: each ```python exec="on"``` block replaced by its output."""
    text = PAGE.read_text(encoding="utf-8")
    parts = re.split(r'^```python exec="on"[^\n]*\n(.*?)^```$', text, flags=re.M | re.S)
    out = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            out.append(part)
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile(part, f"{PAGE.name} block {index // 2 + 1}", "exec"), {"__name__": "codes_page"})
        out.append(buffer.getvalue())
    return "".join(out)


def codes_on_page() -> frozenset[str]:
    return frozenset(re.findall(r"^\| `([a-z0-9_]+)` \|", rendered_page(), re.M))


def test_the_source_scan_finds_the_codes_it_must() -> None:
    found = codes_in_source()
    # one of each way a code is written, so that a blind scan cannot pass
    for code in ("no_database", "invalid_input", "duplicate_key", "invalid_payload", "handler_error",
                 "lease_expired", "corrupt", "store_closed", "sqlite_too_old", "database_busy"):
        assert code in found, code


def test_every_code_in_queue_core_is_on_the_reference_page() -> None:
    found, listed = codes_in_source(), codes_on_page()
    missing = {code: sorted(places) for code, places in found.items() if code not in listed}
    assert missing == {}, f"codes missing from {PAGE.relative_to(ROOT)}: {missing}"


def test_the_page_lists_no_code_that_queue_core_does_not_have() -> None:
    stale = codes_on_page() - set(codes_in_source())
    assert stale == set(), f"{PAGE.relative_to(ROOT)} lists codes queue_core does not have: {sorted(stale)}"


def test_the_envelope_chapter_links_to_the_reference_instead_of_repeating_it() -> None:
    chapter = (ROOT / "docs" / "envelope.md").read_text(encoding="utf-8")
    assert "reference/codes.md" in chapter
    assert "EXAMPLES = [" not in chapter, "the table of every rejection code lives on the reference page"
