"""Shared fixtures: one throwaway database per backend per session, a real in-process sidecar per test.

The behaviour suite is the conformance suite of the storage backends: every
test that uses `harness`, `database_url` or `backend` runs once on PostgreSQL
and once on the embedded SQLite database (ids `[postgres]`, `[sqlite]`). A
test that can only mean something on PostgreSQL says why with
`@pytest.mark.postgres_only(reason=...)`; the run ends with the list of them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_sidecar import app
from durable_sidecar.settings import Settings
from durable_sidecar.stores.backend import migrate

# The compose stack's fixtures, shared by tests/test_compose*.py and tests/test_patroni_example.py.
from tests.compose_stack import compose, filled_env  # noqa: F401
from tests.sidecar.helpers import REDIS_URL, Stubs, channel, create_database, drop_database
from tests.sidecar.storage import is_sqlite

BACKENDS = ("postgres", "sqlite")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres_only(reason): the test runs on PostgreSQL only; the reason says why it cannot mean "
                   "anything on the embedded database")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("postgres_only")
    metafunc.parametrize("backend", ["postgres"] if only else list(BACKENDS), indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    postgres_only: dict[str, list[str]] = {}
    for item in items:
        marker = item.get_closest_marker("postgres_only")
        if marker is None:
            continue
        reason = marker.kwargs.get("reason", "")
        if not reason:
            raise pytest.UsageError(f"{item.nodeid}: postgres_only needs reason=... (why not on SQLite)")
        postgres_only.setdefault(reason, []).append(item.nodeid)
    config.stash[_POSTGRES_ONLY] = postgres_only


_POSTGRES_ONLY = pytest.StashKey[dict[str, list[str]]]()


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend under test: postgres or sqlite."""
    name: str = request.param
    return name


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for the whole session (dropped at the end)."""
    url = create_database()
    asyncio.run(migrate(url))
    yield url
    drop_database(url)


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh, migrated embedded database file for the whole session."""
    path: Path = tmp_path_factory.mktemp("embedded") / "durable.sqlite3"
    url = f"sqlite://{path}"
    asyncio.run(migrate(url))
    return url


@pytest.fixture(scope="session")
def database_url(backend: str, request: pytest.FixtureRequest) -> str:
    """The session database of the backend under test."""
    url: str = request.getfixturevalue("postgres_url" if backend == "postgres" else "sqlite_url")
    return url


def make_settings(database_url: str, **overrides: Any) -> Settings:
    """Test settings; each backend in its natural setting: PostgreSQL with Redis, SQLite with the in-process cache."""
    base: dict[str, Any] = {
        "database_url": database_url,
        "redis_url": "" if is_sqlite(database_url) else REDIS_URL,
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
        yield Harness(sidecar, Stubs(ch, alpha_token, sidecar.port), Stubs(ch, beta_token, sidecar.port))
    finally:
        await ch.close()
        await sidecar.stop(grace=0.5)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    from tests.faults.report import TALLY

    tr = terminalreporter
    postgres_only = config.stash.get(_POSTGRES_ONLY, {})
    if postgres_only:
        tr.section("postgres-only tests (not run on the embedded database)")
        for reason, ids in postgres_only.items():
            tr.write_line(f"{len(ids)} test(s): {reason}")
            for nodeid in ids:
                tr.write_line(f"    {nodeid}")
    if not TALLY.lines:
        return
    tr.section("fault summary")
    for line in TALLY.lines:
        tr.write_line(line)
    tr.write_line(
        f"TOTAL faults injected={TALLY.faults_injected} operations={TALLY.operations} "
        f"lost acknowledged writes={TALLY.lost_acknowledged_writes} (must be 0) "
        f"duplicate completions={TALLY.duplicate_completions} (must be 0)"
    )


@pytest.fixture
async def operate_and_admin(database_url: str) -> AsyncIterator[tuple[Stubs, Stubs]]:
    """A sidecar on the session database with an operate token and an admin token of one new namespace."""
    suffix = uuid.uuid4().hex[:8]
    operate, admin = f"operate-{suffix}", f"admin-{suffix}"
    started = await app.start(make_settings(database_url, auth_tokens=f"{operate}=ns-roles-{suffix}:operate,"
                                                                      f"{admin}=ns-roles-{suffix}"))
    ch = channel(started.port)
    try:
        yield Stubs(ch, operate), Stubs(ch, admin)
    finally:
        await ch.close()
        await started.stop(grace=0.5)
