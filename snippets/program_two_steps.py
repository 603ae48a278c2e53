"""A handler that calls the network, in two steps, run by four threads.

``deliver`` is the slow step (a stand-in for an e-mail server): it runs
outside any transaction, its lease kept by a heartbeat. ``record`` is the
effect, written with the ACK. While the four threads' slow steps run, a
producer sends four more events: nothing it does waits for them.
"""

import tempfile
import threading
from pathlib import Path

from queue_core import LongHandler, ModelClock, Store, work

in_flight = threading.Semaphore(0)  # one release per slow step started
go = threading.Event()  # the "server" answers once the producer has sent


def deliver(message):  # no transaction is open: others write meanwhile
    in_flight.release()
    go.wait(timeout=60)
    return f"receipt-{message.event_id}"  # what the server answered


def record(tx, message, receipt):  # short: the effect, then the ACK
    tx.execute(
        "INSERT INTO mail (event_id, receipt) VALUES (?, ?)",
        (message.event_id, receipt),
    )


def send(store, first, last):
    for n in range(first, last + 1):
        store.send(f"E{n:04d}", {"to": f"user{n}@example.com"})


def worker(store, results):  # what `queue-core work --concurrency 4` runs
    results.append(work(store, LongHandler(deliver, record), concurrency=4))


with tempfile.TemporaryDirectory() as folder:
    with Store(Path(folder) / "queue.sqlite3", clock=ModelClock(1000)) as store:
        store.write(
            lambda tx: tx.execute("CREATE TABLE mail (event_id TEXT, receipt TEXT)")
        )
        send(store, 1, 4)
        results = []
        running = threading.Thread(target=worker, args=(store, results))
        running.start()
        for _ in range(4):
            assert in_flight.acquire(timeout=60), "the slow steps ran one at a time"
        print("slow steps running at once: 4")
        send(store, 5, 8)  # the producer: its own transactions, not held up
        print("sent E0005..E0008 while they ran")
        go.set()
        running.join()
        print(results[0])
        rows = store.read(lambda tx: tx.execute("SELECT event_id FROM mail").fetchall())
        print("mails recorded:", len(rows), "distinct:", len(set(rows)))
        assert len(rows) == len(set(rows)) == 8, "a mail was lost or doubled"
