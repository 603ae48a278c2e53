"""A caller's SQL, written with ``?`` as sqlite3 takes it, as psycopg receives it.

``tx.execute`` runs the same text on both engines; on PostgreSQL each ``?``
that is a placeholder becomes ``%s``, and nothing else changes: a ``?`` in a
comment, a string, a quoted name or a dollar-quoted body stays, and ``%`` is
doubled. No server is needed: this is the text alone.
"""

from __future__ import annotations

import pytest

from queue_core.engines.postgres import caller_sql

CASES = [
    ("SELECT ?, ?", "SELECT %s, %s"),
    ("SELECT '?', ?", "SELECT '?', %s"),
    ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
    ("SELECT E'a\\'?b', ?", "SELECT E'a\\'?b', %s"),
    ('SELECT "col?" FROM t WHERE x = ?', 'SELECT "col?" FROM t WHERE x = %s'),
    ("SELECT $$ ? $$, ?", "SELECT $$ ? $$, %s"),
    ("SELECT $f$ a ? $x$ b $f$, ?", "SELECT $f$ a ? $x$ b $f$, %s"),
    ("SELECT ? -- is it?\n, ?", "SELECT %s -- is it?\n, %s"),
    ("SELECT /* a /* nested ? */ still ? */ ?", "SELECT /* a /* nested ? */ still ? */ %s"),
    ("SELECT 5 % 2, ?", "SELECT 5 %% 2, %s"),
]


@pytest.mark.parametrize(("written", "sent"), CASES, ids=[c[0][:30] for c in CASES])
def test_only_placeholders_become_percent_s(written: str, sent: str) -> None:
    assert caller_sql(written) == sent


def test_a_plain_question_mark_scan_would_break_these() -> None:
    # The negative control: what the earlier rule (quotes only) made of them.
    import re

    quotes_only = re.compile(r"'(?:[^']|'')*'|\?")

    def old(sql: str) -> str:
        return quotes_only.sub(lambda m: m.group(0) if m.group(0).startswith("'") else "%s",
                               sql.replace("%", "%%"))

    broken = [written for written, sent in CASES if old(written) != sent]
    assert len(broken) >= 5, broken  # dollar quotes, E'' strings, names, comments
