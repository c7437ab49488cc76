"""Input checks shared by the services: identifiers, JSON payloads, ranges."""

from __future__ import annotations

import json

from .errors import InvalidArgument

MAX_ID_LENGTH = 255
MAX_MESSAGE_LENGTH = 4096


def identifier(field: str, value: str, *, required: bool = True) -> str:
    """A 1-255 character identifier without control characters."""
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required")
        return value
    if len(value) > MAX_ID_LENGTH:
        raise InvalidArgument(f"{field} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidArgument(f"{field} contains control characters")
    return value


def text(field: str, value: str, *, required: bool = False, limit: int = MAX_MESSAGE_LENGTH) -> str:
    if required and not value.strip():
        raise InvalidArgument(f"{field} is required")
    if len(value) > limit:
        raise InvalidArgument(f"{field} is {len(value)} characters long; the limit is {limit}")
    return value


def json_bytes(field: str, value: bytes, *, required: bool = True) -> bytes:
    """Checks the bytes are UTF-8 JSON; returns them unchanged (they are stored as sent)."""
    if not value:
        if required:
            raise InvalidArgument(f"{field} is required (JSON)")
        return value
    try:
        json.loads(value, parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise InvalidArgument(f"{field} is not UTF-8") from None
    except ValueError as exc:
        raise InvalidArgument(f"{field} is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidArgument(f"{field} is nested too deeply to be a state (hundreds of levels)") from None
    return value


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
