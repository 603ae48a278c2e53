"""The promise: one source, the same words everywhere, and a proof for every clause.

``docs/includes/promise.md`` is the only text of the promise. The site's pages
include it; README.md carries a copy that ``scripts/sync_promise.py``
generates. A clause is a **bold** phrase of that text, and "Key questions"
gives each clause a row naming the tests that prove it. The tests below keep
all of this true, each with a negative control (a drifted copy, a missing
include, a clause without a row); the last two prove the clauses about the
promise's boundary that no other test holds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sqlite3
from pathlib import Path
from types import ModuleType

from queue_core import Handler, Message, ModelClock, Outcome, Store, TemporaryFailure, Tx, ledger

ROOT = Path(__file__).resolve().parent.parent
PROMISE_SOURCE = "docs/includes/promise.md"
PROMISE = (ROOT / PROMISE_SOURCE).read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")
PAGES = ["docs/index.md", "docs/questions.md", "docs/glossary.md"]
LINE = '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'


def flat(text: str) -> str:
    return " ".join(text.split())


def sync_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_promise", ROOT / "scripts" / "sync_promise.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clauses(promise: str) -> list[str]:
    """The bold phrases of the promise, each on one line: its clauses."""
    text = "\n".join(line.removeprefix(">").strip() for line in promise.splitlines())
    return [flat(phrase) for phrase in re.findall(r"\*\*(.+?)\*\*", text, re.S)]


def includes(markdown: str, source: str) -> bool:
    """Whether ``markdown`` includes ``source`` with a line of its own, outside code blocks."""
    fenced = False
    for line in markdown.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.strip() == f'--8<-- "{source}"':
            return True
    return False


def clause_rows(questions: str) -> list[str]:
    """The first cells of the table "The promise, clause by clause" prints, by running its block."""
    section = questions.split("## The promise, clause by clause", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r'```python exec="on"\n(.*?)```', section, re.S)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/questions.md", "exec"), {})  # noqa: S102 - the page's own block
    rows = [line for line in out.getvalue().splitlines() if line.startswith("| ")]
    return [row.split(" | ", 1)[0].removeprefix("| ") for row in rows[2:]]  # after header and rule


def missing_rows(promise: str, rows: list[str]) -> list[str]:
    return [clause for clause in clauses(promise) if clause not in rows]


# ------------------------------------------------------------ one source

def test_readme_carries_the_generated_copy_of_the_promise() -> None:
    script = sync_script()
    assert README == script.synced(README, PROMISE), "run python scripts/sync_promise.py"
    copy = README.split(script.START, 1)[1].split(script.END, 1)[0]
    assert clauses(copy) == clauses(PROMISE)
    assert "](docs/questions.md#the-promise-clause-by-clause)" in copy  # links point into docs/


def test_a_drifted_readme_copy_is_detected() -> None:  # negative control
    script = sync_script()
    drifted = README.replace("commits at most once", "commits exactly once", 1)
    assert drifted != README
    assert script.synced(drifted, PROMISE) != drifted
    assert script.synced(drifted, PROMISE) == README  # and the script puts it right
    without_markers = README.replace(script.START, "")
    try:
        script.synced(without_markers, PROMISE)
    except ValueError:
        pass
    else:
        raise AssertionError("a README without its markers was accepted")


def test_the_script_checks_without_writing() -> None:
    assert sync_script().main(["--check"]) == 0


def test_the_pages_include_the_promise_from_its_source() -> None:
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert includes(text, PROMISE_SOURCE), f"{page} does not include {PROMISE_SOURCE}"


def test_an_include_in_a_code_block_or_none_is_not_an_include() -> None:  # negative control
    line = f'--8<-- "{PROMISE_SOURCE}"'
    assert includes(f"# Page\n\n{line}\n", PROMISE_SOURCE)
    assert includes(f"Term\n:   The promise:\n\n    {line}\n", PROMISE_SOURCE)
    assert not includes(f"# Page\n\n```markdown\n{line}\n```\n", PROMISE_SOURCE)
    assert not includes("# Page\n\n> the promise, restated in other words\n", PROMISE_SOURCE)
    assert not includes(f"Say {line} in a sentence.\n", PROMISE_SOURCE)


def test_the_readme_states_the_scope_and_power_loss_as_the_site_does() -> None:
    scope = flat((ROOT / "docs" / "includes" / "scope.md").read_text(encoding="utf-8"))
    assert scope in flat(README)
    power = flat((ROOT / "docs" / "includes" / "power-loss.md").read_text(encoding="utf-8"))
    for fact in ["Power cuts are measured, not assumed: on a filesystem that drops every write nobody "
                 "synced, the queue at its default `synchronous = FULL` lost nothing it had acknowledged",
                 "That model is the page cache's view; a drive that acknowledges a flush it did not do, "
                 "its own cache and torn sectors are not modelled"]:
        assert fact in power, "docs/includes/power-loss.md changed: copy its facts into README.md"
        assert fact in flat(README), fact
    assert "evidence/power-cuts.json" in README and (ROOT / "evidence" / "power-cuts.json").is_file()


def test_no_page_of_the_promise_says_power_loss_is_untested() -> None:
    for page in ["README.md", *PAGES]:
        text = flat((ROOT / page).read_text(encoding="utf-8"))
        assert not re.search(r"power (loss|cut)[^.]{0,60}\bnot (tested|measured)", text, re.I), page
        assert "one SQLite file's transaction" not in text, page


# ------------------------------------------------------ clause by clause

def test_the_promise_has_its_clauses_and_defines_its_words() -> None:
    found = clauses(PROMISE)
    assert len(found) >= 10 and len(found) == len(set(found)), found
    text = flat(PROMISE)
    assert "(queue, event_id)" in text and "*event*" in text and "*message*" in text
    assert "possibly nothing" in text and "claim token" in text
    assert not re.search(r"(?<!claim )\btoken\b", text), "say claim token, never token alone"


def test_every_clause_has_a_row_in_key_questions() -> None:
    questions = (ROOT / "docs" / "questions.md").read_text(encoding="utf-8")
    rows = clause_rows(questions)
    assert missing_rows(PROMISE, rows) == []
    assert [row for row in rows if row not in clauses(PROMISE)] == [], "a row for no clause"


def test_a_clause_without_a_row_is_detected() -> None:  # negative control
    questions = (ROOT / "docs" / "questions.md").read_text(encoding="utf-8")
    rows = clause_rows(questions)
    assert missing_rows(PROMISE + "\n> **a promise nobody proved**\n", rows) == ["a promise nobody proved"]
    assert missing_rows(PROMISE, rows[1:]) == [rows[0]]


# --------------------------------------------- the boundary, proved here

def _store(tmp_path: Path, clock: ModelClock) -> Store:
    store = Store(tmp_path / "queue.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue(LINE)
    return store


def test_a_call_outside_the_transaction_happens_again_on_the_retry(tmp_path: Path) -> None:
    clock = ModelClock(1000)
    calls: list[str] = []  # what another system received: outside the transaction

    def notify_then_pay(tx: Tx, message: Message) -> None:
        calls.append(message.event_id)  # the call happens now, whatever follows
        Handler()(tx, message)  # the effect, in the completion's transaction
        if len(calls) == 1:
            raise TemporaryFailure("timeout")  # the first attempt is refused: rolled back

    with _store(tmp_path, clock) as store:
        first = store.complete(store.claim(lease_seconds=2), notify_then_pay)
        assert first.outcome is Outcome.RETRY
        assert ledger.effects(store) == [] and calls == ["E0001"]  # the effect undone, the call not
        clock.set(store.message("E0001").available_at)
        assert store.complete(store.claim(lease_seconds=2), notify_then_pay).outcome is Outcome.DONE
        assert ledger.effects(store) == [("E0001", "book", 10000)]  # one effect
        assert calls == ["E0001", "E0001"]  # two calls


def test_a_write_to_another_database_stays_when_the_completion_rolls_back(tmp_path: Path) -> None:
    clock = ModelClock(1000)
    other = sqlite3.connect(tmp_path / "other.sqlite3", isolation_level=None)
    other.execute("CREATE TABLE sent (event_id TEXT)")

    def write_both_then_refuse(tx: Tx, message: Message) -> None:
        Handler()(tx, message)  # in the queue's database: inside the promise
        other.execute("INSERT INTO sent VALUES (?)", (message.event_id,))  # another database: outside
        raise TemporaryFailure("timeout")

    try:
        with _store(tmp_path, clock) as store:
            assert store.complete(store.claim(lease_seconds=2), write_both_then_refuse).outcome is Outcome.RETRY
            assert ledger.effects(store) == [] and store.message("E0001").state == "ready"
            assert other.execute("SELECT event_id FROM sent").fetchall() == [("E0001",)]
    finally:
        other.close()
