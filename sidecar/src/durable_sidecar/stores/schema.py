"""Forward-only migrations: numbered .sql files per SQL dialect, and the checksum rule every backend applies."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from ..errors import FailedPrecondition

Dialect = Literal["postgres", "sqlite"]
DIALECTS: tuple[Dialect, ...] = ("postgres", "sqlite")

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(dialect: Dialect) -> list[Migration]:
    """The dialect's migrations (durable_sidecar/migrations/<dialect>/NNNN_name.sql), by number."""
    out = []
    for entry in resources.files("durable_sidecar.migrations").joinpath(dialect).iterdir():
        match = _NAME.match(entry.name)
        if match:
            out.append(Migration(int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    out.sort(key=lambda m: m.version)
    versions = [m.version for m in out]
    if versions != list(range(1, len(out) + 1)):
        raise RuntimeError(f"migration numbers must be 1..N without gaps, found {versions}")
    return out


def pending(applied: dict[int, tuple[str, str]], migrations: list[Migration]) -> list[Migration]:
    """The migrations not applied yet, given {version: (name, checksum)} of those that are.

    A changed applied file, or an applied version this sidecar does not know,
    is a FailedPrecondition: nothing is applied then.
    """
    for m in migrations:
        if m.version in applied and applied[m.version][1] != m.checksum:
            raise FailedPrecondition(
                f"migration {applied[m.version][0]} was changed after it was applied (checksum mismatch); "
                "migrations are forward-only: add a new numbered file instead"
            )
    unknown = set(applied) - {m.version for m in migrations}
    if unknown:
        raise FailedPrecondition(
            f"the database has migrations this sidecar does not know ({sorted(unknown)}): it is older than the schema"
        )
    return [m for m in migrations if m.version not in applied]


# Read by each backend at start-up; the same text on both.
APPLIED_SQL = "SELECT version, name, checksum FROM durable_schema_migrations"


def require_current(dialect: Dialect, applied: dict[int, tuple[str, str]], too_old: str) -> None:
    """Refuses to serve a database that lacks a migration this sidecar needs (DURABLE_AUTO_MIGRATE off)."""
    missing = pending(applied, load_migrations(dialect))
    if missing:
        raise FailedPrecondition(f"{too_old}; missing: {', '.join(m.name for m in missing)}")
