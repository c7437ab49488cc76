"""Keyset paging: the cursor a page token carries, and cutting a page one row longer than asked."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import InvalidArgument

T = TypeVar("T")


def encode_cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values, default=str).encode()).decode()


def decode_cursor(token: str, length: int) -> list[Any]:
    try:
        values = json.loads(base64.urlsafe_b64decode(token.encode()))
    except ValueError:
        raise InvalidArgument("page_token is not a token this server issued") from None
    # No cursor holds a boolean, and bool passes an isinstance(int) check. (The
    # transport's signature check refuses crafted tokens first; this is the second wall.)
    if not isinstance(values, list) or len(values) != length or any(isinstance(v, bool) for v in values):
        raise InvalidArgument("page_token is not a token this server issued")
    return values


def after_sequence(token: str) -> int:
    """The sequence a checkpoint page token continues after (0: from the start)."""
    if not token:
        return 0
    (after,) = decode_cursor(token, 1)
    return after if isinstance(after, int) else 0


def cut_page(rows: list[T], size: int, cursor: Callable[[T], list[Any]]) -> tuple[list[T], str]:
    """The first `size` rows (the query asked for size + 1) and the token of the next page ('' at the end)."""
    if len(rows) <= size:
        return rows, ""
    rows = rows[:size]
    return rows, encode_cursor(cursor(rows[-1]))
