"""The start page and the overview say what is true of the code they introduce.

Their executed blocks and console sessions run in ``pytest docs/start.md
docs/overview.md`` and ``tests/test_docs_console.py``; this holds what those
cannot: the batch the start page writes is the demo's, the requirements the
pages state are the package's, and a new reader meets "Start here" first.
"""

from __future__ import annotations

import contextlib
import io
import re
import sqlite3
import tomllib
from pathlib import Path

import pytest

from docs_support.run_here import blocks
from queue_core.app.demo import DEMO_BATCH
from queue_core.engines.sqlite import MIN_SQLITE

from .console import sessions

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
START = (DOCS / "start.md").read_text(encoding="utf-8")
OVERVIEW = (DOCS / "overview.md").read_text(encoding="utf-8")
INDEX = (DOCS / "index.md").read_text(encoding="utf-8")


def test_the_start_page_writes_the_demos_five_lines_on_the_page() -> None:
    written = [c for block in sessions(START) for c in block if c.content is not None]
    assert [c.line for c in written] == ["cat > batch.jsonl <<'EOF'"]
    assert written[0].content == DEMO_BATCH == (ROOT / "snippets" / "demo.jsonl").read_text(encoding="utf-8")


def test_the_start_pages_session_is_the_readmes() -> None:
    # The same commands as README's session, up to its status.
    (readme,) = sessions((ROOT / "README.md").read_text(encoding="utf-8"))
    shown = [c for block in sessions(START) for c in block if c.content is None and c.line != "queue-core demo"]
    assert shown == readme[:len(shown)]
    assert shown[-1].line == "queue-core status"


def test_the_start_pages_python_runs_in_the_browser_on_the_demos_batch() -> None:
    # One block that shows its source and records its output: it gets Run.
    ((source, why),) = blocks(DOCS / "start.md")
    assert why is None, f"the start page's Python would say: runs on your machine, {why}"
    batch = re.search(r'BATCH = """\\\n(.*?)"""', source, re.S)
    assert batch is not None and batch[1] == DEMO_BATCH


def _clone_block() -> str:
    (code,) = re.findall(r'## 1\. Clone and install\n\n```python exec="on"\n(.*?)^```$', START, re.S | re.M)
    return code


def _printed(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/start.md", "exec"), {})
    return out.getvalue()


def test_the_clone_line_uses_the_repository_address_when_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REPO_URL", "https://example.invalid/owner/queue_core/")
    printed = _printed(_clone_block())
    assert "git clone https://example.invalid/owner/queue_core queue_core && cd queue_core\n" in printed
    assert "<this repository>" not in printed
    assert "python3 -m venv .venv && .venv/bin/pip install .\n" in printed


def test_without_an_address_the_clone_line_says_what_to_fill_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REPO_URL", raising=False)
    printed = _printed(_clone_block())
    assert "git clone <this repository> queue_core && cd queue_core\n" in printed
    assert "`<this repository>`: the address or folder you got queue_core from" in printed


def test_the_stated_requirements_are_the_packages() -> None:
    python = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert python == ">=3.11"
    needed = f"SQLite {MIN_SQLITE[0]}.{MIN_SQLITE[1]} or newer"
    for name, text in (("start.md", START), ("index.md", INDEX), ("overview.md", OVERVIEW)):
        flat = " ".join(text.split())
        assert needed in flat, f"{name} does not say {needed}"
        if name != "overview.md":
            assert f"Python 3.11 or newer whose `sqlite3` module uses {needed}" in flat, name
    assert "Python 3.11 or newer and nothing else" not in " ".join(INDEX.split())
    assert sqlite3.sqlite_version_info >= MIN_SQLITE  # the suite itself runs on a new enough SQLite


def test_a_new_reader_meets_start_here_first() -> None:
    links = re.findall(r"\]\(([^)#]+\.md)", INDEX)
    assert links[0] == "start.md"
    where_next = START.split("## Where next", 1)[1]
    assert [link for link in re.findall(r"\]\(([^)#]+\.md)", where_next)] == [
        "overview.md", "problem.md", "own-program.md", "lab.md", "compared.md"]


def test_the_schema_reference_shows_every_schema_file_whole() -> None:
    """The overview names the tables and links here; the reference shows each file whole.

    Every numbered migration of each engine, in order (a new one is found by the
    glob), and every file of the reference application's migration line.
    """
    schema_page = (DOCS / "reference" / "schema.md").read_text(encoding="utf-8")
    engines = ROOT / "queue_core" / "engines"
    migrations = [
        sorted(path.relative_to(ROOT).as_posix() for path in (engines / folder).glob("*.sql"))
        for folder in ("sqlite_migrations", "postgres_migrations")
    ]
    assert all(len(files) >= 2 for files in migrations), migrations
    ledgers = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "queue_core" / "app").rglob("*.sql"))
    assert "queue_core/app/ledger_migrations/sqlite/0001_effects.sql" in ledgers
    assert all(name.startswith("queue_core/app/ledger_migrations/") for name in ledgers), ledgers
    for name in [*migrations[0], *migrations[1], *ledgers]:
        assert f'```sql title="{name}"\n--8<-- "{name}"\n```' in schema_page, name
    for files in migrations:
        places = [schema_page.index(f'--8<-- "{name}"') for name in files]
        assert places == sorted(places), files
    # the overview includes only the single sources of docs/includes/, no schema file
    included = re.findall(r'^--8<-- "([^"]+)"$', OVERVIEW, re.M)
    assert included and all(name.startswith("docs/includes/") for name in included), included
    assert "(reference/schema.md)" in OVERVIEW


def test_the_overview_draws_the_one_state_machine_with_expiry_as_the_next_claim() -> None:
    # The one canonical diagram, included; no diagram of its own. It is drawn by hand
    # (docs_support/state_machine.py; tests/test_state_machine.py holds its layout).
    from docs_support import state_machine

    assert '--8<-- "docs/includes/state-machine.md"' in OVERVIEW
    assert "```mermaid" not in OVERVIEW
    for layout in state_machine.LAYOUTS:
        kinds = {node.id: node.kind for node in layout.nodes}
        moves = {(e.source, kinds[e.target] if kinds[e.target] != "state" else e.target): e for e in layout.edges}
        assert ("leased", "leased") in moves and ("leased", "dead") in moves  # what the next claim does
        assert "ran out" in " ".join(moves[("leased", "leased")].lines)
        assert "ran out" in " ".join(moves[("leased", "dead")].lines)
        assert ("dead", "ready") in moves
        assert ("ready", "end") in moves and ("dead", "end") in moves  # purge
        for edge in layout.edges:
            if (edge.source, edge.target) == ("leased", "ready"):  # a failure or a release, never expiry
                assert not any("expir" in line or "ran out" in line for line in edge.lines), edge.lines
    # the overview's table of moves has a row for each kind of move the diagram draws
    for move in ("| leased → ready | a release", "| ready or dead → removed | an operator's `purge`",
                 "| dead → ready | a redrive", "| leased → leased | a claim finds the lease expired"):
        assert move in OVERVIEW, move
