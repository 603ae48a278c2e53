"""Three worker processes on one queue file: every effect exactly once.

Writes a batch of 300 events, starts three real `python -m queue_core work`
processes on the same file at the same model second, waits for them, then
checks the file with plain sqlite3: how many effects, how much money, and
whether any event got two effects or was claimed twice.

Run: python concurrency_workers.py   (needs queue_core installed; leaves nothing behind)
"""

import json
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

EVENTS = 300
WORKERS = 3

with tempfile.TemporaryDirectory() as folder:
    lines = [
        json.dumps(
            {"event_id": f"E{n:04d}", "payload": {"category": "pen", "amount_cents": n}}
        )
        for n in range(1, EVENTS + 1)
    ]
    Path(folder, "batch.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    queue = [
        sys.executable,
        "-m",
        "queue_core",
        "--db",
        "queue.sqlite3",
        "--now",
        "1000",
    ]
    added = subprocess.run(
        [*queue, "enqueue", "batch.jsonl"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    print("enqueue:", added.stdout.strip())

    # --8<-- [start:shown]
    # Start all workers before waiting for any: they compete for one file.
    workers = [
        subprocess.Popen(
            [*queue, "work"], cwd=folder, stdout=subprocess.PIPE, text=True
        )
        for _ in range(WORKERS)
    ]
    summaries = [json.loads(worker.communicate(timeout=120)[0]) for worker in workers]
    print(
        f"{WORKERS} worker processes, exit statuses:",
        [worker.returncode for worker in workers],
    )
    for key in ("claimed", "done", "retried", "dead", "lease_lost"):
        print(f"  {key:<10} in total: {sum(summary[key] for summary in summaries)}")

    # Check the file itself, without queue_core.
    conn = sqlite3.connect(Path(folder, "queue.sqlite3"))
    effects, money = conn.execute(
        "SELECT count(*), sum(amount_cents) FROM effects"
    ).fetchone()
    most = conn.execute(
        "SELECT max(n) FROM (SELECT count(*) AS n FROM effects GROUP BY event_id)"
    ).fetchone()[0]
    states = conn.execute(
        "SELECT state, count(*) FROM messages GROUP BY state"
    ).fetchall()
    generations = conn.execute("SELECT DISTINCT generation FROM messages").fetchall()
    conn.close()

    print("messages by state:", dict(states))
    print(f"effects: {effects}, money: {money} (expected {sum(range(1, EVENTS + 1))})")
    print("each effect once:", effects == EVENTS and most == 1)
    print(
        "no message was claimed twice (every generation is 1):", generations == [(1,)]
    )
# --8<-- [end:shown]
