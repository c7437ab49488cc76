"""WaitStore on PostgreSQL: the shared SQL of stores/waits.py run through psycopg."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import waits
from ..base import Conn
from ..core import Row
from .db import DIALECT, database_now, pg


class Runner(waits.Runner):
    dialect = DIALECT

    async def all(self, conn: Conn, query: str, params: dict[str, Any]) -> list[Row]:
        cur = await pg(conn).execute(query, params)  # built from fixed SQL text only
        return list(await cur.fetchall()) if cur.description else []

    async def now(self, conn: Conn) -> datetime:
        return await database_now(conn)

    def at(self, value: datetime | None) -> Any:
        return value


def wait_store() -> waits.WaitStore:
    return waits.WaitStore(Runner())
