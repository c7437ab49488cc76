"""WaitStore on SQLite: the shared SQL of stores/waits.py run on the embedded connection."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import waits
from ..base import Conn
from ..core import Row
from .db import DIALECT, lite, to_micros


class Runner(waits.Runner):
    dialect = DIALECT

    async def all(self, conn: Conn, query: str, params: dict[str, Any]) -> list[Row]:
        return list(await lite(conn).all(query, params))

    async def now(self, conn: Conn) -> datetime:
        return lite(conn).now

    def at(self, value: datetime | None) -> Any:
        return None if value is None else to_micros(value)


def wait_store() -> waits.WaitStore:
    return waits.WaitStore(Runner())
