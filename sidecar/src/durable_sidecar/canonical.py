"""The one canonical JSON: RFC 8785 (JCS), for idempotency fingerprints and definition hashes.

A JSON text becomes a value the way JavaScript's JSON.parse reads it (every
number an IEEE 754 double, so 1, 1.0 and 1e0 are one value and a 20-digit
integer is rounded), then the value is serialised by the rfc8785 library:
keys sorted by UTF-16 code units, no whitespace, numbers in ECMAScript form
(1e16 is written 10000000000000000, 1e21 as 1e+21). The nodes send payloads,
never fingerprints of their own: this is the one implementation.

A number beyond the double range (1e400, a 400-digit integer) has no
canonical form in either language: InvalidArgument, asking for an explicit
fingerprint instead.

Migration: before RFC 8785, fingerprints and content hashes used Python's
json.dumps with sorted keys (``legacy_*`` below). Stored fingerprints and
content hashes are not rewritten; the services accept a match on either form
(see IdempotencyService and VersionService), so keys claimed and versions
registered before the upgrade keep matching. The legacy forms can be dropped
once no key can outlive the upgrade (the longest TTL, 366 days) and every
workflow has registered a version since.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

from . import validation
from .errors import InvalidArgument


def parse(field: str, payload: bytes) -> Any:
    """The JSON value as JavaScript reads it: strict UTF-8 JSON, every number a double."""
    return validation.parse_json(field, payload, parse_int=float, parse_float=float)


def canonical_value(field: str, value: Any) -> bytes:
    """RFC 8785 bytes of a parsed value."""
    try:
        return rfc8785.dumps(value)
    except rfc8785.FloatDomainError:
        raise InvalidArgument(f"{field} contains a number beyond the IEEE 754 double range, which has no canonical "
                              "JSON form (RFC 8785): send your own fingerprint instead") from None
    except rfc8785.CanonicalizationError as exc:
        raise InvalidArgument(f"{field} cannot be written as canonical JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgument(f"{field} is nested too deeply (hundreds of levels)") from None


def canonical_json(payload: bytes, field: str = "payload_json") -> bytes:
    """RFC 8785 canonical form of JSON bytes; InvalidArgument naming the field when they are not JSON."""
    return canonical_value(field, parse(field, payload))


def fingerprint_of(payload: bytes, field: str = "payload_json") -> str:
    """Lower-case hex SHA-256 of the payload's RFC 8785 form: key order, whitespace and number spelling do not change it."""
    return hashlib.sha256(canonical_json(payload, field)).hexdigest()


# --- the forms before RFC 8785, accepted during the transition -------------------


def _legacy_normalise(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _legacy_normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_legacy_normalise(v) for v in value]
    return value


def legacy_dumps(value: Any) -> bytes:
    """Sorted keys, no whitespace, Python's number spelling: the definition hash before RFC 8785."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def legacy_fingerprint_of(payload: bytes) -> str:
    """The idempotency fingerprint before RFC 8785; "" when that form cannot be computed."""
    try:
        value = json.loads(payload.decode("utf-8"))
        text = json.dumps(_legacy_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    except (ValueError, RecursionError):
        return ""
