"""Python-shaped enqueues (``send``, a list of dicts), delays, and seeing and cleaning a queue.

Runs on both engines (tests/conformance/conftest.py). ``send`` and a list
of dicts are validated exactly as JSONL lines are: the same codes, nothing
written on a rejection. ``list`` and ``purge`` run as real ``queue-core``
processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queue_core import BatchRejected, Handler, ModelClock, Store, ledger, work
from queue_core.rules import MAX_DELAY_SECONDS


def book(cents: int) -> dict[str, Any]:
    return {"category": "book", "amount_cents": cents}


def cli(folder: Path, target: Any, *args: Any, now: int = 1000) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", "--db", str(target), "--now", str(now),
                           *map(str, args)], cwd=folder, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


# ------------------------------------------------------------------- send

def test_send_stores_one_event_from_python_values(store: Store) -> None:
    assert store.send("E0001", {"b": [1, 2.5, None, True], "a": "x"}).to_dict() == {"accepted": 1, "duplicates": 0}
    stored = store.message("E0001")
    assert stored.payload == '{"a":"x","b":[1,2.5,null,true]}'  # canonical, as from a line
    assert store.send("E0001", {"a": "x", "b": [1, 2.5, None, True]}).to_dict() == {"accepted": 0, "duplicates": 1}
    with pytest.raises(BatchRejected) as conflict:
        store.send("E0001", {"a": "y"})
    assert conflict.value.code == "event_conflict" and conflict.value.line is None
    assert str(conflict.value).startswith("event_conflict: E0001 is already stored with a different payload")


@pytest.mark.parametrize(("event_id", "payload", "code"), [
    ("order-42", {"a": 1}, "invalid_event_id"),
    ("E0001", {"a": float("nan")}, "non_finite_number"),
    ("E0001", {"a": float("inf")}, "non_finite_number"),
    ("E0001", {"a": 10 ** 5000}, "number_too_large"),
    ("E0001", {"a": "\ud800"}, "invalid_unicode"),
    ("E0001", {"a": "x" * 10_001}, "payload_too_large"),
    ("E0001", [1, 2], "payload_not_object"),
])
def test_send_refuses_what_a_line_would_refuse_and_writes_nothing(store: Store, event_id: str, payload: Any,
                                                                  code: str) -> None:
    with pytest.raises(BatchRejected) as rejected:
        store.send(event_id, payload)
    assert rejected.value.code == code and rejected.value.line is None
    assert store.messages() == []


@pytest.mark.parametrize(("payload", "said"), [
    ({"tags": {"a", "b"}}, "payload['tags'] is a set, not a JSON value"),
    ({1: "one"}, "payload has the key 1: JSON keys are strings"),
    ({"when": b"2026"}, "payload['when'] is a bytes, not a JSON value"),
])
def test_send_names_where_a_value_is_not_json(store: Store, payload: Any, said: str) -> None:
    with pytest.raises(TypeError, match=said.replace("[", r"\[").replace("]", r"\]")):
        store.send("E0001", payload)
    assert store.messages() == []


def test_a_delayed_message_is_not_claimed_before_its_time(store: Store, clock: ModelClock) -> None:
    store.send("E0001", book(1), delay=30)
    store.send("E0002", book(2))
    assert store.message("E0001").available_at == clock.now() + 30
    assert work(store, Handler()).done == 1  # only E0002
    assert store.message("E0001").state == "ready"
    clock.advance(29)
    assert store.claim_message(10) is None
    clock.advance(1)
    assert work(store, Handler()).done == 1
    assert [e[0] for e in ledger.effects(store)] == ["E0001", "E0002"]


def test_a_delay_does_not_move_a_duplicate(store: Store, clock: ModelClock) -> None:
    store.send("E0001", book(1))
    assert store.send("E0001", book(1), delay=60).duplicates == 1
    assert store.message("E0001").available_at == clock.now()


@pytest.mark.parametrize(("delay", "error"), [(-1, ValueError), (MAX_DELAY_SECONDS + 1, ValueError),
                                              (1.5, TypeError), (True, TypeError), ("5", TypeError)])
def test_a_delay_out_of_range_is_refused_before_any_write(store: Store, delay: Any, error: type) -> None:
    with pytest.raises(error, match="delay must be"):
        store.send("E0001", book(1), delay=delay)
    with pytest.raises(error, match="delay must be"):
        store.enqueue([{"event_id": "E0001", "payload": book(1)}], delay=delay)
    assert store.messages() == []


# ------------------------------------------------------- a list of dicts

def test_enqueue_takes_a_list_of_dicts_validated_as_lines(store: Store) -> None:
    events = [{"event_id": f"E000{n}", "payload": book(n)} for n in (1, 2, 3)]
    assert store.enqueue(events + [events[0]]).to_dict() == {"accepted": 3, "duplicates": 1}
    assert store.enqueue(events).to_dict() == {"accepted": 0, "duplicates": 3}


def test_a_bad_item_rejects_the_whole_list_naming_the_item(store: Store) -> None:
    events: list[Any] = [{"event_id": "E0001", "payload": book(1)},
                         {"event_id": "E0002", "payload": book(2), "extra": 1}]
    with pytest.raises(BatchRejected) as rejected:
        store.enqueue(events)
    assert (rejected.value.code, rejected.value.line, rejected.value.unit) == ("unexpected_key", 2, "item")
    assert str(rejected.value) == "item 2: unexpected_key: unexpected key 'extra'; only event_id and payload"
    with pytest.raises(TypeError, match="item 2: an event is a dict"):
        store.enqueue([events[0], "E0002"])
    with pytest.raises(TypeError, match="enqueue takes JSONL text"):
        store.enqueue({"event_id": "E0001", "payload": book(1)})  # type: ignore[arg-type]
    assert store.messages() == []  # nothing written


# ------------------------------------------------------ list and purge

def test_messages_takes_a_limit(store: Store) -> None:
    store.enqueue([{"event_id": f"E000{n}", "payload": book(n)} for n in (3, 1, 2)])
    assert [m.event_id for m in store.messages(limit=2)] == ["E0001", "E0002"]
    assert [m.event_id for m in store.messages("ready", limit=1)] == ["E0001"]
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        store.messages(limit=0)


def test_purge_removes_one_state_only_and_forgets_those_ids(store: Store, clock: ModelClock) -> None:
    store.enqueue([{"event_id": "E0001", "payload": book(1)},
                   {"event_id": "E0002", "payload": {"category": "toy", "amount_cents": 1}},  # dead
                   {"event_id": "E0003", "payload": book(3)},
                   {"event_id": "E0004", "payload": book(4)}])
    assert work(store, Handler(), max_messages=2).to_dict()["dead"] == 1  # E0001 done, E0002 dead
    leased = store.claim_message(60)  # E0003
    assert leased is not None
    assert store.purge("ready") == 1  # E0004
    assert store.purge("dead") == 1  # E0002
    assert {m.event_id: m.state for m in store.messages()} == {"E0001": "done", "E0003": "leased"}
    for state in ("leased", "done", "nonsense"):
        with pytest.raises(ValueError, match="purge removes ready or dead messages"):
            store.purge(state)
    assert store.send("E0004", book(40)).accepted == 1  # forgotten: a new message now
    assert store.send("E0001", book(1)).duplicates == 1  # a done id is still remembered


def test_queue_core_list_and_purge(store: Store, tmp_path: Path) -> None:
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"event_id": f"E000{n}", "payload": book(n)}) + "\n" for n in (1, 2, 3)),
                     encoding="utf-8")
    assert json.loads(cli(tmp_path, store.target, "enqueue", "--delay", "30", batch).stdout)["accepted"] == 3
    assert json.loads(cli(tmp_path, store.target, "work").stdout)["claimed"] == 0  # not before their time
    worked = cli(tmp_path, store.target, "work", "--max-messages", "1", now=1030)
    assert json.loads(worked.stdout)["done"] == 1
    table = cli(tmp_path, store.target, "list")
    assert table.returncode == 0
    assert table.stdout.splitlines() == [
        "event_id  state   attempts  generation  available_at  lease_until  last_error",
        "E0001     done           1           1          1030",
        "E0002     ready          0           0          1030",
        "E0003     ready          0           0          1030",
    ]
    listed = json.loads(cli(tmp_path, store.target, "list", "--state", "ready", "--limit", "1", "--json").stdout)
    assert listed == [{"event_id": "E0002", "state": "ready", "attempts": 0, "generation": 0,
                       "available_at": 1030, "lease_until": None, "last_error": None, "detail": None,
                       "payload": book(2)}]
    refused = cli(tmp_path, store.target, "purge", "--state", "ready")  # stdin is not a terminal
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("queue-core: usage: purge would remove 2 ready message(s); "
                                      "add --yes (it asks only on a terminal)")
    assert json.loads(cli(tmp_path, store.target, "purge", "--state", "ready", "--yes").stdout) == {"purged": 2}
    assert cli(tmp_path, store.target, "list").stdout.splitlines()[1:] == [
        "E0001     done           1           1          1030"]
    wrong = cli(tmp_path, store.target, "purge", "--state", "done", "--yes")
    assert wrong.returncode == 2 and "invalid choice: 'done'" in wrong.stderr
    bad_delay = cli(tmp_path, store.target, "enqueue", "--delay", "-5", batch)
    assert bad_delay.returncode == 2 and "--delay" in bad_delay.stderr


@pytest.mark.one_engine
@pytest.mark.parametrize(("answer", "status", "left"), [("y", 0, []), ("n", 2, ["E0001"]), ("", 2, ["E0001"])])
def test_purge_asks_on_a_terminal(tmp_path: Path, answer: str, status: int, left: list[str]) -> None:
    import os
    import pty

    db = tmp_path / "q.sqlite3"
    with Store(db) as store:
        store.send("E0001", book(1))
    main, terminal = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "queue_core", "--db", str(db), "purge", "--state", "ready"],
                                stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.write(main, (answer + "\n").encode())
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
        os.close(terminal)
    assert proc.returncode == status, err
    assert out.startswith(f"remove 1 ready message(s) from {db}? [y/N] ")
    if status == 0:
        assert json.loads(out.split("] ", 1)[1]) == {"purged": 1}
    else:
        assert err.strip() == "queue-core: usage: purge: not confirmed; nothing was removed"
    with Store(db) as store:
        assert [m.event_id for m in store.messages()] == left
