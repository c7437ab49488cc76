"""Input checks shared by the boundary and the services: identifiers, text, JSON payloads, ranges.

JSON follows RFC 8259 strictly: the bytes must be UTF-8 (not UTF-16/32, no
byte-order mark, no encoded surrogates), no lone surrogate may hide in a
``\\u`` escape, and NaN/Infinity are refused. Big numbers: any syntactically
valid number is accepted and stored as sent (a 5,000-digit integer included);
only where a number must become a value (fingerprints, definition hashes, see
canonical.py) does it become an IEEE 754 double, as JavaScript reads it.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

import simdjson

from .errors import InvalidArgument

MAX_ID_LENGTH = 255
MAX_MESSAGE_LENGTH = 4096

# C0 controls, DEL and C1 controls: never in an identifier.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Free text (error messages, reasons, notes) may keep tabs and line breaks.
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# A \u escape of a surrogate: only then can a lone surrogate hide in parsed JSON.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def identifier(field: str, value: str, *, required: bool = True, limit: int = MAX_ID_LENGTH) -> str:
    """A 1-255 (or `limit`) character identifier without control characters (C0, DEL, C1) or lone surrogates."""
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required")
        return value
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} characters long; the limit is {limit}")
    if _CONTROL.search(value):
        raise InvalidArgument(f"{field} contains control characters")
    _no_surrogates(field, value)
    return value


def text(field: str, value: str, *, required: bool = False, limit: int = MAX_MESSAGE_LENGTH) -> str:
    """Free text: tabs and line breaks allowed, no NUL or other control characters."""
    if required and not value.strip():
        raise InvalidArgument(f"{field} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} characters long; the limit is {limit}")
    if _TEXT_CONTROL.search(value):
        raise InvalidArgument(f"{field} contains NUL or control characters (only tab and line breaks are allowed)")
    _no_surrogates(field, value)
    return value


def _no_surrogates(field: str, value: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"{field} contains a lone surrogate (not Unicode text)") from None


def parse_json(field: str, value: bytes, **hooks: Any) -> Any:
    """The JSON value of strict UTF-8 JSON bytes; InvalidArgument naming the field otherwise."""
    try:
        decoded = value.decode("utf-8")  # strict: refuses UTF-16/32 and encoded surrogates
    except UnicodeDecodeError:
        raise InvalidArgument(f"{field} is not UTF-8 (JSON must be UTF-8, RFC 8259)") from None
    if decoded.startswith("\ufeff"):
        raise InvalidArgument(f"{field} starts with a byte-order mark; send JSON without one")
    try:
        try:
            parsed = json.loads(decoded, parse_constant=_reject_constant, **hooks)
        except ValueError as exc:
            if "parse_int" in hooks or "integer string conversion" not in str(exc):
                raise
            # An integer longer than Python's int() accepts (4,300 digits) is still JSON:
            # parse again with a hook only then (a hook on every number costs time).
            parsed = json.loads(decoded, parse_constant=_reject_constant, parse_int=_big_int, **hooks)
    except RecursionError:
        raise InvalidArgument(f"{field} is nested too deeply to be a state (hundreds of levels)") from None
    except ValueError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc}") from None
    if _SURROGATE_ESCAPE.search(value) and _has_lone_surrogate(parsed):
        raise InvalidArgument(f"{field} contains a lone surrogate escape (\\uD800-\\uDFFF without its pair)")
    return parsed


def json_bytes(field: str, value: bytes, *, required: bool = True) -> bytes:
    """Checks the bytes are strict UTF-8 JSON; returns them unchanged (they are stored as sent).

    No Python object tree is built for a document simdjson accepts: its C++
    parser validates (UTF-8 included) at several hundred MB/s into a tape that
    is freed at once. What it refuses, and what it may judge differently
    (a byte-order mark, a surrogate escape), goes to parse_json, which decides
    and names the problem: integers beyond 64 bits and numbers beyond the
    double range are JSON to it, as they are stored as sent.
    """
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required (JSON)")
        return value
    if not _accepted_without_objects(value):
        parse_json(field, value)
    return value


# A parser keeps its buffers for the next document: one per thread, for documents
# up to this size; a larger one gets a parser of its own that goes with it.
_REUSED_PARSER_BYTES = 1 << 20
_parsers = threading.local()


def _accepted_without_objects(value: bytes) -> bool:
    """True when simdjson accepts the bytes as strict JSON; False means "not sure", never "invalid"."""
    if value.startswith(b"\xef\xbb\xbf") or _SURROGATE_ESCAPE.search(value):
        return False
    parser: simdjson.Parser | None = None
    if len(value) <= _REUSED_PARSER_BYTES:
        parser = getattr(_parsers, "parser", None)
        if parser is None:
            parser = _parsers.parser = simdjson.Parser()
    try:
        # The document proxy parse returns is dropped at once, and the tape with it.
        (parser or simdjson.Parser()).parse(value)
    except Exception:  # noqa: BLE001 - any refusal only means: let the full parse decide
        return False
    return True


def _big_int(digits: str) -> object:
    # Python refuses int() of more than 4,300 digits; a valid JSON integer of any
    # length is still JSON, so the check only needs its syntax (already matched).
    return int(digits) if len(digits) <= 4000 else 0


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _reject_constant(name: str) -> object:
    # NaN and Infinity are not JSON (RFC 8259): n8n's JSON.parse would refuse them later.
    raise ValueError(f"{name} is not a JSON value")


def in_range(field: str, value: int, low: int, high: int, *, default: int | None = None) -> int:
    """value within [low, high]; 0 means default when one is given."""
    if value == 0 and default is not None:
        return default
    if not low <= value <= high:
        raise InvalidArgument(f"{field} must be {low} to {high}, got {value}")
    return value


def page_size(value: int) -> int:
    return in_range("page_size", value, 1, 1000, default=100)


_HEX_SHA256 = re.compile(r"[0-9a-f]{64}")


def sha256_hex(field: str, value: str) -> str:
    """A content's SHA-256 as 64 lower-case hex digits."""
    if not value:
        raise InvalidArgument(f"{field} is required")
    if not _HEX_SHA256.fullmatch(value):
        raise InvalidArgument(f"{field} must be a SHA-256 as 64 lower-case hex digits")
    return value
