"""The JSONL batch envelope (SPEC "Input: a JSONL batch"), rule by rule, at each boundary.

Everything is fed as real bytes. Whatever is about writing runs twice
(tests/conformance/conftest.py): against a real SQLite file in ``tmp_path`` and
against a fresh database of the session's throwaway PostgreSQL server, through
conftest's ``store`` fixture. Each rejection is checked for its code, its line
(``None`` only for file-level problems) and ``str(exc)``, which must name both.
"""

from __future__ import annotations

import itertools
import json
import re
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import queue_core
from queue_core import BatchRejected, InputError, UnknownEvent, canonical_json, parse_batch
from queue_core import envelope

from ..postgres_server import PORT, SERVER_USER

MAX_DEPTH = envelope.MAX_DEPTH
BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------- helpers


def ev(event_id: str, payload: str = "{}") -> bytes:
    """One JSONL line (no line end). ``payload`` is raw JSON text, put in as written."""
    return f'{{"event_id":"{event_id}","payload":{payload}}}'.encode()


def text_payload(chars: str) -> str:
    """``{"k":"<chars>"}``: its canonical form is ``len(chars.encode()) + 8`` bytes."""
    return '{"k":"' + chars + '"}'


def rejected(data: bytes, code: str, line: int | None) -> BatchRejected:
    """parse_batch(data) must raise BatchRejected(code) naming ``line``."""
    with pytest.raises(BatchRejected) as info:
        parse_batch(data)
    return check_rejection(info.value, code, line)


def check_rejection(exc: BatchRejected, code: str, line: int | None) -> BatchRejected:
    assert (exc.code, exc.line) == (code, line), str(exc)
    assert isinstance(exc, InputError) and exc.exit_status == 2
    text = str(exc)
    if line is None:
        assert text.startswith(f"{code}: "), text
    else:
        assert isinstance(line, int)
        assert text.startswith(f"line {line}: {code}: "), text
    assert len(text) > len(f"line {line}: {code}: ")  # and a human sentence follows
    return exc


def accepted(data: bytes) -> queue_core.Batch:
    batch = parse_batch(data)
    assert isinstance(batch, queue_core.Batch)
    return batch


def only_payload(data: bytes) -> str:
    """The canonical payload of a batch that must hold exactly one event."""
    batch = accepted(data)
    assert len(batch.events) == 1
    return batch.events[0].payload


def row_count(store: queue_core.Store) -> int:
    """The rows of the messages table, counted with the engine's own driver (not through queue_core)."""
    query = "SELECT count(*) FROM messages"
    if isinstance(store.target, str):  # a postgresql:// URL
        import psycopg

        with psycopg.connect(store.target) as pg:
            row = pg.execute(query).fetchone()
    else:
        conn = sqlite3.connect(store.target)
        try:
            row = conn.execute(query).fetchone()
        finally:
            conn.close()
    assert row is not None
    return int(row[0])


# ``store`` is conftest's: a fresh queue at model time 1000, on each engine in turn.


SEED = ev("E9000", '{"seed":1}') + b"\n" + ev("E9001", '{"seed":2}') + b"\n"


@pytest.fixture
def seeded(store):
    assert store.enqueue(SEED) == queue_core.EnqueueResult(accepted=2, duplicates=0)
    return store


def assert_rejected_and_unchanged(store: queue_core.Store, data: bytes, code: str,
                                  line: int | None, *, absent: tuple[str, ...] = ()) -> None:
    before, rows = store.messages(), row_count(store)
    with pytest.raises(BatchRejected) as info:
        store.enqueue(data)
    check_rejection(info.value, code, line)
    assert store.messages() == before
    assert row_count(store) == rows
    for event_id in absent:
        with pytest.raises(UnknownEvent):
            store.message(event_id)


# -------------------------------------------- one bad line rejects the batch
#
# Each bad line is put at physical line 3, between a valid new event (line 1),
# a blank line (line 2) and another valid new event (line 4).

GOOD_BEFORE = ev("E0100", '{"ok":1}')
GOOD_AFTER = ev("E0101", '{"ok":2}')

BAD_LINES = [
    # invalid UTF-8
    pytest.param(b'{"event_id":"E0001","payload":{"a":"\xff"}}', "invalid_utf8", id="utf8-ff"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"\xc3"}}', "invalid_utf8", id="utf8-truncated"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"\xc0\xaf"}}', "invalid_utf8", id="utf8-overlong"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"\xed\xa0\x80"}}', "invalid_utf8",
                 id="utf8-encoded-surrogate"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"\xf4\x90\x80\x80"}}', "invalid_utf8",
                 id="utf8-above-10ffff"),
    pytest.param(b"\xef\xbb", "invalid_utf8", id="utf8-partial-bom"),
    # invalid JSON
    pytest.param(b"{", "invalid_json", id="json-unclosed"),
    pytest.param(b'{"event_id":"E0001","payload":{},}', "invalid_json", id="json-trailing-comma"),
    pytest.param(b"{'event_id':'E0001','payload':{}}", "invalid_json", id="json-single-quotes"),
    pytest.param(ev("E0001") + b" " + ev("E0002"), "invalid_json", id="json-two-values"),
    pytest.param(ev("E0001") + b"\r" + ev("E0002"), "invalid_json", id="json-lone-cr-is-no-separator"),
    pytest.param(ev("E0001") + b"x", "invalid_json", id="json-trailing-garbage"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"tab\there"}}', "invalid_json",
                 id="json-raw-control-char"),
    pytest.param(BOM + ev("E0001"), "invalid_json", id="json-bom-not-at-file-start"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":01}}', "invalid_json", id="json-leading-zero"),
    pytest.param(b'{"event_id":"E0001","payload":{"a":"' + b'\\"' * 450_000, "invalid_json",
                 id="json-hostile-unterminated-escapes-900KB"),
    # duplicate keys, at every depth and through escapes
    pytest.param(b'{"event_id":"E0001","event_id":"E0001","payload":{}}', "duplicate_key", id="dup-top-id"),
    pytest.param(b'{"event_id":"E0001","payload":{},"payload":{}}', "duplicate_key", id="dup-top-payload"),
    pytest.param(ev("E0001", '{"a":1,"a":1}'), "duplicate_key", id="dup-payload-same-value"),
    pytest.param(ev("E0001", '{"a":1,"b":2,"a":3}'), "duplicate_key", id="dup-payload"),
    pytest.param(ev("E0001", '{"x":{"y":[1,{"z":[{"d":1,"d":2}]}]}}'), "duplicate_key", id="dup-deep"),
    pytest.param(ev("E0001", '{"a":1,"\\u0061":2}'), "duplicate_key", id="dup-via-escape"),
    pytest.param(ev("E0001", '{"x":[{"\\u0061":1,"a":2}]}'), "duplicate_key", id="dup-via-escape-nested"),
    pytest.param(ev("E0001", '{"\\ud83d\\ude00":1,"\\uD83D\\uDE00":2}'), "duplicate_key",
                 id="dup-surrogate-pair-hex-case"),
    pytest.param(b'{"event_id":"E0001","payload":{"\xf0\x9f\x98\x80":1,"\\ud83d\\ude00":2}}',
                 "duplicate_key", id="dup-raw-utf8-vs-escape"),
    # non-finite numbers
    pytest.param(ev("E0001", '{"a":NaN}'), "non_finite_number", id="nan"),
    pytest.param(ev("E0001", '{"a":Infinity}'), "non_finite_number", id="infinity"),
    pytest.param(ev("E0001", '{"a":-Infinity}'), "non_finite_number", id="minus-infinity"),
    pytest.param(ev("E0001", '{"a":1e400}'), "non_finite_number", id="1e400"),
    pytest.param(ev("E0001", '{"a":-1e400}'), "non_finite_number", id="minus-1e400"),
    pytest.param(ev("E0001", '{"a":1.8e308}'), "non_finite_number", id="just-above-max-float"),
    pytest.param(ev("E0001", '{"a":[1,{"b":[1E400]}]}'), "non_finite_number", id="nested-1E400"),
    pytest.param(ev("E0001", '{"a":' + "9" * 400 + ".0}"), "non_finite_number", id="long-float-overflows"),
    pytest.param(b'{"event_id":NaN,"payload":{}}', "non_finite_number", id="nan-as-event-id"),
    # integers too large
    pytest.param(ev("E0001", '{"a":' + "9" * 4301 + "}"), "number_too_large", id="int-4301-digits"),
    pytest.param(ev("E0001", '{"a":-' + "9" * 4301 + "}"), "number_too_large", id="neg-int-4301-digits"),
    pytest.param(ev("E0001", '{"a":[' + "1" * 4301 + "]}"), "number_too_large", id="nested-int-4301"),
    pytest.param(ev("E0001", '{"a":' + "7" * 900_000 + "}"), "number_too_large", id="int-900k-digits"),
    # nesting
    pytest.param(ev("E0001", '{"a":' + "[" * 100_000), "nesting_too_deep", id="100k-open-brackets"),
    pytest.param(ev("E0001", '{"a":' + "[" * 100_000 + "]" * 100_000 + "}"), "nesting_too_deep",
                 id="100k-closed-brackets"),
    pytest.param(ev("E0001", '{"a":' + '{"a":' * 100_000), "nesting_too_deep", id="100k-open-objects"),
    pytest.param(b"[" * 100_000, "nesting_too_deep", id="100k-brackets-as-line"),
    # lone surrogates (valid JSON escapes, but not storable as UTF-8)
    pytest.param(ev("E0001", '{"a":"\\ud800"}'), "invalid_unicode", id="lone-high-in-value"),
    pytest.param(ev("E0001", '{"a":"\\udfff"}'), "invalid_unicode", id="lone-low-in-value"),
    pytest.param(ev("E0001", '{"a":"x\\ud83d"}'), "invalid_unicode", id="high-at-end-of-value"),
    pytest.param(ev("E0001", '{"a":"\\ude00\\ud83d"}'), "invalid_unicode", id="reversed-pair"),
    pytest.param(ev("E0001", '{"\\ud800":1}'), "invalid_unicode", id="lone-in-key"),
    pytest.param(ev("E0001", '{"a":[{"b\\udc00":1}]}'), "invalid_unicode", id="lone-in-nested-key"),
    # not an object
    pytest.param(b"[]", "not_an_object", id="array"),
    pytest.param(b'[{"event_id":"E0001","payload":{}}]', "not_an_object", id="wrapped-in-array"),
    pytest.param(b'"E0001"', "not_an_object", id="string"),
    pytest.param(b"1", "not_an_object", id="number"),
    pytest.param(b"null", "not_an_object", id="null"),
    pytest.param(b"true", "not_an_object", id="bool"),
    # keys
    pytest.param(b"{}", "missing_key", id="empty-object"),
    pytest.param(b'{"event_id":"E0001"}', "missing_key", id="no-payload"),
    pytest.param(b'{"payload":{}}', "missing_key", id="no-event-id"),
    pytest.param(b'{"Event_id":"E0001","payload":{}}', "missing_key", id="event-id-wrong-case"),
    pytest.param(b'{"event_id":"E0001","payload":{},"x":1}', "unexpected_key", id="extra-key"),
    pytest.param(b'{"event_id":"E0001","payload":{},"\\ud800":1}', "unexpected_key",
                 id="extra-surrogate-key"),
    # event_id
    pytest.param(ev("E123"), "invalid_event_id", id="id-3-digits"),
    pytest.param(ev("E12345"), "invalid_event_id", id="id-5-digits"),
    pytest.param(ev("e0001"), "invalid_event_id", id="id-lowercase"),
    pytest.param(ev("E\uff10\uff10\uff10\uff11"), "invalid_event_id", id="id-fullwidth-digits"),
    pytest.param(ev("E\u0660\u0660\u0660\u0661"), "invalid_event_id", id="id-arabic-indic-digits"),
    pytest.param(ev("E\\u0030\\u0030\\u0030\\u0661"), "invalid_event_id", id="id-escaped-arabic-digit"),
    pytest.param(ev("E0001\\n"), "invalid_event_id", id="id-escaped-newline"),
    pytest.param(ev("E0001 "), "invalid_event_id", id="id-trailing-space"),
    pytest.param(ev(" E0001"), "invalid_event_id", id="id-leading-space"),
    pytest.param(ev(""), "invalid_event_id", id="id-empty"),
    pytest.param(ev("E000\\ud800"), "invalid_event_id", id="id-lone-surrogate"),
    pytest.param(b'{"event_id":1,"payload":{}}', "invalid_event_id", id="id-number"),
    pytest.param(b'{"event_id":null,"payload":{}}', "invalid_event_id", id="id-null"),
    pytest.param(b'{"event_id":["E0001"],"payload":{}}', "invalid_event_id", id="id-array"),
    # payload
    pytest.param(ev("E0001", "[]"), "payload_not_object", id="payload-array"),
    pytest.param(ev("E0001", '"{}"'), "payload_not_object", id="payload-string"),
    pytest.param(ev("E0001", "null"), "payload_not_object", id="payload-null"),
    pytest.param(ev("E0001", "1"), "payload_not_object", id="payload-number"),
    pytest.param(ev("E0001", "true"), "payload_not_object", id="payload-bool"),
    pytest.param(ev("E0001", text_payload("x" * 9993)), "payload_too_large", id="payload-10001"),
    pytest.param(ev("E0001", text_payload("[" * 100_000)), "payload_too_large",
                 id="100k-brackets-in-string-are-content"),
    pytest.param(ev("E0001", text_payload('\\"' * 100_000)), "payload_too_large", id="escaped-quotes-200KB"),
]


@pytest.mark.parametrize("bad, code", BAD_LINES)
def test_a_bad_line_is_rejected_with_its_code_and_physical_line(bad, code):
    rejected(GOOD_BEFORE + b"\n \t\n" + bad + b"\n" + GOOD_AFTER + b"\n", code, 3)


@pytest.mark.parametrize(
    "bad, code", [case for case in BAD_LINES if case.id != "json-bom-not-at-file-start"])
def test_a_bad_line_alone_is_line_1(bad, code):
    rejected(bad, code, 1)


@pytest.mark.one_engine  # refused before any transaction: nothing of the engine to prove
@pytest.mark.parametrize("bad, code", BAD_LINES)
def test_one_bad_line_writes_nothing(seeded, bad, code):
    data = GOOD_BEFORE + b"\n \t\n" + bad + b"\n" + GOOD_AFTER + b"\n"
    assert_rejected_and_unchanged(seeded, data, code, 3, absent=("E0100", "E0101"))


def test_the_cases_cover_every_documented_code():
    documented = {
        "file_too_large", "too_many_lines", "invalid_utf8", "invalid_json", "duplicate_key",
        "non_finite_number", "number_too_large", "nesting_too_deep", "invalid_unicode",
        "not_an_object", "missing_key", "unexpected_key", "invalid_event_id",
        "payload_not_object", "payload_too_large", "event_conflict",
    }
    for code in documented:
        assert f"``{code}``" in envelope.__doc__
    covered = {case.values[1] for case in BAD_LINES}
    # The three not coverable by one line have their own tests below.
    assert documented - covered == {"file_too_large", "too_many_lines", "event_conflict"}


# ------------------------------------------------------------- file size


def padded_to(size: int, head: bytes) -> bytes:
    """``head`` then a newline and a blank line of spaces: exactly ``size`` bytes."""
    data = head + b"\n"
    assert len(data) < size
    return data + b" " * (size - len(data))


def thousand_lines() -> bytes:
    return b"\n".join(ev(f"E{i:04d}", f'{{"n":{i}}}') for i in range(1000))


def whitespace_inside_json(size: int) -> bytes:
    """One valid line whose JSON is padded with insignificant spaces to ``size`` bytes."""
    head, tail = b'{"event_id":"E0001","payload":{"a":1', b"}}"
    return head + b" " * (size - len(head) - len(tail)) + tail


def bom_and_crlf(size: int) -> bytes:
    return padded_to(size, BOM + ev("E0001") + b"\r\n" + ev("E0002") + b"\r")


@pytest.mark.parametrize(
    "build, events",
    [
        pytest.param(lambda size: padded_to(size, thousand_lines()), 1000, id="1000-lines-and-blank-padding"),
        pytest.param(whitespace_inside_json, 1, id="whitespace-inside-json"),
        pytest.param(bom_and_crlf, 2, id="bom-counts-as-bytes"),
    ],
)
def test_file_size_limit_is_1_000_000_bytes(store, build, events):
    exact, over = build(1_000_000), build(1_000_001)
    assert (len(exact), len(over)) == (1_000_000, 1_000_001)
    assert envelope.MAX_FILE_BYTES == 1_000_000
    exc = rejected(over, "file_too_large", None)
    assert "1000001" in str(exc)
    assert_rejected_and_unchanged(store, over, "file_too_large", None)
    assert store.enqueue(exact) == queue_core.EnqueueResult(accepted=events, duplicates=0)
    assert row_count(store) == events


# ------------------------------------------------------------ line count

BLANKS = [b"", b" ", b"\t", b"  \t ", b"\r", b" \t\r"]


def interleaved(count: int) -> tuple[bytes, list[int]]:
    """``count`` valid lines with 0-2 blank lines of varied kinds between them.

    Returns the data and the physical line number of each non-empty line.
    """
    out: list[bytes] = []
    numbers: list[int] = []
    for i in range(count):
        numbers.append(len(out) + 1)
        out.append(ev(f"E{i:04d}"))
        for j in range(i % 3):
            out.append(BLANKS[(i + j) % len(BLANKS)])
    return b"\n".join(out), numbers


def test_1000_non_empty_lines_between_blank_lines_are_accepted(store):
    data, numbers = interleaved(1000)
    assert numbers[-1] > 1000  # the blank lines really are there
    batch = accepted(data + b"\n\n \n\t\n")  # trailing blank lines do not count either
    assert [e.line for e in batch.events] == numbers
    assert store.enqueue(data) == queue_core.EnqueueResult(accepted=1000, duplicates=0)


def test_1001_non_empty_lines_name_the_physical_line_of_the_1001st(store):
    data, numbers = interleaved(1001)
    assert numbers[-1] > 1001
    exc = rejected(data, "too_many_lines", numbers[-1])
    assert "1000" in str(exc)
    assert_rejected_and_unchanged(store, data, "too_many_lines", numbers[-1], absent=("E0000",))


def test_1001_lines_of_the_same_duplicate_are_still_too_many():
    rejected(b"\n".join([ev("E0001")] * 1001), "too_many_lines", 1001)
    assert accepted(b"\n".join([ev("E0001")] * 1000)).duplicates_in_batch == 999


# -------------------------------------------------------------- payload size


@pytest.mark.parametrize(
    "chars, raw_escapes",
    [
        pytest.param("x" * 9992, None, id="ascii"),
        pytest.param("\u00e9" * 4996, None, id="2-byte-utf8"),
        pytest.param("\u20ac" * 3330 + "xx", "\\u20ac", id="3-byte-utf8-given-as-escapes"),
        pytest.param("\U0001F600" * 2498, "\\ud83d\\ude00", id="4-byte-utf8-given-as-surrogate-pairs"),
    ],
)
def test_canonical_payload_of_10000_bytes_is_accepted_and_10001_rejected(store, chars, raw_escapes):
    assert len(chars.encode("utf-8")) == 9992  # + '{"k":"' + '"}' = 10,000
    assert envelope.MAX_PAYLOAD_BYTES == 10_000
    raw = chars
    if raw_escapes is not None:  # the line holds \uXXXX escapes: far more than 10,000 bytes
        char = json.loads(f'"{raw_escapes}"')
        raw = chars.replace(char, raw_escapes)
    line = ev("E0001", text_payload(raw))
    payload = only_payload(line)
    assert len(payload.encode("utf-8")) == 10_000
    assert payload == text_payload(chars)
    assert store.enqueue(line).accepted == 1
    assert store.message("E0001").payload == text_payload(chars)

    over = ev("E0002", text_payload(raw + "x"))
    exc = rejected(over, "payload_too_large", 1)
    assert "10001" in str(exc)
    assert_rejected_and_unchanged(store, over, "payload_too_large", 1, absent=("E0002",))


def test_multibyte_payload_is_measured_in_bytes_not_characters():
    chars = "\u20ac" * 3331  # 3,331 characters, 9,993 bytes
    assert len(text_payload(chars)) < 10_000 < len(text_payload(chars).encode("utf-8"))
    rejected(ev("E0001", text_payload(chars)), "payload_too_large", 1)


def test_whitespace_in_the_raw_line_does_not_count_only_the_canonical_form(store):
    # Exactly 10,000 canonical bytes, spread over a raw line of more than 12,000 bytes
    # with keys out of order.
    body = {f"k{i:03d}": "v" * 16 for i in range(300)}
    body["zz"] = ""
    body["zz"] = "w" * (10_000 - len(canonical_json(body).encode()))
    canonical = canonical_json(body)
    assert len(canonical.encode()) == 10_000
    spaced = "{ " + " ,\t".join(f' "{k}" :  {json.dumps(v)} ' for k, v in reversed(body.items())) + " }"
    line = b'{ "payload" :  ' + spaced.encode() + b' ,  "event_id" : "E0001" }'
    assert len(line) > 12_000
    assert only_payload(line) == canonical
    assert store.enqueue(line).accepted == 1
    assert store.message("E0001").payload == canonical
    rejected(line.replace(b'"zz" :  "', b'"zz" :  "w'), "payload_too_large", 1)


# ------------------------------------------ BOM, CRLF, blank lines, separators


def test_bom_at_start_is_accepted_and_does_not_shift_line_numbers():
    batch = accepted(BOM + ev("E0001") + b"\n" + ev("E0002"))
    assert [(e.event_id, e.line) for e in batch.events] == [("E0001", 1), ("E0002", 2)]
    rejected(BOM + ev("E0001") + b"\n\n" + b"{", "invalid_json", 3)


def test_bom_only_once_and_only_at_the_start():
    rejected(BOM + BOM + ev("E0001"), "invalid_json", 1)
    rejected(b"\n" + BOM + ev("E0001"), "invalid_json", 2)
    rejected(b" " + BOM + ev("E0001"), "invalid_json", 1)


def test_crlf_line_ends_and_blank_lines_are_accepted(store):
    data = (BOM + ev("E0001", '{"a":1}') + b"\r\n\r\n \t \r\n\t\r\n"
            + ev("E0002", '{"b":"x"}') + b"\r\n" + b" \r\n")
    batch = accepted(data)
    assert [(e.event_id, e.payload, e.line) for e in batch.events] == [
        ("E0001", '{"a":1}', 1), ("E0002", '{"b":"x"}', 5)]
    assert store.enqueue(data) == queue_core.EnqueueResult(accepted=2, duplicates=0)
    assert [m.payload for m in store.messages()] == ['{"a":1}', '{"b":"x"}']


@pytest.mark.parametrize("blank", BLANKS)
def test_blank_lines_are_ignored_but_counted(blank):
    data = blank + b"\n" + ev("E0001") + b"\n" + blank + b"\n" + blank + b"\n" + b"[]\n"
    rejected(data, "not_an_object", 5)
    assert [e.line for e in accepted(data.replace(b"[]", ev("E0002"))).events] == [2, 5]


def test_empty_batch_is_accepted_as_nothing(store):
    for data in (b"", BOM, b"\n\n", b" \t\r\n\r\n"):
        assert accepted(data) == queue_core.Batch(events=(), duplicates_in_batch=0)
        assert store.enqueue(data) == queue_core.EnqueueResult(accepted=0, duplicates=0)
    assert row_count(store) == 0


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_unicode_line_separators_inside_strings_are_content(store, char):
    first = f'{{"event_id":"E0001","payload":{{"a":"x{char}y","{char}":1}}}}'.encode()
    second = f'{{"event_id":"E0002","payload":{{"b":"{char}"}}}}'.encode()
    batch = accepted(first + b"\n" + second)
    assert [e.line for e in batch.events] == [1, 2]
    rejected(first + b"\n" + second + b"\n{", "invalid_json", 3)
    store.enqueue(first + b"\n" + second)
    stored = store.message("E0001").payload
    assert char in stored  # kept as the character itself, not as an escape
    assert json.loads(stored) == {"a": f"x{char}y", char: 1}
    assert store.message("E0002").payload_object == {"b": char}


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "number, canonical",
    [
        ("1e-400", "0.0"),
        ("-1e-400", "-0.0"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("-1.7976931348623157e308", "-1.7976931348623157e+308"),
        ("5e-324", "5e-324"),
        ("0" + ".0" + "0" * 5000 + "1", "0.0"),
    ],
)
def test_finite_floats_near_the_limits_are_accepted(store, number, canonical):
    line = ev("E0001", f'{{"a":{number}}}')
    assert only_payload(line) == f'{{"a":{canonical}}}'
    store.enqueue(line)
    assert store.message("E0001").payload == f'{{"a":{canonical}}}'


@pytest.mark.parametrize("sign", ["", "-"])
def test_integer_of_exactly_4300_digits_is_accepted_and_round_trips(store, sign):
    assert envelope.MAX_INT_DIGITS == 4300
    digits = "1234567890" * 430
    line = ev("E0001", f'{{"a":{sign}{digits}}}')
    assert only_payload(line) == f'{{"a":{sign}{digits}}}'
    store.enqueue(line)
    assert store.message("E0001").payload == f'{{"a":{sign}{digits}}}'
    rejected(ev("E0002", f'{{"a":{sign}{digits}1}}'), "number_too_large", 1)


# ---------------------------------------------------------------- nesting


def nested_line(depth: int, opener: str = "[") -> bytes:
    """A line whose deepest point is ``depth`` levels, counting the line's own object."""
    inner = depth - 2  # the line object and the payload object are two levels
    if opener == "[":
        value = "[" * inner + "]" * inner
    else:
        value = '{"a":' * (inner - 1) + "{}" + "}" * (inner - 1)
    return ev("E0001", '{"a":' + value + "}")


@pytest.mark.parametrize("opener", ["[", "{"])
def test_nesting_of_max_depth_is_accepted_and_one_more_rejected(store, opener):
    line = nested_line(MAX_DEPTH, opener)
    payload = only_payload(line)
    assert json.loads(line)["payload"] == json.loads(payload)
    store.enqueue(line)
    assert store.message("E0001").payload == payload
    rejected(nested_line(MAX_DEPTH + 1, opener), "nesting_too_deep", 1)


def test_depth_is_the_deepest_point_not_the_number_of_brackets():
    siblings = ",".join(["[" * (MAX_DEPTH - 3) + "]" * (MAX_DEPTH - 3)] * 20)
    accepted(ev("E0001", '{"a":[' + siblings + "]}"))


def test_brackets_inside_strings_are_content(store):
    # An escaped quote does not end the string: the brackets after it are still content.
    tricky = "[{" * 4000 + '\\"' + "[" * (MAX_DEPTH + 50) + '\\\\{{{{\\"' + "{" * (MAX_DEPTH + 50)
    line = ev("E0001", '{"s":"' + tricky + '"}')
    payload = only_payload(line)
    store.enqueue(line)
    assert store.message("E0001").payload_object == {"s": json.loads('"' + tricky + '"')}
    assert store.message("E0001").payload == payload


def test_an_escaped_backslash_ends_before_the_closing_quote():
    # "\\" is a complete string: the brackets after it are real nesting.
    deep = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    rejected(ev("E0001", '{"s":"\\\\","a":' + deep + "}"), "nesting_too_deep", 1)
    shallow = "[" * (MAX_DEPTH - 2) + "]" * (MAX_DEPTH - 2)
    accepted(ev("E0001", '{"s":"\\\\","a":' + shallow + "}"))


# ------------------------------------------------------ unicode in content


def test_valid_surrogate_pair_is_stored_as_one_utf8_character(store):
    line = ev("E0001", '{"\\ud83d\\ude00":"\\ud83d\\ude00"}')
    store.enqueue(line)
    stored = store.message("E0001").payload
    assert stored == '{"\U0001F600":"\U0001F600"}'
    assert len(stored.encode("utf-8")) == 4 + 4 + len('{"":""}')


def test_keys_differing_in_case_or_unicode_normalisation_are_not_duplicates():
    assert json.loads(only_payload(ev("E0001", '{"a":1,"A":2,"\\u00e9":3,"e\\u0301":4}'))) == {
        "a": 1, "A": 2, "\u00e9": 3, "e\u0301": 4}


# -------------------------------------------------------- canonical form


@pytest.mark.parametrize(
    "raw, canonical",
    [
        ('{ "b" : 1 ,\t"a" : { "d" : [ 1 , 2 ] , "c" : "x" } }', '{"a":{"c":"x","d":[1,2]},"b":1}'),
        ('{"a":1}', '{"a":1}'),
        ('{"a":1.0}', '{"a":1.0}'),
        ('{"a":1.00}', '{"a":1.0}'),
        ('{"a":1e2}', '{"a":100.0}'),
        ('{"a":-0}', '{"a":0}'),
        ('{"a":true,"b":false,"c":null}', '{"a":true,"b":false,"c":null}'),
        ('{"a":"\\u00e9\\u20ac"}', '{"a":"\u00e9\u20ac"}'),
        ('{"a":"\u00e9\u20ac"}', '{"a":"\u00e9\u20ac"}'),
        ('{"a":"\\/\\u0041"}', '{"a":"/A"}'),
        ('{"a":"\\u0000\\n\\"\\\\"}', '{"a":"\\u0000\\n\\"\\\\"}'),
        ('{"\\u00e9":1,"z":2,"a":3}', '{"a":3,"z":2,"\u00e9":1}'),
        ("{}", "{}"),
    ],
)
def test_canonical_form(store, raw, canonical):
    line = ev("E0001", raw)
    assert only_payload(line) == canonical
    assert canonical_json(json.loads(raw)) == canonical
    store.enqueue(line)
    assert store.message("E0001").payload == canonical
    assert store.message("E0001").payload.encode("utf-8") == canonical.encode("utf-8")


# ------------------------------------------------ duplicates and conflicts

SAME_PAYLOADS = [
    ('{"a":1,"b":[1,2]}', '{ "b" : [ 1 , 2 ] , "a" : 1 }'),
    ('{"a":"\u00e9"}', '{"a":"\\u00e9"}'),
    ('{"a":1.0}', '{"a":1.00}'),
]
DIFFERENT_PAYLOADS = [
    ('{"a":1}', '{"a":1.0}'),
    ('{"a":1}', '{"a":true}'),
    ('{"a":1}', '{"a":"1"}'),
    ('{"a":null}', "{}"),
    ('{"a":[1,2]}', '{"a":[2,1]}'),
    ('{"a":"x"}', '{"a":"x "}'),
]


@pytest.mark.parametrize("first, second", SAME_PAYLOADS)
def test_same_payload_in_another_form_is_a_duplicate_in_the_batch(store, first, second):
    data = ev("E0001", first) + b"\n" + ev("E0001", second) + b"\n\n" + ev("E0001", first)
    batch = accepted(data)
    assert batch.duplicates_in_batch == 2 and len(batch.events) == 1
    assert batch.events[0].line == 1
    assert store.enqueue(data) == queue_core.EnqueueResult(accepted=1, duplicates=2)
    assert store.message("E0001").payload == canonical_json(json.loads(first))
    assert row_count(store) == 1


@pytest.mark.parametrize("first, second", SAME_PAYLOADS)
def test_same_payload_already_stored_is_a_duplicate(store, first, second):
    store.enqueue(ev("E0001", first))
    before = store.messages()
    assert store.enqueue(ev("E0001", second)) == queue_core.EnqueueResult(accepted=0, duplicates=1)
    assert store.messages() == before


def test_duplicates_in_the_batch_and_in_the_store_are_both_counted(store):
    store.enqueue(ev("E0001", '{"a":1}'))
    data = b"\n".join([ev("E0001", '{"a":1}'), ev("E0002", '{"b":2}'), ev("E0001", '{ "a" : 1 }'),
                       ev("E0002", '{"b":2}'), ev("E0003")])
    assert accepted(data).duplicates_in_batch == 2
    assert store.enqueue(data) == queue_core.EnqueueResult(accepted=2, duplicates=3)
    assert [m.event_id for m in store.messages()] == ["E0001", "E0002", "E0003"]
    assert store.enqueue(data) == queue_core.EnqueueResult(accepted=0, duplicates=5)


@pytest.mark.parametrize("first, second", DIFFERENT_PAYLOADS)
def test_different_payload_in_the_batch_is_a_conflict(seeded, first, second):
    data = ev("E0001", first) + b"\n" + ev("E0002") + b"\n\n" + ev("E0001", second)
    exc = rejected(data, "event_conflict", 4)
    assert "E0001" in str(exc) and "line 1" in str(exc)
    assert_rejected_and_unchanged(seeded, data, "event_conflict", 4, absent=("E0001", "E0002"))


@pytest.mark.parametrize("first, second", DIFFERENT_PAYLOADS)
def test_different_payload_than_stored_is_a_conflict_and_writes_nothing(seeded, first, second):
    seeded.enqueue(ev("E0001", first))
    data = ev("E0005", '{"new":1}') + b"\n\n" + ev("E0001", second) + b"\n" + ev("E0006")
    accepted(data)  # the envelope alone cannot see the conflict
    assert_rejected_and_unchanged(seeded, data, "event_conflict", 3, absent=("E0005", "E0006"))
    assert seeded.message("E0001").payload == canonical_json(json.loads(first))


def test_conflict_with_stored_names_the_first_line_of_that_event(seeded):
    seeded.enqueue(ev("E0001", '{"a":1}'))
    data = b"\n".join([ev("E0005"), ev("E0001", '{"a":1.0}'), ev("E0001", '{ "a" : 1.0 }')])
    assert_rejected_and_unchanged(seeded, data, "event_conflict", 2, absent=("E0005",))


def test_event_ids_at_both_ends_of_the_range_are_accepted(store):
    data = ev("E0000") + b"\n" + ev("E9999")
    assert store.enqueue(data).accepted == 2
    assert [m.event_id for m in store.messages()] == ["E0000", "E9999"]


def test_batch_passed_as_text_is_validated_the_same(store):
    with pytest.raises(BatchRejected) as info:
        store.enqueue('{"event_id":"E0001","payload":{"a":NaN}}')
    check_rejection(info.value, "non_finite_number", 1)
    assert store.enqueue("\ufeff" + ev("E0001", '{"a":"\u00e9"}').decode()).accepted == 1
    assert store.message("E0001").payload == '{"a":"\u00e9"}'


# --------------------------------------------------------------- property

_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_values = st.recursive(
    _leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=16,
)
_payloads = st.dictionaries(_text, _values, max_size=6)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def property_store(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[queue_core.Store, Any]]:
    """One queue for all of hypothesis's examples (a fixture per example would be rebuilt 150 times)."""
    clock = queue_core.ModelClock(1000)
    if request.param == "sqlite":
        with queue_core.Store(tmp_path_factory.mktemp("property") / "q.sqlite3", clock=clock) as store:
            yield store, itertools.count()
        return
    cluster = request.getfixturevalue("postgres_cluster")  # session-scoped, as conftest's postgres_url uses it
    name = cluster.create_database()
    try:
        with queue_core.Store(f"postgresql://{SERVER_USER}@/{name}?host={cluster.root}&port={PORT}",
                              clock=clock) as store:
            yield store, itertools.count()
    finally:
        cluster.drop_database(name)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_payloads, ensure_ascii=st.booleans(), spaced=st.booleans(), payload_first=st.booleans())
def test_any_json_object_round_trips_through_enqueue(property_store, value, ensure_ascii, spaced,
                                                      payload_first):
    store, ids = property_store
    event_id = f"E{next(ids):04d}"
    fields = [("event_id", event_id), ("payload", value)]
    if payload_first:
        fields.reverse()
    separators = (" , ", " : ") if spaced else (",", ":")
    line = json.dumps(dict(fields), ensure_ascii=ensure_ascii, separators=separators).encode("utf-8")
    assert store.enqueue(line + b"\r\n") == queue_core.EnqueueResult(accepted=1, duplicates=0)
    stored = store.message(event_id).payload
    assert stored == canonical_json(value)
    assert json.loads(stored) == value
    assert canonical_json(json.loads(stored)) == stored  # types (1 vs 1.0) survive
    assert store.enqueue(line) == queue_core.EnqueueResult(accepted=0, duplicates=1)


def test_invalid_json_names_the_physical_line_and_only_a_column() -> None:
    data = b'{"event_id":"E0001","payload":{"a":1}}\n\n{"event_id":"E0003","payload":{"a":1}, }\n'
    with pytest.raises(BatchRejected) as info:
        parse_batch(data)
    assert info.value.line == 3
    # The reason is CPython's own words (they differ between versions); the
    # line, the code and a column, never json's "line 1", are ours.
    message = str(info.value)
    assert message.startswith("line 3: invalid_json: ") and re.search(r" at column \d+$", message), message
    assert "line 1" not in message
