"""One program, two engines: the same protocol on SQLite and on PostgreSQL.

    python two_engines.py                                    # SQLite (queue.sqlite3)
    python two_engines.py postgresql://app@db.example/queue  # PostgreSQL

(PostgreSQL needs psycopg: pip install 'queue_core[postgres]'.)

Worker A claims E0001 and stalls until its lease has ended; worker B claims
E0001 again. A's completion is refused (LeaseLost: its generation is stale),
B's completes (effect + ACK in one transaction), and B works off the rest.
The batch sends one line twice, which is counted as a duplicate. The clock is
a ModelClock, so the output is the same on both engines, byte for byte.

It leaves the place as it found it. On SQLite it refuses a folder that
already has a queue.sqlite3, and deletes the file it made (and the -wal, -shm
and -lock files beside it). On PostgreSQL it creates a schema of its own,
two_engines_<process id>, uses only that schema, and drops it with everything
in it at the end; the rest of the database is never touched.
"""

import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from queue_core import Handler, LeaseLost, ModelClock, QueueError, Store, ledger, work

BATCH = (
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0002", "payload": {"category": "pen", "amount_cents": 2000}}\n'
    '{"event_id": "E0003", "payload": {"category": "bag", "amount_cents": 4500}}\n'
)

# The command line only when run as a program. Inside the site's build (or a
# test) it runs in a temporary folder: builds may run it at the same time.
if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else "queue.sqlite3"
else:
    target = str(Path(tempfile.mkdtemp()) / "queue.sqlite3")

if target.startswith(("postgresql://", "postgres://")):
    import psycopg  # installed by queue_core[postgres]

    schema = f"two_engines_{os.getpid()}"
    try:
        with psycopg.connect(target, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
    except psycopg.Error as error:
        sys.exit(f"two_engines.py: cannot create the schema {schema} there: {error}")
    # Every connection the stores open works in that schema only (libpq's "options").
    url = urlsplit(target)
    query = urlencode(
        parse_qsl(url.query) + [("options", f"-csearch_path={schema}")], quote_via=quote
    )
    database = urlunsplit(url._replace(query=query))

    def clean_up() -> None:
        with psycopg.connect(target, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")

else:
    if Path(target).exists():
        sys.exit(f"{target} already exists here; run this program in an empty folder")
    database = target

    def clean_up() -> None:
        for suffix in ("", "-wal", "-shm", "-lock"):
            Path(target + suffix).unlink(missing_ok=True)
        if __name__ != "__main__":
            Path(target).parent.rmdir()  # the temporary folder, empty now


# --8<-- [start:shown]
clock = ModelClock(1000)
try:
    # two workers, two connections
    with Store(database, clock=clock) as a, Store(database, clock=clock) as b:
        ledger.install(a)  # the reference application's effects table
        added = a.enqueue(BATCH)
        print(f"enqueue: {added.accepted} accepted, {added.duplicates} duplicate")

        lease_a = a.claim(lease_seconds=30)
        print(
            f"{clock.now()}  A claims {lease_a.event_id}: "
            f"generation {lease_a.generation}, until {lease_a.lease_until}"
        )
        clock.advance(30)  # A stalls; its lease ends
        lease_b = b.claim(lease_seconds=30)
        print(
            f"{clock.now()}  B claims {lease_b.event_id}: "
            f"generation {lease_b.generation}, until {lease_b.lease_until}"
        )
        try:
            a.complete(lease_a, Handler())
        except LeaseLost as refused:
            reason = str(refused).replace("; ", ";\n" + " " * 6)
            print(f"{clock.now()}  A completes: LeaseLost: {reason}")
        else:
            raise AssertionError("A's stale lease completed")
        held = a.message("E0001")
        assert (held.state, held.generation) == ("leased", 2), "A's refusal changed it"
        assert ledger.effects(a) == [], "A's refused completion wrote its effect"
        completion = b.complete(lease_b, Handler())
        print(f"{clock.now()}  B completes: {completion.outcome.value}")
        summary = json.dumps(work(b, Handler()).to_dict(), separators=(",", ":"))
        print(f"{clock.now()}  B works off the rest: {summary}")
        # --8<-- [end:shown]

        print()
        print("event  state  attempts  generation")
        for message in a.messages():
            print(
                f"{message.event_id}  {message.state:<5}  "
                f"{message.attempts:>8}  {message.generation:>10}"
            )
        report = ledger.report(a)
        print(f"status: {report.messages}")
        print(f"effects: {ledger.effects(a)}")
        print(
            f"total_cents: {report.total_cents}, "
            f"by category: {dict(report.by_category)}"
        )
except QueueError as error:  # e.g. the server went away: say so, without a traceback
    sys.exit(f"two_engines.py: {error.code}: {error}")
finally:
    clean_up()
