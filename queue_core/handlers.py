"""A handler's shape, checked before any claim: can it be called as the worker calls it?

A plain handler is called ``handler(tx, message)``; a ``LongHandler`` (two
steps, ``worker.py``) has ``prepare(message)`` and ``write(tx, message,
result)``. A handler that cannot take those arguments (``os:getcwd``, a
function of one argument) would fail on every message and send each one to
dead: it is refused at start instead, with a ``TypeError`` naming it and
what it must take.

The check binds placeholder arguments to ``inspect.signature``: positional
parameters, ``*args``, defaults and a class instance's ``__call__`` all
count as Python would count them. A callable whose signature Python cannot
read (some builtins written in C) is accepted: nothing can be checked
before it is called, and refusing it would refuse a handler that works.
"""

from __future__ import annotations

import inspect
from typing import Final

PLAIN_SHAPE: Final = "(tx, message)"
PREPARE_SHAPE: Final = "(message)"
WRITE_SHAPE: Final = "(tx, message, result)"


def check_handler_shape(handler: object) -> None:
    """Refuse (``TypeError``) a handler that cannot be called as the worker calls it."""
    steps = two_steps(handler)
    if steps is not None:
        prepare, write = steps
        check_callable_with(prepare, 1, f"{type(handler).__qualname__}.prepare", PREPARE_SHAPE)
        check_callable_with(write, 3, f"{type(handler).__qualname__}.write", WRITE_SHAPE)
        return
    if not callable(handler):
        raise TypeError(
            f"handler {describe(handler)} is not callable: it must be a function "
            f"taking {PLAIN_SHAPE}, or a LongHandler"
        )
    check_callable_with(handler, 2, describe(handler), PLAIN_SHAPE)


def two_steps(handler: object) -> tuple[object, object] | None:
    """``(prepare, write)`` of a two-step handler (a ``LongHandler``), else None.

    Known by its shape, so that this module needs nothing of ``worker.py``: an
    object that is not itself callable and has both steps.
    """
    if callable(handler):
        return None
    prepare = getattr(handler, "prepare", None)
    write = getattr(handler, "write", None)
    if prepare is None or write is None:
        return None
    return prepare, write


def check_callable_with(step: object, count: int, name: str, shape: str) -> None:
    """Refuse ``step`` unless ``count`` positional arguments bind to its signature."""
    if not callable(step):
        raise TypeError(
            f"handler {name} is not callable ({type(step).__name__}); "
            f"it must take {shape}"
        )
    try:
        signature = inspect.signature(step)
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): it is judged when called
    try:
        signature.bind(*range(count))
    except TypeError as exc:
        raise TypeError(
            f"handler {name} cannot be called as {shape}: its signature is "
            f"{signature} ({exc})"
        ) from None


def describe(handler: object) -> str:
    """The handler's name as an error shows it: module:qualified name where it has one."""
    module = getattr(handler, "__module__", None)
    name = getattr(handler, "__qualname__", None)
    if isinstance(name, str):
        return f"{module}:{name}" if isinstance(module, str) else name
    kind = type(handler)
    return f"{kind.__module__}:{kind.__qualname__} instance"
