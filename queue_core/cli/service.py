"""``queue-core work`` and ``schedule`` as services: which handler ``work`` runs, and how both stop.

``--handler package.module:function`` imports the caller's handler as Python
would, from the working directory first and then ``sys.path``. A worker
stops between two messages: SIGTERM (a service manager's stop) and the first
Ctrl-C set a flag that the loop reads before each claim, so the message in
hand is finished; a second Ctrl-C interrupts at once, and the worker rolls its
transaction back and gives its lease back before it exits. A COMMIT in
flight is never interrupted (``interrupts``): the second Ctrl-C waits until it
returned and its outcome is counted, saying so once; Ctrl-C again changes
nothing.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final, cast

from .. import interrupts
from ..handlers import check_handler_shape
from ..queues import DEFAULT_QUEUE
from ..rules import MessageHandler
from ..worker import LongHandler

# package.module:function (the function may be an attribute path, Class.method)
_SPEC = re.compile(
    r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$"
)
# said once, on the first Ctrl-C, straight to the terminal (safe in a signal handler)
_FIRST_INTERRUPT = (
    b"queue-core: stopping after the message in hand (Ctrl-C again to stop now)\n"
)
# said once, when a Ctrl-C has to wait for a COMMIT in flight (a synchronous
# standby that is down holds it until it is back)
_WAITING_FOR_COMMIT: Final = (
    b"queue-core: waiting for the COMMIT in flight, then stopping "
    b"(Ctrl-C cannot cancel it)\n"
)


class HandlerNotFound(Exception):
    """``--handler`` names nothing that can be imported and called (the CLI: a usage error)."""


# how to write one, said wherever --handler is missing or wrong
HANDLER_HINT: Final = (
    "a function taking (tx, message) that writes the message's effect through "
    "tx (or a LongHandler object), named as package.module:function"
)


def refuse_missing_handler(queue: str, spec: str | None) -> None:
    """``work`` on a queue of your own needs your handler: ``HandlerNotFound`` without one.

    Only the default queue (the teaching pages') runs the reference ledger's
    handler; on any other queue it would judge your payloads by the ledger's
    rules and send them to dead.
    """
    if spec is None and queue != DEFAULT_QUEUE:
        raise HandlerNotFound(
            f"work on queue {queue!r} needs --handler: {HANDLER_HINT}; only the "
            f"{DEFAULT_QUEUE} queue runs the reference ledger's handler"
        )


def load_handler(spec: str) -> MessageHandler | LongHandler[Any]:
    """The handler that ``spec`` (``package.module:function``) names, its shape checked.

    A callable must take ``(tx, message)``; a ``LongHandler`` object its two
    steps' arguments (``handlers.check_handler_shape``).

    :raises HandlerNotFound: the text is not of that form, the module cannot be
        imported (or raised while it was), or the name is missing, not callable
        (nor a ``LongHandler``), or cannot take the worker's arguments.
    """
    match = _SPEC.match(spec)
    if match is None:
        raise HandlerNotFound(
            f"--handler must be package.module:function, got {spec!r}"
        )
    module_name, attribute_path = match.groups()
    # `python -m` puts the working directory first on sys.path; an installed
    # console script does not, so it is added here, as Python would look.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise HandlerNotFound(
                f"--handler {spec}: no module named {exc.name!r} "
                "(looked in the working directory and sys.path)"
            ) from None
        raise HandlerNotFound(
            f"--handler {spec}: importing {module_name} failed: "
            f"ModuleNotFoundError: {exc}"
        ) from None
    except Exception as exc:  # the user's module raised while it was imported
        raise HandlerNotFound(
            f"--handler {spec}: importing {module_name} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    found: object = module
    for name in attribute_path.split("."):
        if not hasattr(found, name):
            raise HandlerNotFound(
                f"--handler {spec}: {module_name} has no {attribute_path!r}"
            )
        found = getattr(found, name)
    if isinstance(found, LongHandler):
        handler: MessageHandler | LongHandler[Any] = found
    elif callable(found):
        handler = cast(MessageHandler, found)
    else:
        raise HandlerNotFound(
            f"--handler {spec}: {attribute_path} is not callable "
            f"({type(found).__name__}); it must be {HANDLER_HINT}"
        )
    try:
        check_handler_shape(handler)
    except TypeError as exc:
        raise HandlerNotFound(f"--handler {spec}: {exc}") from None
    return handler


@dataclass
class Stopping:
    """The signals a worker received; ``stop`` is set by the first of them."""

    stop: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """130 after a Ctrl-C (SIGINT), else 0 (SIGTERM is a normal stop)."""
        return 130 if signal.SIGINT in self.received else 0


@contextmanager
def stopping_on_signals() -> Iterator[Stopping]:
    """While the block runs: SIGTERM and a first SIGINT set ``stop``; a second SIGINT interrupts.

    The second waits for a COMMIT in flight in this thread (``interrupts``);
    either way ``_WAITING_FOR_COMMIT`` is said once on stderr when one has to
    wait. Only the main thread can take signals; elsewhere the block runs
    without.
    """
    stopping = Stopping()
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return
    said: list[bool] = []

    def waiting() -> None:
        if not said:
            said.append(True)
            os.write(2, _WAITING_FOR_COMMIT)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        again = signum == signal.SIGINT and signal.SIGINT in stopping.received
        stopping.received.append(signum)
        if again:
            if interrupts.hold_back():  # raised when the COMMIT returned
                return
            raise KeyboardInterrupt
        if signum == signal.SIGINT:
            os.write(2, _FIRST_INTERRUPT)
        stopping.stop.set()

    previous = {
        sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        with interrupts.saying(waiting):
            yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
