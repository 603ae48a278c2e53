"""The glossary: every term defined once, shown as a tooltip, and true to the code.

The first tests check the glossary's form: each term once, in alphabetical
order, with an anchor and an A-Z index of them at the top, a tooltip for
each, a link from each entry to the chapter that explains it, and a
definition of every word the promise uses. The rest hold
the sentences of the glossary, and of the pages around it, that state a
behaviour: the numbers it names, the attempt budget, what a lease expiry
writes, what a deferred ``BEGIN`` does, and where WAL keeps its write lock.
The pages name these tests in their proofs.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from queue_core import MAX_ATTEMPTS, Handler, ModelClock, Outcome, Store, TemporaryFailure, backoff_seconds, ledger
from queue_core import receipts, store as store_module
from queue_core.store import LEASE_EXPIRED

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
TOOLTIPS = (ROOT / "docs" / "includes" / "glossary-terms.md").read_text(encoding="utf-8")
PG_DURABILITY = (ROOT / "docs" / "includes" / "pg-durability.md").read_text(encoding="utf-8")
# The protocol's own words: defined in the glossary, with a tooltip in both cases.
# ("queue" has no tooltip: the word is everywhere, and on the page that compares
# real queues a tooltip saying "the messages table of one SQLite file" would be false.)
CORE_TERMS = ["Lease", "ACK", "Retry", "Backoff", "DLQ", "Fencing", "Effect", "Receipt", "Generation"]
# Every entry of the glossary, and the tooltip that each one has on every page.
TERMS = {
    "Queue": None, "Canonical payload": "canonical payload", "`available_at`": "available_at",
    "Claim": None, "Lease": "lease", "At-least-once": "at-least-once", "Generation": "generation",
    "Delivery": None, "At-most-once": None, "Exactly-once": None, "Idempotency": None,
    "Fencing": "fencing", "`LeaseLost`": "LeaseLost", "Effect": "effect", "ACK": "ACK", "Outbox": "outbox",
    "Retry": "retry", "Backoff": "backoff", "Attempt budget": None, "Cycle": "cycle", "DLQ": "DLQ",
    "Dead letter": "dead letter", "Redrive": "redrive", "Receipt": "receipt",
    # "operation" alone is too common a word for a tooltip: only the tenant gets one.
    "Teaching path, worker's path": "teaching path",
    "Tenant, operation": "tenant", "WAL": "WAL", "Busy timeout": "busy timeout", "Model clock": None,
    "Lease extension, heartbeat": "heartbeat", "Release": None, "Prune": "prune",
    # the words of the promise (docs/includes/promise.md); "event", "message" and
    # "handler" are too common for a tooltip
    "Event": None, "Message": None, "Handler": None, "Claim token": "claim token", "Fence": "fence",
    "Durable, storage that keeps its promises": None, "Promise": None,
}
# Every word the promise uses, defined here (and the fence's words).
PROMISE_WORDS = ["Event", "Message", "Effect", "ACK", "Fence", "Generation", "Claim token",
                 "Durable, storage that keeps its promises", "At-least-once", "At-most-once", "Exactly-once",
                 "Delivery", "Receipt", "Handler", "Promise"]
ANCHOR = re.compile(r"\s*\{ #([a-z0-9_-]+) \}$")
NUMBER_WORDS = {1: "One", 2: "Two", 3: "Three", 4: "Four", 5: "Five"}


def term_lines() -> list[str]:
    """Each term line as written: the term, then its anchor ``{ #id }``."""
    # Definition lists: a term line followed by a line starting with ":   ".
    lines = GLOSSARY.splitlines()
    return [lines[i].strip() for i in range(len(lines) - 1) if lines[i + 1].startswith(":   ")]


def defined_terms() -> list[str]:
    return [ANCHOR.sub("", line) for line in term_lines()]


def sort_key(term: str) -> str:
    return term.strip("`").casefold()


def in_order(terms: list[str]) -> list[str]:
    """The terms out of alphabetical order (empty when all are in order)."""
    return [b for a, b in zip(terms, terms[1:]) if sort_key(a) > sort_key(b)]


def index_links(glossary: str) -> list[tuple[str, str]]:
    """The A-Z index: (letter, anchor) of each link on the line of letters above the first term."""
    head = glossary.split("\n\n" + term_lines()[0], 1)[0]
    return re.findall(r"\[([A-Z])\]\(#([a-z0-9_-]+)\)", head)


def expected_index(lines: list[str]) -> list[tuple[str, str]]:
    """Each letter that starts a term, with the anchor of its first term."""
    first: dict[str, str] = {}
    for line in lines:
        anchor = ANCHOR.search(line)
        assert anchor, f"{line}: no anchor {{ #id }}"
        first.setdefault(sort_key(ANCHOR.sub("", line))[0].upper(), anchor.group(1))
    return list(first.items())


def definitions() -> dict[str, str]:
    """Each term with the text of its definition, on one line."""
    entries: dict[str, str] = {}
    term = None
    for line in GLOSSARY.splitlines():
        if line.startswith(":   ") and term is not None:
            entries[term] = line[4:]
        elif line.startswith("    ") and term in entries:
            entries[term] += " " + line.strip()
        elif line.strip():
            term = ANCHOR.sub("", line.strip())
    return entries


def tooltip_terms() -> dict[str, str]:
    return dict(re.findall(r"^\*\[([^\]]+)\]: (.+)$", TOOLTIPS, re.M))


def flat(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------ form

def test_every_term_is_defined_once() -> None:
    terms = defined_terms()
    for term in CORE_TERMS + list(TERMS):
        assert terms.count(term) == 1, term
    assert len(terms) == len(set(terms)), "a term is defined twice"
    assert set(terms) == set(TERMS), "a glossary entry this test does not know, or one missing"


def test_the_terms_are_in_alphabetical_order() -> None:
    assert in_order(defined_terms()) == []
    # negative control: a term out of place is named
    assert in_order(["ACK", "Lease", "Claim", "WAL"]) == ["Claim"]
    assert in_order(["`available_at`", "Backoff"]) == []  # backticks do not count


def test_the_index_links_each_letter_to_its_first_term() -> None:
    lines = term_lines()
    anchors = [ANCHOR.search(line) for line in lines]
    assert all(anchors), "every term has an anchor"
    assert len({a.group(1) for a in anchors if a}) == len(lines), "two terms share an anchor"
    assert index_links(GLOSSARY) == expected_index(lines)
    # negative control: an index whose letter points at the second term of its letter
    letters = expected_index(lines)
    wrong = GLOSSARY.replace(f"[A](#{letters[0][1]})", "[A](#at-most-once)", 1)
    assert index_links(wrong) != expected_index(lines)


def test_the_glossary_defines_every_word_of_the_promise() -> None:
    terms = defined_terms()
    for word in PROMISE_WORDS:
        assert word in terms, word
    entries = definitions()
    assert "(queue, event_id)" in flat(entries["Message"])
    assert '--8<-- "docs/includes/promise.md"' in entries["Promise"]
    assert '--8<-- "docs/includes/fence.md"' in entries["Fence"]
    token = flat(entries["Claim token"])
    assert "fencing token" in token and "generation and the claim token together" in token
    durable = flat(entries["Durable, storage that keeps its promises"])
    for fact in ["a COMMIT it reported stays", "`synchronous = FULL` in WAL mode",
                 '--8<-- "docs/includes/pg-durability.md"']:
        assert fact in durable, fact
    postgres = flat(PG_DURABILITY)  # PostgreSQL's conditions, written once and included
    for fact in ["`fsync = on`", "`synchronous_commit`", "`synchronous_standby_names`",
                 "was not cancelled", "asynchronous standby can lose acknowledged commits"]:
        assert fact in postgres, fact
    # "token" alone is not a word of this site: always "claim token" (or Kleppmann's "fencing token")
    for term, text in entries.items():
        # (`Lease.token` names the attribute; "token" in quotes names the word)
        assert not re.search(r'(?<!claim )(?<!fencing )(?<![."])\btoken\b(?!")', flat(text)), term


def test_fencing_is_the_whole_fence_not_the_generation_alone() -> None:
    fencing = flat(definitions()["Fencing"])
    assert "claim token" in fencing and "ended" in fencing and "no longer leased" in fencing
    tips = tooltip_terms()
    for tip in ("fencing", "Fencing", "generation", "Generation"):
        assert "claim token" in tips[tip], tip
        assert "fencing number" not in tips[tip].lower()


def test_queue_core_sets_the_durability_the_glossary_names(tmp_path: Path) -> None:
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000)) as store:
        with store.transaction() as tx:
            assert tx.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert tx.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_every_core_term_has_a_tooltip_in_both_cases() -> None:
    tips = tooltip_terms()
    for term in CORE_TERMS:
        assert term in tips, term
        if term.upper() != term:
            assert term.lower() in tips, term.lower()


def test_every_entry_with_a_tooltip_has_it() -> None:
    tips = tooltip_terms()
    for term, tip in TERMS.items():
        if tip is not None:
            assert tip in tips, f"{term}: no tooltip {tip!r} in docs/includes/glossary-terms.md"


def test_every_tooltip_names_a_glossary_term() -> None:
    names = [term.strip("`").lower() for term in defined_terms()]
    for tip in tooltip_terms():
        word = tip.lower()
        singular = word[:-1] if word.endswith("s") else word
        assert any(word in name or singular in name for name in names), f"tooltip {tip!r} defines no glossary term"


def test_every_entry_links_to_the_chapter_that_explains_it() -> None:
    for term, text in definitions().items():
        assert re.search(r"\]\([a-z/-]+\.md(#[a-z0-9-]+)?\)", text), f"{term}: no link to a chapter"


def test_no_page_other_than_the_glossary_redefines_a_term() -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        if page.name in ("glossary.md", "glossary-terms.md"):
            continue
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"^\*\[", text, re.M), f"{page} defines its own tooltip"


def test_the_numbers_in_the_glossary_are_the_codes() -> None:
    entries = definitions()
    assert flat(entries["Attempt budget"]).startswith(f"{NUMBER_WORDS[MAX_ATTEMPTS]} claims per cycle (`MAX_ATTEMPTS`")
    assert "(in `default`, the third) can still end `done`" in flat(entries["Attempt budget"])
    assert MAX_ATTEMPTS == 3
    backoff = f"{backoff_seconds(1)} s after the first attempt, {backoff_seconds(2)} s after the second"
    assert backoff in flat(entries["Backoff"])
    assert backoff in tooltip_terms()["backoff"] and backoff in tooltip_terms()["Backoff"]
    busy = flat(entries["Busy timeout"])
    assert f"{store_module.BUSY_TIMEOUT_MS // 1000} s per attempt by default" in busy
    assert store_module.BUSY_TIMEOUT_MS % 1000 == 0
    assert f"({store_module.BUSY_RETRY_SECONDS:g} s by default)" in busy
    assert f"strings of 1 to {receipts.MAX_KEY_CHARS} characters" in flat(entries["Tenant, operation"])


# ---------------------------------------------- the attempt budget and expiry

def _store(tmp_path: Path, clock: ModelClock) -> Store:
    store = Store(tmp_path / "queue.sqlite3", clock=clock)
    ledger.install(store)
    store.enqueue('{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}')
    return store


def _timeout(tx: object, message: object) -> None:
    raise TemporaryFailure("timeout")


def _fail_twice(store: Store, clock: ModelClock) -> None:
    for _ in range(MAX_ATTEMPTS - 1):
        lease = store.claim(lease_seconds=2)
        assert lease is not None and lease.event_id == "E0001"
        assert store.complete(lease, _timeout).outcome is Outcome.RETRY
        clock.set(store.message("E0001").available_at)


def test_the_last_claim_of_the_budget_can_still_end_done(tmp_path: Path) -> None:
    clock = ModelClock(1000)
    with _store(tmp_path, clock) as store:
        _fail_twice(store, clock)
        last = store.claim(lease_seconds=2)
        assert (last.event_id, last.attempt) == ("E0001", MAX_ATTEMPTS)
        assert store.complete(last, Handler()).outcome is Outcome.DONE
        assert store.message("E0001").state == "done"


@pytest.mark.parametrize("ending", ["fails", "lease runs out"])
def test_the_message_is_dead_when_its_last_claim_fails_or_its_lease_runs_out(tmp_path: Path, ending: str) -> None:
    clock = ModelClock(1000)
    with _store(tmp_path, clock) as store:
        _fail_twice(store, clock)
        last = store.claim(lease_seconds=2)
        assert last.attempt == MAX_ATTEMPTS
        if ending == "fails":
            assert store.complete(last, _timeout).outcome is Outcome.DEAD
            assert (store.message("E0001").state, store.message("E0001").last_error) == ("dead", "timeout")
            return
        clock.set(last.lease_until)
        assert store.message("E0001").state == "leased"  # the expiry itself writes nothing
        assert store.claim(lease_seconds=2) is None  # the next claim that comes to it writes dead
        row = store.message("E0001")
        assert (row.state, row.attempts, row.last_error) == ("dead", MAX_ATTEMPTS, LEASE_EXPIRED)


def test_lease_expiry_writes_nothing_and_the_next_claim_leases_the_row_again(tmp_path: Path) -> None:
    clock = ModelClock(1000)
    with _store(tmp_path, clock) as store:
        first = store.claim(lease_seconds=2)
        before = store.message("E0001")
        clock.set(first.lease_until + 100)  # long after the lease ended
        assert store.message("E0001") == before  # the row as it was: still leased, nothing written
        assert store.status().messages["leased"] == 1
        again = store.claim(lease_seconds=2)
        after = store.message("E0001")
        assert (again.event_id, again.generation, again.attempt) == ("E0001", first.generation + 1, 2)
        assert (after.state, after.available_at, after.lease_until) == ("leased", before.available_at,
                                                                       clock.now() + 2)


def test_no_diagram_draws_lease_expiry_as_a_move_to_ready() -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        for fence in re.findall(r"```mermaid\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
            for line in fence.splitlines():
                if re.search(r"\bleased\s*-->\s*ready\b", line):
                    assert "expir" not in line, f"{page.name}: {line.strip()}"


# ------------------------------------------ deferred BEGIN and the write lock

CHOOSE = "SELECT event_id FROM messages WHERE owner IS NULL ORDER BY event_id LIMIT 1"
TAKE = "UPDATE messages SET owner = ? WHERE event_id = ?"


@pytest.mark.parametrize("first", ["commits", "holds the write lock", "has only read"])
def test_a_deferred_begin_refuses_the_second_writer_at_once(tmp_path: Path, first: str) -> None:
    db = tmp_path / "naive.sqlite3"
    setup = sqlite3.connect(db, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE messages (event_id TEXT PRIMARY KEY, owner TEXT)")
    setup.execute("INSERT INTO messages VALUES ('E0001', NULL), ('E0002', NULL)")
    setup.close()
    a = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    b = sqlite3.connect(db, isolation_level=None, timeout=2.0)
    try:
        a.execute("BEGIN")
        b.execute("BEGIN")
        chosen = {a.execute(CHOOSE).fetchone()[0], b.execute(CHOOSE).fetchone()[0]}
        assert chosen == {"E0001"}  # one snapshot: both choose the same message
        winner, loser = (b, a) if first == "has only read" else (a, b)
        winner.execute(TAKE, ("winner", "E0001"))
        if first == "commits":
            winner.execute("COMMIT")
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError) as refused:
            loser.execute(TAKE, ("loser", "E0001"))
        assert time.monotonic() - started < 1.0  # at once: the 2 s busy timeout is not waited out
        expected = "SQLITE_BUSY_SNAPSHOT" if first == "commits" else "SQLITE_BUSY"
        assert refused.value.sqlite_errorname == expected
        loser.execute("ROLLBACK")
        if winner.in_transaction:
            winner.execute("COMMIT")
        owners = a.execute("SELECT owner FROM messages WHERE event_id = 'E0001'").fetchall()
        assert owners == [("winner",)]  # one owner: nothing doubled
    finally:
        a.close()
        b.close()


def _locks_of_this_process(folder: Path) -> list[tuple[str, str, int]]:
    """(file, READ or WRITE, first byte) of each POSIX lock this process holds on a file in ``folder``."""
    import os

    inodes = {os.stat(p).st_ino: p.name for p in folder.iterdir()}
    held = []
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "POSIX" not in parts or "->" in parts:
            continue
        kind = parts.index("POSIX")
        _, mode, pid, device, start = parts[kind + 1:kind + 6]
        inode = int(device.split(":")[2])
        if int(pid) == os.getpid() and inode in inodes:
            held.append((inodes[inode], mode, int(start)))
    return sorted(held)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the locks from /proc/locks")
def test_wal_keeps_the_write_lock_in_the_shm_file_not_on_the_database_file(tmp_path: Path) -> None:
    with Store(tmp_path / "queue.sqlite3", clock=ModelClock(1000)) as store:
        with store.transaction() as tx:  # BEGIN IMMEDIATE: the write lock is held
            tx.execute("UPDATE messages SET attempts = attempts WHERE 0")
            locks = _locks_of_this_process(tmp_path)
    # The writer's lock: byte 120 of the -shm file (the wal-index), exclusive.
    assert ("queue.sqlite3-shm", "WRITE", 120) in locks
    # The database file itself: only the shared lock every connection holds, no write lock.
    on_the_file = [(mode, start) for name, mode, start in locks if name == "queue.sqlite3"]
    assert on_the_file and all(mode == "READ" for mode, _ in on_the_file)
