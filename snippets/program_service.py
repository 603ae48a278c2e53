"""A worker that runs until it is stopped: SIGTERM lets it finish the message in hand.

A real ``queue-core work --forever`` process runs your handler (a module in
its working directory, as ``--handler`` imports it); it is sent SIGTERM while
its handler works on the second of five messages.
"""

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from queue_core import ModelClock, Store

HANDLER = '''
import pathlib, time

def slow(tx, message):
    pathlib.Path("working-on-" + message.event_id).touch()
    time.sleep(0.5)  # the work
    tx.execute("CREATE TABLE IF NOT EXISTS done (event_id TEXT PRIMARY KEY)")
    tx.execute("INSERT INTO done (event_id) VALUES (?)", (message.event_id,))
'''

with tempfile.TemporaryDirectory() as folder:
    here = Path(folder)
    (here / "myapp.py").write_text(HANDLER)
    with Store(here / "queue.sqlite3", clock=ModelClock(1000)) as store:
        store.enqueue([{"event_id": f"E000{n}", "payload": {"n": n}}
                       for n in range(1, 6)])
    worker = subprocess.Popen(
        [sys.executable, "-m", "queue_core", "--now", "1000", "work",
         "--handler", "myapp:slow", "--forever"],
        cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    while not (here / "working-on-E0002").exists():
        time.sleep(0.01)
    worker.send_signal(signal.SIGTERM)  # what systemctl stop sends
    out, err = worker.communicate(timeout=60)
    print("exit status:", worker.returncode)
    print("summary:", json.loads(out) if out else err)
    with Store(here / "queue.sqlite3", clock=ModelClock(1000)) as store:
        states = {m.event_id: m.state for m in store.messages()}
    print(states)
    assert worker.returncode == 0, "SIGTERM did not end the worker with status 0"
    assert states["E0002"] == "done", "SIGTERM did not let the message in hand finish"
    assert list(states.values()).count("ready") == 3, "a message was taken after it"
