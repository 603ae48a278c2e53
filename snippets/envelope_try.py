"""Feed the queue a batch with a BOM, CRLF line ends, a blank line and a U+2028
inside a string, then a batch that changes a stored event: one is accepted,
the other is rejected whole, and nothing of it is written.

Run it in an empty folder with queue_core installed: python envelope_try.py
"""

import tempfile
from pathlib import Path

from queue_core import BatchRejected, ModelClock, Store, UnknownEvent

first = (
    "\ufeff"  # a byte order mark: b"\xef\xbb\xbf" once encoded
    '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000}}\r\n'
    "   \r\n"  # blank: ignored, but still counted as line 2
    '{"event_id": "E0002", "payload": '
    '{"note": "one\u2028line", "amount_cents": 2000, "category": "pen"}}\r\n'
    # same event, other key order
    '{"payload": {"amount_cents": 10000, "category": "book"}, "event_id": "E0001"}\r\n'
).encode()
second = (
    b'{"event_id": "E0009", "payload": {"category": "bag", "amount_cents": 900}}\n'
    # 10000.0 is not 10000
    b'{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 10000.0}}\n'
)

with tempfile.TemporaryDirectory() as folder:
    store = Store(Path(folder) / "queue.sqlite3", clock=ModelClock(1000))
    result = store.enqueue(first)
    print("first batch: ", result)
    assert (result.accepted, result.duplicates) == (2, 1), "E0001 again: a duplicate"
    for message in store.messages():
        # ascii(): shows U+2028 as \u2028
        print(f"  stored {message.event_id}: {ascii(message.payload)}")
    try:
        store.enqueue(second)
    except BatchRejected as exc:
        print(f"second batch: {exc.code} at line {exc.line}")
        print(f"  {exc.message}")
        assert (exc.code, exc.line) == ("event_conflict", 2), "10000.0 is not 10000"
    else:
        raise AssertionError("the second batch was accepted")
    try:
        store.message("E0009")
    except UnknownEvent as exc:
        print(f"  and E0009 was not written either: {exc.code}")
    else:
        raise AssertionError("a rejected batch wrote E0009")
