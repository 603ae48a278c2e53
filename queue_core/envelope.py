"""The JSONL batch envelope: parse, validate and canonicalise a whole batch.

A batch is validated completely *before* any transaction starts, so that one
bad line rejects the batch and nothing is written. Every rejection is a
``BatchRejected`` that names the line (1-based, physical: blank lines count)
and a stable code:

=====================  ==========================================================
code                   meaning
=====================  ==========================================================
``file_too_large``     more than ``MAX_FILE_BYTES`` bytes
``too_many_lines``     more than ``MAX_LINES`` non-empty lines
``invalid_utf8``       the line is not valid UTF-8
``invalid_json``       the line is not one JSON value
``duplicate_key``      an object repeats a key (at any depth)
``non_finite_number``  ``NaN``, ``Infinity``, ``-Infinity`` or a number like ``1e400``
``number_too_large``   an integer with more than ``MAX_INT_DIGITS`` digits
``nesting_too_deep``   arrays/objects nested deeper than ``MAX_DEPTH``
``invalid_unicode``    a lone surrogate (cannot be stored as UTF-8)
``not_an_object``      the line is not a JSON object
``missing_key``        ``event_id`` or ``payload`` is absent
``unexpected_key``     a key other than ``event_id`` and ``payload``
``invalid_event_id``   ``event_id`` is not a string the queue's id rule takes
                       (the default queue's: ``E`` + 4 digits)
``payload_not_object`` ``payload`` is not a JSON object
``payload_too_large``  the canonical payload exceeds the queue's limit
                       (the default queue's: ``MAX_PAYLOAD_BYTES``)
``event_conflict``     the same ``event_id`` with a different canonical payload
=====================  ==========================================================
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .errors import BatchRejected
from .queues import DEFAULT_SETTINGS, MAX_EVENT_ID_CHARS, QueueSettings

MAX_FILE_BYTES = 1_000_000
MAX_LINES = 1_000
MAX_PAYLOAD_BYTES = DEFAULT_SETTINGS.max_payload_bytes
MAX_DEPTH = 100  # far beyond any business payload, far below Python's recursion limit
MAX_INT_DIGITS = 4_300  # CPython's default int/str conversion limit

EVENT_ID = DEFAULT_SETTINGS.id_rule  # the default queue's, used with fullmatch
UTF8_BOM = b"\xef\xbb\xbf"
_STRUCTURE = re.compile(r'\\.|["\[\]{}]', re.DOTALL)  # escapes, quotes, brackets
_BLANK = " \t\r"  # JSON whitespace; "\n" never occurs inside a line


class Event(NamedTuple):
    """One validated line: its id, canonical payload text and line number."""

    event_id: str
    payload: str  # canonical JSON text of an object
    line: int


@dataclass(frozen=True)
class Batch:
    """A validated batch: unique events plus the in-batch duplicates seen."""

    events: tuple[Event, ...]
    duplicates_in_batch: int
    # what an event's number counts, for a later rejection (a conflict with a
    # stored event): "line", "item" (a list of dicts), or None (one event: no number)
    unit: str | None = "line"
    # the queue whose rules it was validated by
    rules: QueueSettings = DEFAULT_SETTINGS


class _Reject(ValueError):
    """Raised from inside json hooks; turned into BatchRejected with a line.

    A ValueError, so that ``canonical_json`` raises what callers expect.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def canonical_json(value: Any) -> str:
    """Keys sorted, no insignificant whitespace, types kept (``1`` != ``1.0``)."""
    try:
        return _ENCODER.encode(value)
    except ValueError as exc:  # NaN/inf given by a Python caller
        raise _Reject("non_finite_number", str(exc)) from None


def payload_digest(canonical: str) -> str:
    """The SHA-256 (hex) of a canonical payload: what prune keeps, for deduplication."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def parse_batch(data: bytes, rules: QueueSettings = DEFAULT_SETTINGS) -> Batch:
    """Validate a whole JSONL batch; raise ``BatchRejected`` on the first bad line.

    ``rules``: the queue whose id rule and payload limit apply (the default
    queue's unless given).
    """
    if len(data) > MAX_FILE_BYTES:
        raise BatchRejected(
            "file_too_large",
            f"the batch has {len(data)} bytes; the limit is {MAX_FILE_BYTES}",
        )
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    events: dict[str, Event] = {}
    duplicates = 0
    non_empty = 0
    # Only "\n" separates lines (bytes.split, not splitlines): U+2028 and U+0085
    # are content inside JSON strings. UTF-8 never uses byte 0x0A in a sequence.
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BatchRejected(
                "invalid_utf8", f"invalid UTF-8 at byte {exc.start} of the line", number
            ) from None
        stripped = text.strip(_BLANK)
        if not stripped:
            continue
        non_empty += 1
        if non_empty > MAX_LINES:
            raise BatchRejected(
                "too_many_lines", f"more than {MAX_LINES} non-empty lines", number
            )
        event = _plain_line(stripped, number, rules)
        if event is None:  # anything unusual, valid or not, takes the full path
            try:
                event = parse_line(text, number, rules)
            except _Reject as exc:
                raise BatchRejected(exc.code, str(exc), number) from None
        seen = events.get(event.event_id)
        if seen is None:
            events[event.event_id] = event
        elif seen.payload == event.payload:
            duplicates += 1
        else:
            raise BatchRejected(
                "event_conflict",
                f"{event.event_id} repeats line {seen.line} with a different payload",
                number,
            )
    return Batch(tuple(events.values()), duplicates, rules=rules)


def parse_items(
    items: Sequence[Mapping[str, Any]],
    *,
    single: bool = False,
    rules: QueueSettings = DEFAULT_SETTINGS,
) -> Batch:
    """Validate Python events, ``{"event_id": ..., "payload": {...}}`` each, as lines are.

    Each item is written as one JSONL line and the batch is parsed exactly as
    a file would be, so every rule and code is the same; a rejection names the
    item (1-based), or nothing with ``single``. A value that is not JSON at
    all (a set, bytes, a key that is not a string) is a ``TypeError`` that
    names where it is.
    """
    if isinstance(items, (str, bytes, bytearray)) or not isinstance(items, Sequence):
        raise TypeError(f"events must be a list of dicts, got {type(items).__name__}")
    lines = []
    for number, item in enumerate(items, start=1):
        where = "" if single else f"item {number}: "
        if not isinstance(item, Mapping):
            raise TypeError(
                f'{where}an event is a dict {{"event_id": ..., "payload": {{...}}}}, '
                f"got {type(item).__name__}"
            )
        try:
            _check_python_json(item, "")
            lines.append(json.dumps(dict(item), ensure_ascii=True))
        except _Reject as exc:
            raise BatchRejected(
                exc.code, str(exc), None if single else number, unit="item"
            ) from None
        except RecursionError:
            raise BatchRejected(
                "nesting_too_deep",
                "the value is nested too deeply (or contains itself)",
                None if single else number,
                unit="item",
            ) from None
        except TypeError as exc:
            raise TypeError(f"{where}{exc}") from None
    try:
        batch = parse_batch("\n".join(lines).encode("utf-8"), rules)
    except BatchRejected as exc:
        line = None if single or exc.code == "file_too_large" else exc.line
        raise BatchRejected(exc.code, exc.args[0], line, unit="item") from None
    return Batch(
        batch.events, batch.duplicates_in_batch, None if single else "item", rules
    )


def check_batch(batch: Batch, rules: QueueSettings) -> None:
    """Refuse a batch validated by another queue's rules that breaks ``rules``."""
    if batch.rules == rules:
        return
    for event in batch.events:
        refused = rules.refuses(event.event_id)
        size = len(event.payload.encode("utf-8"))
        if refused is not None:
            code, said = "invalid_event_id", f"{refused}, got {_short(event.event_id)}"
        elif size > rules.max_payload_bytes:
            code, said = "payload_too_large", _too_large(size, rules)
        else:
            continue
        raise BatchRejected(
            code,
            said,
            None if batch.unit is None else event.line,
            unit=batch.unit or "line",
        )


def _check_python_json(value: Any, path: str) -> None:
    """Raise TypeError where ``value`` holds something JSON cannot say as it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        # json.dumps cannot write an integer past Python's conversion limit;
        # the line's own check would refuse it anyway
        if value.bit_length() > MAX_INT_DIGITS * 3.33:
            raise _Reject(
                "number_too_large", f"an integer over {MAX_INT_DIGITS} digits"
            )
        try:
            digits = len(str(abs(value)))
        except ValueError:
            digits = MAX_INT_DIGITS + 1
        if digits > MAX_INT_DIGITS:
            raise _Reject(
                "number_too_large",
                f"an integer of {digits} digits; the limit is {MAX_INT_DIGITS}",
            )
        return
    if value is None or isinstance(value, (str, float, bool)):
        return  # NaN and infinities are the line's own check
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{path or 'the event'} has the key {key!r}: JSON keys are strings"
                )
            _check_python_json(inner, f"{path}[{key!r}]" if path else key)
        return
    if isinstance(value, (list, tuple)):
        for index, inner in enumerate(value):
            _check_python_json(inner, f"{path}[{index}]")
        return
    raise TypeError(f"{path or 'the event'} is a {type(value).__name__}, not a JSON value")


def parse_line(
    text: str, number: int = 1, rules: QueueSettings = DEFAULT_SETTINGS
) -> Event:
    """Validate one line (already decoded) and return its Event."""
    _check_depth(text)
    try:
        value = _decode(text)
    except _Reject:
        raise
    except RecursionError:
        raise _Reject("nesting_too_deep", "the value is nested too deeply") from None
    except json.JSONDecodeError as exc:
        # The batch names the physical line; json's own "line 1" would only confuse.
        raise _Reject("invalid_json", f"{exc.msg} at column {exc.colno}") from None
    except ValueError as exc:
        raise _Reject("invalid_json", str(exc)) from None
    if not isinstance(value, dict):
        raise _Reject(
            "not_an_object", f"a line must be a JSON object, not {_kind(value)}"
        )
    if len(value) != 2 or "event_id" not in value or "payload" not in value:
        for key in ("event_id", "payload"):
            if key not in value:
                raise _Reject("missing_key", f"the key {key!r} is missing")
        extra = sorted(set(value) - {"event_id", "payload"})
        raise _Reject(
            "unexpected_key", f"unexpected key {extra[0]!r}; only event_id and payload"
        )
    event_id = value["event_id"]
    refused = rules.refuses(event_id) if isinstance(event_id, str) else rules.id_sentence
    if refused is not None:
        raise _Reject("invalid_event_id", f"{refused}, got {_short(event_id)}")
    payload = value["payload"]
    if not isinstance(payload, dict):
        raise _Reject(
            "payload_not_object", f"payload must be a JSON object, not {_kind(payload)}"
        )
    canonical = _canonical_decoded(payload)
    try:
        size = len(canonical.encode("utf-8"))
    except UnicodeEncodeError:
        raise _Reject(
            "invalid_unicode", "the payload contains a lone surrogate"
        ) from None
    if size > rules.max_payload_bytes:
        raise _Reject("payload_too_large", _too_large(size, rules))
    return Event(event_id=event_id, payload=canonical, line=number)


def _too_large(size: int, rules: QueueSettings) -> str:
    return f"the canonical payload has {size} bytes; the limit is {rules.max_payload_bytes}"


def _plain_line(
    text: str, number: int, rules: QueueSettings = DEFAULT_SETTINGS
) -> Event | None:
    """The Event of a well-formed everyday line, or None to send it to ``parse_line``.

    The common case costs about half: one C scan, no hooks for integers, the
    encoder built once. It accepts only what ``parse_line`` accepts, with the
    same result; every other line, valid or not, gets the full path and its
    exact error. ``text`` has no surrounding blanks.
    """
    if len(text) > MAX_INT_DIGITS:
        return None  # long enough to hold an integer over the limit
    if len(text) > MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH:
        return None  # could be nested too deeply for the C scanner
    if "\\u" in text:
        return None  # an escape could hide a colon from the duplicate count below
    try:
        value, end = _FAST_SCAN(text, 0)
    except (ValueError, RecursionError, StopIteration):
        return None
    if end != len(text) or type(value) is not dict or len(value) != 2:
        return None
    event_id = value.get("event_id")
    payload = value.get("payload")
    if (
        type(event_id) is not str
        or type(payload) is not dict
        or len(event_id) > MAX_EVENT_ID_CHARS
        or not rules.id_rule.fullmatch(event_id)
    ):
        return None
    canonical = _canonical_decoded(payload)
    # No hook looked for repeated keys. A repeated key drops a pair, and with it
    # at least one colon, from the decoded value: the line has exactly one colon
    # per pair and per colon inside its strings, the canonical form one per
    # surviving key and per colon in surviving strings (without \u escapes a
    # string decodes to the same colons). Equal counts mean nothing was dropped.
    if text.count(":") != 2 + canonical.count(":"):
        return None
    if not (canonical.isascii() and len(canonical) <= rules.max_payload_bytes):
        return None  # measured in UTF-8 bytes (or a lone surrogate) by the full path
    return Event(event_id, canonical, number)


def _decode(text: str) -> Any:
    """The line's value; a failing line is decoded again, slowly, for the reason."""
    # too short to hold an integer over the limit: C parses them
    if len(text) <= MAX_INT_DIGITS:
        try:
            return _FAST_DECODER.decode(text)
        except (ValueError, RecursionError):
            pass
    return _DECODER.decode(text)


def _check_depth(text: str) -> None:
    """Reject deep nesting before the parser can recurse into it (linear scan)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        # even all of them nested could not go too deep (a count runs in C, the
        # scan in Python)
        return
    depth = 0
    in_string = False
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if in_string:
            in_string = token != '"'
        elif token == '"':
            in_string = True
        elif token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _Reject(
                    "nesting_too_deep", f"nesting deeper than {MAX_DEPTH} levels"
                )
        elif token in "]}":
            depth -= 1


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    # a key repeated: find the first (rare, so a second pass is fine)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Reject("duplicate_key", f"duplicate key {_short(key)}")
            seen.add(key)
    return result


def _reject_constant(name: str) -> Any:
    raise _Reject("non_finite_number", f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Reject("non_finite_number", f"{_short(text)} only fits as infinity")
    return value


def _bounded_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise _Reject(
            "number_too_large",
            f"an integer of {digits} digits; the limit is {MAX_INT_DIGITS}",
        )
    try:
        return int(text)
    except ValueError:  # PYTHONINTMAXSTRDIGITS set below our own limit
        raise _Reject(
            "number_too_large",
            f"an integer of {digits} digits is over this interpreter's limit",
        ) from None


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Made once: json.dumps and json.loads build a new encoder or decoder on every call.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_constant=_reject_constant,
    parse_float=_finite_float,
    parse_int=_bounded_int,
)
_FAST_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_without_duplicates,
    parse_constant=_reject_constant,
    parse_float=_finite_float,
)
# The everyday line's scanner: Python is called only for a float or a constant.
# scan_once is undocumented in typeshed, hence getattr
_FAST_SCAN: Callable[[str, int], tuple[Any, int]] = getattr(
    json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float),
    "scan_once",
)


def _no_default(value: Any) -> Any:
    # unreachable for decoded JSON
    raise TypeError(f"{type(value).__name__} is not JSON")


# For values that json itself decoded (so no cycles and no NaN): the C encoder,
# built once; JSONEncoder.encode would build it again for every payload.
_C_ENCODE = getattr(json.encoder, "c_make_encoder", None)
if _C_ENCODE is not None:
    _encode_decoded = _C_ENCODE(
        None,
        _no_default,
        json.encoder.encode_basestring,
        None,
        ":",
        ",",
        True,
        False,
        False,
    )

    def _canonical_decoded(value: Any) -> str:
        return "".join(_encode_decoded(value, 0))

else:  # pragma: no cover - Python builds without the json accelerator
    _canonical_decoded = canonical_json
