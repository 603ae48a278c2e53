"""``Store.open_read_only`` on every engine: it reads as any store does, and refuses to write.

What a read-only file, folder or mount does on SQLite is in ``tests/test_read_only.py``.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

import pytest

from queue_core import Handler, ModelClock, StorageError, Store, WrongPath


def line(event_id: str, cents: int) -> str:
    return json.dumps({"event_id": event_id, "payload": {"category": "book", "amount_cents": cents}})


def test_a_read_only_store_reads_what_the_store_wrote(store: Store, clock: ModelClock) -> None:
    store.enqueue("\n".join(line(f"E{n:04d}", 100 * n) for n in (1, 2, 3)))
    store.complete(store.claim(30), Handler())
    with Store.open_read_only(store.target, clock=clock) as reader:
        assert reader.status() == store.status()
        assert [m.event_id for m in reader.messages()] == ["E0001", "E0002", "E0003"]
        assert reader.metrics() == store.metrics()
        assert [q.name for q, _ in reader.queues()] == ["default"]


@pytest.mark.parametrize("write", ["enqueue", "claim", "create_queue", "purge"])
def test_a_read_only_store_refuses_every_write(store: Store, clock: ModelClock, write: str) -> None:
    store.enqueue(line("E0001", 100))
    operations = {
        "enqueue": lambda s: s.enqueue(line("E0002", 200)),
        "claim": lambda s: s.claim(30),
        "create_queue": lambda s: s.create_queue("other"),
        "purge": lambda s: s.purge("ready"),
    }
    with Store.open_read_only(store.target, clock=clock) as reader:
        with pytest.raises(StorageError) as info:
            operations[write](reader)
        assert info.value.code == "read_only", info.value
    assert store.status().count("ready") == 1 and store.queue_settings("other") is None
    assert operations[write](store) is not None or write == "claim"  # the negative control: it can


def test_a_read_only_store_never_creates_a_queue(store: Store, tmp_path, engine: str) -> None:
    if engine == "sqlite":
        missing: object = tmp_path / "missing.sqlite3"
    else:  # a database of the same server with no queue in it
        missing = urlunsplit(urlsplit(str(store.target))._replace(path="/postgres"))
    with pytest.raises(WrongPath) as info:
        Store.open_read_only(missing)  # type: ignore[arg-type]
    assert info.value.code == "no_database"
    if engine == "sqlite":
        assert not tmp_path.joinpath("missing.sqlite3").exists()
