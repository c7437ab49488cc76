"""Shared fixtures: one throwaway database per session, a real in-process sidecar per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from durable_sidecar import app
from durable_sidecar.settings import Settings
from durable_sidecar.stores.migrate import migrate

from tests.sidecar.helpers import REDIS_URL, Stubs, channel, create_database, drop_database


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """A fresh, migrated database for the whole session (dropped at the end)."""
    import asyncio

    url = create_database()
    asyncio.run(migrate(url))
    yield url
    drop_database(url)


def make_settings(database_url: str, **overrides: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": REDIS_URL,
        "listen_address": "127.0.0.1:0",
        "metrics_address": "",
        "auth_tokens": "",
        "auth_disabled": False,
        "auto_migrate": False,
        "db_pool_min": 1,
        "db_pool_max": 8,
        "shutdown_grace_seconds": 1.0,
    }
    base.update(overrides)
    return Settings.from_env(environ={}, **base)


class Harness:
    """A running in-process sidecar with two namespaces (alpha, beta) and stubs for each."""

    def __init__(self, sidecar: app.Sidecar, alpha: Stubs, beta: Stubs) -> None:
        self.sidecar = sidecar
        self.alpha = alpha
        self.beta = beta


@pytest.fixture
async def harness(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    overrides = getattr(request, "param", {}) or {}
    suffix = uuid.uuid4().hex[:12]
    alpha_token, beta_token = f"alpha-{suffix}", f"beta-{suffix}"
    settings = make_settings(
        database_url,
        auth_tokens=f"{alpha_token}=ns-alpha-{suffix},{beta_token}=ns-beta-{suffix}",
        **overrides,
    )
    sidecar = await app.start(settings)
    ch = channel(sidecar.port)
    try:
        yield Harness(sidecar, Stubs(ch, alpha_token), Stubs(ch, beta_token))
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.faults.report import TALLY

    if not TALLY.lines:
        return
    tr = terminalreporter
    tr.section("fault summary")
    for line in TALLY.lines:
        tr.write_line(line)
    tr.write_line(
        f"TOTAL faults injected={TALLY.faults_injected} operations={TALLY.operations} "
        f"lost acknowledged writes={TALLY.lost_acknowledged_writes} (must be 0) "
        f"duplicate completions={TALLY.duplicate_completions} (must be 0)"
    )
