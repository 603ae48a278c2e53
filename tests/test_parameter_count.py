"""No function in queue_core takes more than 8 parameters.

A function that needs more takes a configuration instead (``WorkerConfig``
for the worker, ``ChildOptions`` for the crash child). Counted from the
source with ``ast``: every parameter but ``self`` and ``cls``, with ``*args``
and ``**kwargs`` one each.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "queue_core"
MOST = 8

# Functions over the limit in modules being rewritten by another change; each
# must still be over it (a stale entry fails), and is to leave this list.
KNOWN: dict[str, int] = {}


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    if named and named[0].arg in ("self", "cls"):
        named = named[1:]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def over_the_limit(source: str, module: str) -> dict[str, int]:
    """``{"module:qualified.name": count}`` of the functions of ``source`` over ``MOST``."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                if (count := parameter_count(child)) > MOST:
                    found[f"{module}:{name}"] = count
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def scan(root: Path = PACKAGE) -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root.parent).with_suffix("").as_posix().replace("/", ".")
        found.update(over_the_limit(path.read_text(encoding="utf-8"), module))
    return found


FOUND = scan()


def test_no_function_in_queue_core_takes_more_than_8_parameters() -> None:
    new = {name: count for name, count in FOUND.items() if name not in KNOWN}
    assert new == {}, f"over {MOST} parameters (take a configuration instead): {new}"


def test_every_known_exception_is_still_over_the_limit() -> None:
    stale = sorted(set(KNOWN) - set(FOUND))
    assert stale == [], f"no longer over {MOST} parameters: remove from KNOWN: {stale}"


def test_a_function_with_9_parameters_is_reported() -> None:  # the negative control
    source = (
        "def fine(a, b, c, d, e, f, g, h): pass\n"
        "def nine(a, b, c, d, e, f, g, h, i): pass\n"
        "def starred(a, b, c, d, e, f, g, *args, **kwargs): pass\n"
        "def keywords(a, *, b, c, d, e, f, g, h, i): pass\n"
        "class C:\n"
        "    def method(self, a, b, c, d, e, f, g, h): pass\n"
        "    def too_many(self, a, b, c, d, e, f, g, h, i): pass\n"
        "    @classmethod\n"
        "    def made(cls, a, b, c, d, e, f, g, h): pass\n"
        "def outer():\n"
        "    async def inner(a, b, c, d, e, f, g, h, /, i): pass\n"
    )
    assert over_the_limit(source, "m") == {
        "m:nine": 9, "m:starred": 9, "m:keywords": 9, "m:C.too_many": 9, "m:outer.inner": 9,
    }


def test_the_scan_reads_the_real_package() -> None:
    assert len(list(PACKAGE.rglob("*.py"))) > 20
    source = (PACKAGE / "worker.py").read_text(encoding="utf-8")
    assert "def work(" in source and "queue_core.worker:work" not in over_the_limit(source, "queue_core.worker")
