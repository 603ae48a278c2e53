"""A caller's statement, read before it runs inside the queue's transaction.

The store begins and ends its transactions. A statement of the caller's that
began or ended one (``COMMIT``, ``ROLLBACK`` without ``TO``, ...) would commit
an effect without its ACK, or leave the rest of the work outside any
transaction, so it is refused before it runs. Only the statement's first words
are read, after the whitespace and comments before them; each engine says
whether its comments nest (PostgreSQL's do, SQLite's do not).
"""

from __future__ import annotations

import re
from typing import Final

from ..errors import StatementRefused

# The first words of a statement that begins or ends a transaction, in either
# dialect (a word of the other dialect is a syntax error there, refused or not).
_ENDS_OR_BEGINS: Final = frozenset(
    {"BEGIN", "COMMIT", "END", "ROLLBACK", "ABORT", "START", "PREPARE"}
)
# ROLLBACK [WORK | TRANSACTION] TO ...: back to a savepoint, inside the transaction
_BACK_TO_SAVEPOINT: Final = re.compile(r"ROLLBACK(?:\s+(?:WORK|TRANSACTION))?\s+TO\b")
# PREPARE name AS ...: a prepared statement, not a prepared transaction
_PREPARE_STATEMENT: Final = re.compile(r"PREPARE\s+(?!TRANSACTION\b)")
# the queue's own savepoints are named with this prefix (completion.py)
RESERVED_SAVEPOINT_PREFIX: Final = "queue_core_"
_SAVEPOINT_WORDS: Final = frozenset({"SAVEPOINT", "RELEASE", "ROLLBACK"})
_WORDS: Final = re.compile(r"[A-Za-z_]+(?:\s+[A-Za-z_]+){0,2}")


def check_caller_statement(sql: str, *, nested_comments: bool) -> None:
    """Refuse ``sql`` (``StatementRefused``) if it would begin or end the transaction.

    Also a savepoint statement that names one of the queue's own savepoints
    (``queue_core_...``): rolled back to or released by a handler, it would
    undo or keep other messages' effects behind the store's back.
    """
    start = _after_comments(sql, 0, nested_comments)
    found = _WORDS.match(sql, start)
    if found is None:
        return
    words = " ".join(found.group(0).upper().split())
    first = words.split(" ", 1)[0]
    if first in _SAVEPOINT_WORDS and RESERVED_SAVEPOINT_PREFIX in sql.lower():
        raise StatementRefused(
            "savepoints named queue_core_... are the store's own: name yours otherwise",
            code="reserved_savepoint",
        )
    if first not in _ENDS_OR_BEGINS:
        return
    if _BACK_TO_SAVEPOINT.match(words) or _PREPARE_STATEMENT.match(words):
        return
    raise StatementRefused(
        f"{first} begins or ends the transaction, which the store does: "
        "run your statements inside it (SAVEPOINT and ROLLBACK TO are yours)",
        code="transaction_control",
    )


def after_comments(sql: str, at: int, nested_comments: bool) -> int:
    """Where the text from ``at`` goes on after whitespace and comments."""
    return _after_comments(sql, at, nested_comments)


def _after_comments(sql: str, at: int, nested: bool) -> int:
    while at < len(sql):
        if sql[at].isspace():
            at += 1
        elif sql.startswith("--", at):
            end = sql.find("\n", at)
            at = len(sql) if end < 0 else end + 1
        elif sql.startswith("/*", at):
            at = _block_comment_end(sql, at, nested)
        else:
            break
    return at


def _block_comment_end(sql: str, start: int, nested: bool) -> int:
    if not nested:
        end = sql.find("*/", start + 2)
        return len(sql) if end < 0 else end + 2
    depth, at = 0, start
    while at < len(sql):
        if sql.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif sql.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    return len(sql)  # unterminated: the server says so
