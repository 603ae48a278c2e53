"""The crashing child ships with the reference application, and takes its options as one value."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from queue_core.app.crash_child import ChildOptions, child_command
from queue_core.values import Lease

PACKAGE = Path(__file__).resolve().parent.parent / "queue_core"
LEASE = Lease("E0001", 1, 1, 1002, 7)


def importers_of_the_crash_child(root: Path = PACKAGE) -> set[str]:
    """The modules of queue_core/ that import the crash child (by any spelling)."""
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if any(name.endswith("crash_child") for name in names):
                found.add(path.relative_to(root).as_posix())
    return found


def test_only_the_app_imports_the_crash_child() -> None:
    assert not (PACKAGE / "testing" / "child.py").exists()
    assert importers_of_the_crash_child() == {"app/demo.py"}


def test_an_import_of_the_crash_child_outside_the_app_is_found(tmp_path: Path) -> None:  # negative control
    (tmp_path / "cli.py").write_text("from .app.crash_child import run_crashing\n")
    (tmp_path / "other.py").write_text("from .app import crash_child\n")
    assert importers_of_the_crash_child(tmp_path) == {"cli.py", "other.py"}


@pytest.mark.parametrize("field, value, error", [
    ("now", -1, ValueError), ("now", "1000", TypeError), ("now", True, TypeError),
    ("hit", 0, ValueError), ("count", 0, ValueError), ("lease_seconds", 2.5, TypeError),
    ("how", "kill", ValueError), ("leases", "E0001", TypeError), ("event_ids", "E0001", TypeError),
    ("categories", "toy", TypeError), ("lease", "E0001", TypeError), ("leases", ["E0001"], TypeError),
])
def test_a_bad_option_is_refused_with_its_name(field: str, value: object, error: type[Exception]) -> None:
    fields = {"now": 1000, field: value}
    with pytest.raises(error, match=field):
        ChildOptions(**fields)  # type: ignore[arg-type]


def test_options_and_keywords_make_the_same_command() -> None:
    given = child_command("q.sqlite3", "complete", lease=LEASE, now=1000, point="complete.after_effect",
                          categories=["toy"])
    options = ChildOptions(now=1000, point="complete.after_effect", lease=LEASE, categories=("toy",))
    assert child_command("q.sqlite3", "complete", options) == given
    assert given[2:6] == ["queue_core.app.crash_child", "complete", "q.sqlite3", "E0001"]


def test_options_with_keywords_or_without_now_are_refused() -> None:
    with pytest.raises(TypeError, match="not both"):
        child_command("q.sqlite3", "claim", ChildOptions(now=1000), trace=True)
    with pytest.raises(TypeError, match="now="):
        child_command("q.sqlite3", "claim", trace=True)
    with pytest.raises(TypeError, match="'nope'"):
        child_command("q.sqlite3", "claim", now=1000, nope=1)  # type: ignore[call-arg]
