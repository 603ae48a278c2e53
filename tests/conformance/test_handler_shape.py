"""A handler is checked before any claim: ``work`` without ``--handler`` on a queue
of your own, and a handler that cannot take the worker's arguments, are refused.

The shape check (``queue_core/handlers.py``) is a pure function of the handler:
those tests run once (``one_engine``). What the worker and the CLI do with a
refused handler (nothing claimed, nothing written) runs on both engines, the
CLI as a real subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from queue_core import LongHandler, Message, Store, work
from queue_core.handlers import check_handler_shape

# A user's module for the CLI: right and wrong shapes.
MODULE = textwrap.dedent('''
    from queue_core import LongHandler

    def handle(tx, message):
        tx.execute("CREATE TABLE IF NOT EXISTS seen (event_id TEXT PRIMARY KEY)")
        tx.execute("INSERT INTO seen (event_id) VALUES (?)", (message.event_id,))

    def one(message):
        pass

    long = LongHandler(prepare=lambda message: message.event_id,
                       write=lambda tx, message, result: handle(tx, message))
    long_bad_write = LongHandler(prepare=lambda message: 1, write=lambda tx, message: None)
''')


def line(event_id: str) -> str:
    return json.dumps({"event_id": event_id, "payload": {"n": 1}}) + "\n"


def run(folder: Path, target: Any, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "queue_core", "--db", str(target), *args],
                          cwd=folder, capture_output=True, text=True, timeout=60)


def states(store: Store) -> dict[str, str]:
    return {m.event_id: m.state for m in store.messages()}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "myapp.py").write_text(MODULE, encoding="utf-8")
    return tmp_path


@pytest.fixture
def emails(store: Store) -> Store:
    """The queue ``emails`` (ids of the caller's own) with two messages ready."""
    store.create_queue("emails", id_pattern="[a-z0-9-]{1,64}")
    with Store(store.target, clock=store.clock, queue="emails") as queue:
        queue.enqueue(line("m-1") + line("m-2"))
    return store


def emails_states(store: Store) -> dict[str, str]:
    with Store(store.target, clock=store.clock, queue="emails") as queue:
        return states(queue)


# ------------------------------------------------------------ the shape, alone


class Callable2:
    def __call__(self, tx: object, message: object) -> None: ...


class Callable1:
    def __call__(self, message: object) -> None: ...


class Methods:
    def handle(self, tx: object, message: object) -> None: ...


def two(tx: object, message: object) -> None: ...
def star(*args: object) -> None: ...
def with_default(tx: object, message: object, extra: int = 0) -> None: ...
def one(message: object) -> None: ...
def three(tx: object, message: object, extra: object) -> None: ...
def keyword_needed(tx: object, message: object, *, extra: object) -> None: ...
def keywords_only(*, tx: object, message: object) -> None: ...


ACCEPTED = {
    "function of two": two,
    "*args": star,
    "a third with a default": with_default,
    "instance with __call__(tx, message)": Callable2(),
    "bound method": Methods().handle,
    "lambda": lambda tx, message: None,
    # no signature Python can read (inspect.signature raises): judged when called
    "builtin without a signature": max,
}
REFUSED = {
    "function of one": one,
    "os.getcwd": os.getcwd,
    "three needed": three,
    "a keyword-only one needed": keyword_needed,
    "keywords only": keywords_only,
    "instance with __call__(message)": Callable1(),
    "the class, not an instance": Callable1,
}


@pytest.mark.one_engine
@pytest.mark.parametrize("handler", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_a_handler_that_takes_tx_and_message_is_accepted(handler: Any) -> None:
    check_handler_shape(handler)


@pytest.mark.one_engine
def test_max_really_has_no_readable_signature() -> None:
    """The builtin case above is the case it claims to be."""
    import inspect

    with pytest.raises(ValueError):
        inspect.signature(max)


@pytest.mark.one_engine
@pytest.mark.parametrize("handler", REFUSED.values(), ids=REFUSED.keys())
def test_a_handler_that_cannot_take_tx_and_message_is_refused_naming_it(handler: Any) -> None:
    with pytest.raises(TypeError) as info:
        check_handler_shape(handler)
    said = str(info.value)
    assert "(tx, message)" in said and "signature" in said, said
    name = getattr(handler, "__qualname__", type(handler).__qualname__)
    assert name in said, said


@pytest.mark.one_engine
def test_something_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="is not callable"):
        check_handler_shape(42)


@pytest.mark.one_engine
def test_a_long_handler_is_checked_step_by_step() -> None:
    check_handler_shape(LongHandler(prepare=lambda m: 1, write=lambda tx, m, r: None))
    check_handler_shape(LongHandler(prepare=star, write=star))
    with pytest.raises(TypeError, match=r"LongHandler\.write cannot be called as \(tx, message, result\)"):
        check_handler_shape(LongHandler(prepare=lambda m: 1, write=two))
    with pytest.raises(TypeError, match=r"LongHandler\.prepare cannot be called as \(message\)"):
        check_handler_shape(LongHandler(prepare=two, write=lambda tx, m, r: None))


# ------------------------------------------------------------ the Python API


def test_work_refuses_a_handler_of_the_wrong_shape_before_any_claim(emails: Store) -> None:
    with Store(emails.target, clock=emails.clock, queue="emails") as queue:
        with pytest.raises(TypeError, match="cannot be called as"):
            work(queue, one)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"LongHandler\.write"):
            work(queue, LongHandler(prepare=lambda m: 1, write=two))
        assert states(queue) == {"m-1": "ready", "m-2": "ready"}  # nothing claimed
        seen: list[str] = []

        def handle(tx: object, message: Message) -> None:  # the negative control
            seen.append(message.event_id)

        assert work(queue, handle).done == 2
        assert seen == ["m-1", "m-2"]


# ------------------------------------------------------------ the CLI


def test_work_on_a_queue_of_your_own_needs_a_handler(emails: Store, folder: Path) -> None:
    proc = run(folder, emails.target, "--queue", "emails", "work")
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr.startswith("queue-core: usage: work on queue 'emails' needs --handler"), proc.stderr
    assert "(tx, message)" in proc.stderr and "Traceback" not in proc.stderr
    assert emails_states(emails) == {"m-1": "ready", "m-2": "ready"}
    # the negative control: with a handler, the same command works
    done = run(folder, emails.target, "--queue", "emails", "work", "--handler", "myapp:handle")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["done"] == 2


@pytest.mark.one_engine
def test_the_refusal_comes_before_the_database_is_opened(tmp_path: Path) -> None:
    db = tmp_path / "none.sqlite3"
    proc = run(tmp_path, db, "--queue", "emails", "work")
    assert proc.returncode == 2 and "needs --handler" in proc.stderr, proc.stderr
    assert not db.exists()  # not created, not even opened


@pytest.mark.parametrize("spec, said", [
    ("os:getcwd", f"--handler os:getcwd: handler {os.getcwd.__module__}:getcwd cannot be called as (tx, message)"),
    ("myapp:one", "--handler myapp:one: handler myapp:one cannot be called as (tx, message)"),
    ("myapp:long_bad_write", "--handler myapp:long_bad_write: handler LongHandler.write cannot be "
                             "called as (tx, message, result)"),
])
def test_a_handler_of_the_wrong_shape_is_a_usage_error_before_any_claim(
        emails: Store, folder: Path, spec: str, said: str) -> None:
    proc = run(folder, emails.target, "--queue", "emails", "work", "--handler", spec)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"queue-core: usage: {said}"), proc.stderr
    assert emails_states(emails) == {"m-1": "ready", "m-2": "ready"}


def test_a_long_handler_object_is_accepted_by_the_cli(emails: Store, folder: Path) -> None:
    proc = run(folder, emails.target, "--queue", "emails", "work", "--handler", "myapp:long")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["done"] == 2
    assert emails_states(emails) == {"m-1": "done", "m-2": "done"}
