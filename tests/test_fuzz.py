"""Hostile input: property-based fuzzing of the JSONL envelope, in process and through the CLI.

SPEC: "No input may crash or hang the parser (deep nesting, huge numbers, lone
surrogates): each is accepted or rejected with a code", "One bad line rejects
the whole batch: nothing is written. The error names the line number and a
stable machine-readable code".

For every generated input the only allowed outcomes are:

* a ``BatchRejected`` with a documented code, naming a line that exists and is
  the *first* bad line, after which the database is logically identical
  (every table, every row, the schema and the header pragmas);
* acceptance, after which each stored payload is exactly its canonical form,
  that form is a fixed point (``canonical(parse(stored)) == stored``),
  existing rows are untouched, and enqueueing the same bytes again is all
  duplicates.

Where the expected outcome can be computed independently (numbers, nesting,
Unicode), the test also checks *which* outcome it is.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis.control import currently_in_test_context
from hypothesis import strategies as st

from queue_core import (
    Batch,
    BatchRejected,
    Handler,
    ModelClock,
    Store,
    canonical_json,
    envelope,
    ledger,
    parse_batch,
)

CODES = {
    "file_too_large", "too_many_lines", "invalid_utf8", "invalid_json", "duplicate_key",
    "non_finite_number", "number_too_large", "nesting_too_deep", "invalid_unicode",
    "not_an_object", "missing_key", "unexpected_key", "invalid_event_id",
    "payload_not_object", "payload_too_large", "event_conflict",
}
FILE_LEVEL = {"file_too_large"}  # the only codes without a line
EVENT_ID = re.compile(r"E[0-9]{4}")
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(examples: int) -> settings:
    return settings(FUZZ, max_examples=examples)

SQL_LOOKING = [
    "'; DROP TABLE messages; --",
    "\"); DELETE FROM effects; --",
    "' OR '1'='1",
    "E0001' --",
    "1; UPDATE messages SET state='done'",
    "Robert'); DROP TABLE students;--",
    "%' AND 1=1 --",
    "\\'; ATTACH DATABASE '/tmp/x' AS x; --",
    "x' UNION SELECT payload FROM messages --",
    "PRAGMA writable_schema=1",
    "?", ":now", "@p", "$1", "NULL", "\x00",
]
ODD_CHARACTERS = [
    "\u2028", "\u2029", "\u0085", "\ufeff", "\u0000", "\u001f", "\u007f", "\ufffe", "\uffff",
    "\U0010ffff", "\u200b", "\u202e", "\u0301", "\U0001f600", "\ud83d", "\ude00", "\udfff",
    "\r", "\n", "\t", '"', "\\", "/", "\u0660", "\uff10",
]


def spec_canonical(value: Any) -> str:
    """SPEC's canonical form, written out here so that the test does not trust the code under test."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def test_the_fuzzed_codes_are_the_documented_ones() -> None:
    for code in CODES:
        assert f"``{code}``" in envelope.__doc__, code


# ---------------------------------------------------------------- checking


def first_bad_line(data: bytes, exc: BatchRejected) -> None:
    """The reported line exists, everything before it is fine, and it fails alone with that code."""
    assert exc.code in CODES, exc.code
    text = str(exc)
    assert exc.code in text
    if exc.code in FILE_LEVEL:
        assert exc.line is None
        return
    raw_lines = data.split(b"\n")
    assert isinstance(exc.line, int) and 1 <= exc.line <= len(raw_lines), (exc.line, len(raw_lines))
    assert text.startswith(f"line {exc.line}: {exc.code}: ")
    prefix = b"\n".join(raw_lines[: exc.line - 1])
    if exc.code == "too_many_lines":
        return
    parse_batch(prefix)  # must not raise: the reported line is the first bad one
    if exc.code == "event_conflict":
        return  # needs an earlier line; the prefix parsed, so this line's id repeats one of it
    raw = raw_lines[exc.line - 1]
    if exc.line == 1 and raw.startswith(envelope.UTF8_BOM):
        raw = raw[len(envelope.UTF8_BOM):]
    if exc.code == "invalid_utf8":
        with pytest.raises(UnicodeDecodeError):
            raw.decode("utf-8")
        return
    with pytest.raises(envelope._Reject) as alone:
        envelope.parse_line(raw.decode("utf-8"), exc.line)
    assert alone.value.code == exc.code


def check_batch(data: bytes, batch: Batch) -> None:
    """An accepted batch: canonical payloads within the limits, ids in the format."""
    non_blank = [raw for raw in data.split(b"\n") if raw.strip(b" \t\r")]
    assert len(batch.events) + batch.duplicates_in_batch <= len(non_blank)
    for event in batch.events:
        assert EVENT_ID.fullmatch(event.event_id)
        value = json.loads(event.payload)
        assert isinstance(value, dict)
        assert spec_canonical(value) == event.payload  # a fixed point, in SPEC's canonical form
        assert len(event.payload.encode("utf-8")) <= envelope.MAX_PAYLOAD_BYTES


def label(text: str) -> None:
    """Count outcomes in hypothesis' statistics (--hypothesis-show-statistics)."""
    if currently_in_test_context():
        event(text)


def outcome(data: bytes) -> Batch | BatchRejected:
    """parse_batch(data) may only accept or reject with a code (and a correct line)."""
    started = time.monotonic()
    try:
        batch = parse_batch(data)
    except BatchRejected as exc:
        first_bad_line(data, exc)
        label(f"rejected: {exc.code}")
        result: Batch | BatchRejected = exc
    else:
        check_batch(data, batch)
        label("accepted" if batch.events else "accepted: nothing but blank lines")
        result = batch
    assert time.monotonic() - started < 10, "the parser took too long"
    return result


def logical(path: Path) -> dict[str, Any]:
    """Everything a reader can see: header pragmas, schema, every row of every table."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        state: dict[str, Any] = {
            "application_id": conn.execute("PRAGMA application_id").fetchone()[0],
            "user_version": conn.execute("PRAGMA user_version").fetchone()[0],
            "schema": sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall(),
                             key=repr),
        }
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            state[table] = sorted(conn.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
        return state
    finally:
        conn.close()


class Seeded:
    """One queue per module, with messages in every state and an effect."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.clock = ModelClock(1000)
        self.store = Store(path, clock=self.clock)
        ledger.install(self.store)  # the reference application's effects table
        lines = [json.dumps({"event_id": f"E{n:04d}", "payload": {"category": "book", "amount_cents": n + 1}})
                 for n in range(6)]
        lines.append(json.dumps({"event_id": "E0006", "payload": {"category": "toy", "amount_cents": 1}}))
        self.store.enqueue("\n".join(lines))
        handler = Handler()
        self.store.complete(self.store.claim(), handler)  # E0000 done, with an effect
        self.store.fail(self.store.claim(), "flaky")  # E0001 waits for a retry
        self.store.claim()  # E0002 leased
        self.store.redrive([])  # a no-op write
        for _ in range(3):
            self.store.claim()  # E0003..E0005 leased
        self.store.complete(self.store.claim(), handler)  # E0006 (toy) dead
        self.ids = itertools.count(100)

    def enqueue(self, data: bytes) -> None:
        """Enqueue through the store; check the result against the envelope and the database."""
        expected = outcome(data)
        before = logical(self.path)
        try:
            result = self.store.enqueue(data)
        except BatchRejected as exc:
            after = logical(self.path)
            assert after == before, "a rejected batch changed the database"
            if isinstance(expected, BatchRejected):
                assert (exc.code, exc.line) == (expected.code, expected.line)
            else:  # the envelope was fine: only the stored payloads can refuse it
                assert exc.code == "event_conflict"
                stored = {row[0]: row[1] for row in before["messages"]}
                event = next(e for e in expected.events if e.line == exc.line)
                assert stored[event.event_id] != event.payload
            return
        assert isinstance(expected, Batch), f"accepted what the envelope rejects: {expected}"
        after = logical(self.path)
        stored_before = {row[0]: row for row in before["messages"]}
        stored_after = {row[0]: row for row in after["messages"]}
        new = set(stored_after) - set(stored_before)
        assert result.accepted == len(new)
        assert result.accepted + result.duplicates == len(expected.events) + expected.duplicates_in_batch
        for event in expected.events:
            row = stored_after[event.event_id]
            assert row[1] == event.payload  # stored exactly in canonical form
            assert spec_canonical(json.loads(row[1])) == row[1]
            if event.event_id in new:
                # ... lease_until, last_error, last_detail; then enqueued_at and the rest;
                # the queue, no lease token (0), no retry yet (0), priority 0, last
                now = self.clock.now()
                assert row[2:] == ("ready", 0, 0, now, None, None, None, now, None, 0, None, "default", 0, 0, 0)
        for event_id, row in stored_before.items():
            assert stored_after[event_id] == row  # nothing stored was touched
        assert {k: v for k, v in after.items() if k != "messages"} == {
            k: v for k, v in before.items() if k != "messages"}
        again = self.store.enqueue(data)  # the same bytes again: all duplicates
        assert (again.accepted, again.duplicates) == (0, result.accepted + result.duplicates)
        assert logical(self.path) == after


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return Seeded(tmp_path_factory.mktemp("fuzz") / "q.sqlite3")


# ------------------------------------------------------------- strategies

# Lone surrogates have their own test below; here every string can be stored as UTF-8.
_keys = st.one_of(st.text(max_size=8),
                  st.sampled_from(SQL_LOOKING + [c for c in ODD_CHARACTERS if not 0xD800 <= ord(c[0]) <= 0xDFFF]))
_leaves = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=10), st.sampled_from(SQL_LOOKING),
)
_values = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
                       max_leaves=10)
_payloads = st.dictionaries(_keys, _values, max_size=5)
# Low ids overlap the seeded ones (duplicates and conflicts); high ones are almost always new,
# so that a conflict often comes after new events that must then not be written either.
_ids = st.one_of(st.integers(0, 11), st.integers(1000, 9999)).map(lambda n: f"E{n:04d}")


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    """A valid batch with the envelope's legal variations: BOM, CRLF, blank lines, key order, spacing."""
    lines = []
    for event_id, payload in draw(st.lists(st.tuples(_ids, _payloads), min_size=1, max_size=6)):
        fields = [("event_id", event_id), ("payload", payload)]
        if draw(st.booleans()):
            fields.reverse()
        separators = draw(st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]))
        text = json.dumps(dict(fields), ensure_ascii=draw(st.booleans()), separators=separators)
        lines.append(text.encode("utf-8", "surrogatepass"))
        lines.extend(draw(st.lists(st.sampled_from([b"", b" ", b"\t", b"\r", b" \t\r"]), max_size=2)))
    end = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = end.join(lines) + draw(st.sampled_from([b"", end]))
    return (envelope.UTF8_BOM if draw(st.booleans()) else b"") + data


HOSTILE_FRAGMENTS = [
    b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999", b"9" * 5000, b"0." + b"1" * 3000,
    b'"\\ud800"', b'"\\udfff\\ud800"', b"\xed\xa0\x80", b"\xff", b"\xc3", b"\xf4\x90\x80\x80",
    b"[" * 150, b"{" * 150, b'{"a":' * 150, b"]" * 50, b"}" * 50, b"[" * 99 + b"]" * 99,
    b'"', b"\\", b'\\"', b"\\u", b"\\u12", b",", b":", b"\x00", b"\r", b"\n", b"\r\n", b" \n \n",
    envelope.UTF8_BOM, "\u2028".encode(), "\u0085".encode(), "\U0001f600".encode(),
    b'"event_id"', b'"payload"', b'"E0001"', b'"E00001"', b'"e0001"', b'{"a":1,"a":2}',
    b'{"event_id":"E0007","payload":{}}', b'{"event_id":"E0000","payload":{"x":1}}',
    b"'; DROP TABLE messages; --", b"' OR '1'='1", b"true", b"null", b"[]", b"{}", b"-", b"01", b"1.", b".5",
]


BENIGN_FRAGMENTS = [b" ", b"\t", b"\r\n", b"\n\n", b"\n \t\r\n", "\u2028".encode(), "\u00e9".encode(), b"x"]


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_batches()))
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 3, 4]))):
        kind = draw(st.sampled_from(["flip", "insert", "insert", "benign", "delete", "duplicate_line",
                                     "duplicate_line", "truncate"]))
        at = draw(st.integers(0, max(0, len(data))))
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(HOSTILE_FRAGMENTS))
        elif kind == "benign":  # whitespace between tokens, or new content inside a string
            data[at:at] = draw(st.sampled_from(BENIGN_FRAGMENTS))
        elif kind == "delete":
            del data[at: at + draw(st.integers(1, 20))]
        elif kind == "truncate":
            del data[at:]
        elif kind == "duplicate_line":
            lines = bytes(data).split(b"\n")
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(draw(st.integers(0, len(lines))), lines[i])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


# ------------------------------------------------------------ properties


@fuzz(300)
@given(data=st.binary(max_size=600))
def test_random_bytes_are_accepted_or_cleanly_rejected(seeded: Seeded, data: bytes) -> None:
    seeded.enqueue(data)


@fuzz(300)
@given(data=st.one_of(
    st.lists(st.sampled_from(HOSTILE_FRAGMENTS + [b"\n", b" ", b"{", b"}", b"[", b"]", b'"a"', b"1"]),
             max_size=30).map(b"".join),
    st.text(alphabet='{}[]":,\\ \n\rtrufalsenNI0123456789.eE+-E0001abcdefpyloadvnt_', max_size=200)
      .map(lambda t: t.encode()),
))
def test_json_shaped_noise_is_accepted_or_cleanly_rejected(seeded: Seeded, data: bytes) -> None:
    seeded.enqueue(data)


@fuzz(200)
@given(data=valid_batches())
def test_valid_batches_are_accepted_and_round_trip(seeded: Seeded, data: bytes) -> None:
    # Valid envelopes can still conflict with each other or with the seeded rows
    # (same id, other payload): that is the one rejection allowed here.
    result = outcome(data)
    if isinstance(result, BatchRejected):
        assert result.code == "event_conflict", result  # the same id twice with two payloads
    seeded.enqueue(data)


@fuzz(400)
@given(data=mutated_batches())
def test_mutated_valid_batches_are_accepted_or_cleanly_rejected(seeded: Seeded, data: bytes) -> None:
    seeded.enqueue(data)


# --------------------------------------------------------------- nesting

@fuzz(150)
@given(depth=st.one_of(st.integers(1, 120), st.integers(1, 200_000)),
       kinds=st.lists(st.sampled_from("[{"), min_size=1, max_size=5),
       closed=st.booleans(), in_string=st.booleans())
def test_deep_nesting_is_rejected_by_depth_not_by_a_crash(
    seeded: Seeded, depth: int, kinds: list[str], closed: bool, in_string: bool
) -> None:
    opening, closing = [], []
    for level in range(depth):
        kind = kinds[level % len(kinds)]
        opening.append("[" if kind == "[" else '{"k":')
        closing.append("]" if kind == "[" else "}")
    nest = "".join(opening) + "0" + ("".join(reversed(closing)) if closed else "")
    if in_string:  # brackets inside a string are content, never nesting
        nest = json.dumps(nest)
    line = ('{"event_id":"E0050","payload":{"a":' + nest + "}}").encode()
    assume(len(line) <= envelope.MAX_FILE_BYTES)
    result = outcome(line)
    if in_string:
        payload_bytes = len(canonical_json({"a": json.loads(nest)}).encode())
        # A string: no nesting at all; only the payload size can refuse it.
        expected_ok = payload_bytes <= envelope.MAX_PAYLOAD_BYTES
        assert isinstance(result, Batch) == expected_ok, result
        if not expected_ok:
            assert result.code == "payload_too_large"
    elif depth + 2 > envelope.MAX_DEPTH:  # the line's object and the payload are two levels
        assert isinstance(result, BatchRejected) and result.code == "nesting_too_deep", result
    elif not closed:
        assert isinstance(result, BatchRejected) and result.code == "invalid_json", result
    else:
        assert isinstance(result, Batch), result
        assert result.events[0].payload == canonical_json({"a": json.loads(nest)})
    seeded.enqueue(line.replace(b"E0050", f"E{next(seeded.ids):04d}".encode()))


# ---------------------------------------------------------------- numbers

@st.composite
def number_texts(draw: st.DrawFn) -> str:
    """JSON-ish number texts, up to thousands of digits, with odd exponents."""
    def digits(max_len: int, near: int | None = None) -> str:
        pattern = draw(st.text("0123456789", min_size=1, max_size=6))
        lengths = [st.integers(1, 25), st.integers(1, max_len)]
        if near is not None:  # around the integer limit
            lengths.append(st.integers(near - 3, near + 3))
        length = draw(st.one_of(*lengths))
        return (pattern * (length // len(pattern) + 1))[:length]

    text = draw(st.sampled_from(["", "-"])) + digits(6000, near=envelope.MAX_INT_DIGITS)
    if draw(st.booleans()):
        text += "." + digits(400)
    if draw(st.booleans()):
        text += draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+", "-"])) + digits(25)
    return text


JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def expected_number(text: str) -> tuple[str, Any]:
    """("ok", value) or ("reject", code), computed from the JSON grammar and IEEE doubles."""
    if not JSON_NUMBER.fullmatch(text):
        return "reject", "invalid_json"
    if re.fullmatch(r"-?[0-9]+", text):  # an integer stays an integer, up to 4,300 digits
        digits = len(text.lstrip("-"))
        if digits > envelope.MAX_INT_DIGITS:
            return "reject", "number_too_large"
        return "ok", int(text)
    value = float(text)
    if math.isinf(value):
        return "reject", "non_finite_number"
    return "ok", value


@fuzz(300)
@given(text=number_texts(), in_array=st.booleans())
def test_huge_and_odd_numbers(seeded: Seeded, text: str, in_array: bool) -> None:
    value_text = f"[1,{text}]" if in_array else text
    line = f'{{"event_id":"E0051","payload":{{"n":{value_text}}}}}'.encode()
    result = outcome(line)
    kind, expected = expected_number(text)
    if kind == "reject":
        assert isinstance(result, BatchRejected) and (result.code, result.line) == (expected, 1), (text[:60], result)
    else:
        value = [1, expected] if in_array else expected
        canonical = canonical_json({"n": value})
        if len(canonical.encode()) > envelope.MAX_PAYLOAD_BYTES:
            assert isinstance(result, BatchRejected) and result.code == "payload_too_large"
        else:
            assert isinstance(result, Batch), (text[:60], result)
            assert result.events[0].payload == canonical
            stored = json.loads(result.events[0].payload)["n"]
            assert type(stored if not in_array else stored[1]) is type(expected)  # 1 and 1.0 stay apart
    seeded.enqueue(line.replace(b"E0051", f"E{next(seeded.ids):04d}".encode()))


@pytest.mark.parametrize("text", ["1e400", "-1e400", "1.8e308", "1e99999999999999999999", "-0.0", "0e999999999",
                                  "1e-400", "4.9e-324", "1.7976931348623157e308", "9" * 4300, "-" + "9" * 4300,
                                  "9" * 4301, "0." + "0" * 5000 + "1"])
def test_number_boundaries(text: str) -> None:
    kind, expected = expected_number(text)
    result = outcome(f'{{"event_id":"E0001","payload":{{"n":{text}}}}}'.encode())
    if kind == "reject":
        assert isinstance(result, BatchRejected) and result.code == expected
    else:
        assert isinstance(result, Batch)
        assert result.events[0].payload == canonical_json({"n": expected})


# ---------------------------------------------------------------- Unicode

_odd_text = st.lists(
    st.one_of(st.characters(), st.characters(), st.sampled_from(ODD_CHARACTERS), st.integers(0xD800, 0xDFFF).map(chr)),
    max_size=10,
).map("".join)


def has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


@fuzz(300)
@given(key=_odd_text, value=_odd_text, ensure_ascii=st.booleans(), event_id=st.one_of(st.none(), st.none(), _odd_text))
def test_odd_unicode_in_keys_values_and_ids(seeded: Seeded, key: str, value: str, ensure_ascii: bool,
                                            event_id: str | None) -> None:
    eid = event_id if event_id is not None else "E0052"
    payload: dict[str, object] = {key: value}
    payload.setdefault("k", 1)  # a second key, unless the drawn key is "k" (a literal would drop value)
    text = json.dumps({"event_id": eid, "payload": payload}, ensure_ascii=ensure_ascii)
    line = text.encode("utf-8", "surrogatepass")
    result = outcome(line)
    if not ensure_ascii:
        # Raw surrogates can only be written as invalid UTF-8 (CESU-8 style).
        if has_surrogate(key + value + eid):
            assert isinstance(result, BatchRejected) and result.code == "invalid_utf8"
            return
    decoded = json.loads(text)  # what the JSON text means (escaped pairs join into one character)
    bad_id = not (isinstance(decoded["event_id"], str) and EVENT_ID.fullmatch(decoded["event_id"]))
    if bad_id:
        assert isinstance(result, BatchRejected) and result.code == "invalid_event_id", result
    elif any(has_surrogate(k) or has_surrogate(str(v)) for k, v in decoded["payload"].items()):
        assert isinstance(result, BatchRejected) and result.code == "invalid_unicode", result
    else:
        assert isinstance(result, Batch), result
        assert json.loads(result.events[0].payload) == decoded["payload"]
        assert result.events[0].payload == canonical_json(decoded["payload"])
    if not bad_id:
        seeded.enqueue(line.replace(b'"E0052"', f'"E{next(seeded.ids):04d}"'.encode()))


def test_line_separators_inside_strings_are_content(seeded: Seeded) -> None:
    value = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg\x1dh\x1ei"
    line = json.dumps({"event_id": "E0053", "payload": {"s": value}}, ensure_ascii=False).encode()
    assert b"\n" not in line and "\u2028".encode() in line
    batch = outcome(line)
    assert isinstance(batch, Batch) and json.loads(batch.events[0].payload) == {"s": value}
    seeded.enqueue(line)
    assert seeded.store.message("E0053").payload_object == {"s": value}


# ----------------------------------------------------------- SQL-looking

@fuzz(100)
@given(key=st.sampled_from(SQL_LOOKING), value=st.sampled_from(SQL_LOOKING), extra=st.text(max_size=5),
       as_id=st.booleans())
def test_sql_looking_strings_are_plain_data(seeded: Seeded, key: str, value: str, extra: str, as_id: bool) -> None:
    event_id = value + extra if as_id else f"E{next(seeded.ids):04d}"
    line = json.dumps({"event_id": event_id, "payload": {key: value + extra, "sql": [key, value]}}).encode()
    result = outcome(line)
    if as_id:
        assert isinstance(result, BatchRejected) and result.code == "invalid_event_id"
    else:
        assert isinstance(result, Batch)
    seeded.enqueue(line)
    if not as_id:
        stored = seeded.store.message(event_id).payload_object
        assert stored == {key: value + extra, "sql": [key, value]}
    # The schema and the seeded rows are still there (checked in full by Seeded.enqueue).
    assert {"messages", "effects"} <= set(logical(seeded.path))


# ----------------------------------------- one bad line at a known position

@fuzz(150)
@given(good=valid_batches(), bad=st.sampled_from([
    (b'{"event_id":"E0001","payload":{"a":NaN}}', "non_finite_number"),
    (b'{"event_id":"E0001","payload":{"a":1e400}}', "non_finite_number"),
    (b'{"event_id":"E0001","payload":{"a":' + b"[" * 500 + b"}}", "nesting_too_deep"),
    (b'{"event_id":"E0001","payload":{"a":"\\ud800"}}', "invalid_unicode"),
    (b'{"event_id":"E0001","payload":{"a":"\xff"}}', "invalid_utf8"),
    (b'{"event_id":"E0001","payload":{"a":1,"a":1}}', "duplicate_key"),
    (b'{"event_id":"E0001","payload":{"a":' + b"1" * 4301 + b"}}", "number_too_large"),
    (b'{"event_id":"\'; DROP TABLE messages; --","payload":{}}', "invalid_event_id"),
    (b"\xef\xbb\xbf{}", "invalid_json"),
]), where=st.integers(0, 100))
def test_one_bad_line_is_named_by_its_physical_number(seeded: Seeded, good: bytes, bad: tuple[bytes, str],
                                                       where: int) -> None:
    good_result = outcome(good)
    assume(isinstance(good_result, Batch))  # the good part is valid on its own
    lines = good.split(b"\n")
    # Insert before a line that does not start with the BOM (a BOM is only valid at the start).
    position = 1 + where % len(lines)
    lines.insert(position, bad[0])
    data = b"\n".join(lines)
    result = outcome(data)
    assert isinstance(result, BatchRejected)
    assert (result.code, result.line) == (bad[1], position + 1)
    seeded.enqueue(data)


# ------------------------------------------------------------------- CLI

CLI_FILES = {
    "deep-brackets-1MB": (b"[" * 999_999, {2}),
    "deep-objects-in-payload": (b'{"event_id":"E0001","payload":' + b'{"a":' * 190_000, {2}),
    "unterminated-escapes": (b'{"event_id":"E0001","payload":{"a":"' + b'\\"' * 490_000, {2}),
    "int-900k-digits": (b'{"event_id":"E0001","payload":{"a":' + b"7" * 900_000 + b"}}", {2}),
    "exponent-900k-digits": (b'{"event_id":"E0001","payload":{"a":1e' + b"7" * 900_000 + b"}}", {2}),
    "random-bytes": (bytes((i * 7919 + 13) % 256 for i in range(200_000)), {2}),
    "lone-surrogate": (b'{"event_id":"E0001","payload":{"a":"\\udfff"}}\n', {2}),
    "cesu-surrogate": (b'{"event_id":"E0001","payload":{"a":"\xed\xa0\x80"}}\n', {2}),
    "sql-in-id": (b'{"event_id":"E0001\'; DROP TABLE messages; --","payload":{}}\n', {2}),
    "sql-in-payload": (b'{"event_id":"E0001","payload":{"\'; DROP TABLE messages; --":"\' OR 1=1"}}\n', {0}),
    "u2028-inside": ('{"event_id":"E0002","payload":{"s":"a\u2028b\u0085c"}}\r\n'.encode(), {0}),
    "1000-lines-depth-97": (b"\n".join(b'{"event_id":"E%04d","payload":' % i + b'{"a":' * 97 + b"1" + b"}" * 97 + b"}"
                                      for i in range(1000)), {0}),
    "1001-lines": (b"\n".join(b'{"event_id":"E%04d","payload":{}}' % i for i in range(1001)), {2}),
    "over-1MB": (b'{"event_id":"E0001","payload":{}}\n' + b" " * 1_000_000, {2}),
}


@pytest.mark.parametrize("name", sorted(CLI_FILES))
def test_hostile_files_through_the_cli(tmp_path: Path, name: str) -> None:
    data, allowed = CLI_FILES[name]
    db = tmp_path / "q.sqlite3"
    seed = tmp_path / "seed.jsonl"
    seed.write_bytes(b'{"event_id":"E9999","payload":{"category":"book","amount_cents":1}}\n')
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(db), "--now", "1000", "enqueue",
                           str(seed)], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    before = logical(db)
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_bytes(data)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "queue_core", "--db", str(db), "--now", "1000", "enqueue",
                           str(hostile)], capture_output=True, timeout=120)
    elapsed = time.monotonic() - started
    stderr = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode in allowed, (proc.returncode, stderr)
    assert "Traceback" not in stderr and "unexpected error" not in stderr
    assert elapsed < 60
    if proc.returncode == 2:
        assert proc.stdout == b""
        assert len(stderr.splitlines()) == 1, stderr
        assert stderr.startswith("queue-core: batch rejected, nothing written: ")
        assert any(f"{code}: " in stderr for code in CODES), stderr
        assert logical(db) == before
    else:
        assert set(json.loads(proc.stdout)) == {"accepted", "duplicates"}
        assert stderr == ""
        after = logical(db)
        assert len(after["messages"]) > len(before["messages"])
        # Everything stored is in canonical form.
        assert all(canonical_json(json.loads(row[1])) == row[1] for row in after["messages"])


# ------------------------------------------------- the everyday fast path
# parse_batch reads a plain line through envelope._plain_line (one C scan, no
# hooks for keys or integers) and sends everything else to parse_line. The
# fast path may decline any line, but what it accepts must be exactly what the
# full path returns, and it must accept nothing the full path rejects.

def full_path(text: str, number: int) -> envelope.Event | str:
    try:
        return envelope.parse_line(text, number)
    except envelope._Reject as exc:
        return exc.code


def check_fast_path_agrees(data: bytes) -> None:
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue
        stripped = text.strip(" \t\r")
        if not stripped:
            continue
        fast = envelope._plain_line(stripped, number)
        if fast is not None:
            assert full_path(text, number) == fast, (raw, fast)


@fuzz(300)
@given(data=st.one_of(valid_batches(), mutated_batches()))
def test_the_fast_path_accepts_only_what_the_full_path_accepts(data: bytes) -> None:
    check_fast_path_agrees(data)


@fuzz(300)
@given(data=st.text(alphabet='{}[]":,\\ \n\rtrufalsenNI0123456789.eE+-E0001abcdefpyloadvnt_u', max_size=200)
       .map(lambda t: t.encode()))
def test_the_fast_path_agrees_on_json_shaped_noise(data: bytes) -> None:
    check_fast_path_agrees(data)


@pytest.mark.parametrize("line, code", [
    ('{"event_id":"E0001","payload":{"a":1,"a":2}}', "duplicate_key"),
    ('{"event_id":"E0001","payload":{"a":{"b":1,"b":1}}}', "duplicate_key"),
    ('{"event_id":"E0001","payload":{},"payload":{}}', "duplicate_key"),
    ('{"event_id":"E0001","event_id":"E0001","payload":{}}', "duplicate_key"),
    # An escaped colon in a surviving string would balance the colon that a
    # dropped pair took with it: such lines take the full path.
    ('{"event_id":"E0001","payload":{"a":1,"a":2,"b":"\\u003a"}}', "duplicate_key"),
    ('{"event_id":"E0001","payload":{"a":1e400}}', "non_finite_number"),
    ('{"event_id":"E0001","payload":{"a":NaN}}', "non_finite_number"),
    ('{"event_id":"E0001","payload":{"a":' + "9" * 4301 + "}}", "number_too_large"),
    ('{"event_id":"E0001","payload":{"a":' + "[" * 101 + "]" * 101 + "}}", "nesting_too_deep"),
    ('{"event_id":"E0001","payload":{"a":"\\ud800"}}', "invalid_unicode"),
    ('{"event_id":"E0001","payload":{"a":"' + "x" * 10_000 + '"}}', "payload_too_large"),
    ('{"event_id":"E0001","payload":{}} {}', "invalid_json"),
])
def test_lines_the_fast_path_must_decline_are_rejected_with_their_code(line: str, code: str) -> None:
    assert envelope._plain_line(line, 1) is None
    with pytest.raises(BatchRejected) as rejected:
        parse_batch(line.encode())
    assert rejected.value.code == code


def test_the_fast_path_takes_the_everyday_line() -> None:
    # Otherwise the tests above would pass with a fast path that declines everything.
    line = '{"event_id": "E0001", "payload": {"category": "book", "amount_cents": 7, "note": "a:b"}}'
    event = envelope._plain_line(line, 3)
    assert event == envelope.Event("E0001", '{"amount_cents":7,"category":"book","note":"a:b"}', 3)
    assert event == envelope.parse_line(line, 3)
