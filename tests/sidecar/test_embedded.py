"""The embedded default: no database URL means SQLite in the data folder, owned by one sidecar process, durable on kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from durable_sidecar import app
from durable_sidecar.errors import FailedPrecondition
from durable_sidecar.memory.cache import MemoryCache
from durable_sidecar.settings import Settings, SettingsError

from tests.conftest import make_settings
from tests.sidecar.helpers import SidecarProcess, Stubs, channel
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start

TOKEN = "embedded-token-1"
# The environment of `make test` may carry a PostgreSQL URL (the Makefile exports one for `make run`).
STORAGE_VARS = ("DURABLE_DATABASE_URL", "DURABLE_DATA_DIR", "DURABLE_REDIS_URL", "DURABLE_AUTO_MIGRATE")


def _first_run(cwd: Path) -> SidecarProcess:
    """`durable-sidecar serve` as a new user runs it: a token and nothing else."""
    return SidecarProcess({"DURABLE_AUTH_TOKENS": f"{TOKEN}=default"}, unset=STORAGE_VARS, cwd=str(cwd))


async def test_serve_without_a_database_url_keeps_state_in_the_data_folder_and_survives_kill9(tmp_path: Path) -> None:
    proc = _first_run(tmp_path)
    await asyncio.to_thread(proc.start)
    try:
        database = tmp_path / ".durable-data" / "durable.sqlite3"
        assert database.is_file(), "the embedded database is created under ./.durable-data"
        ch = channel(proc.port)
        s = Stubs(ch, TOKEN)
        key = new_key()
        await start(s, key)
        acked = await save(s, item(key, "payment", {"charged": 1999}))
        assert acked.results[0].checkpoint.sequence == 1
        await ch.close()
        proc.kill9()  # no shutdown at all: only what SQLite committed (WAL, synchronous=FULL) remains

        await asyncio.to_thread(proc.start)  # same folder, same file
        ch = channel(proc.port)
        s = Stubs(ch, TOKEN)
        got = await latest(s, key)
        assert got.sequence == 1 and json.loads(got.state_json) == {"charged": 1999}
        resumed = await start(s, key, "exec-after-crash", include_state=True)
        assert resumed.latest_checkpoint.sequence == 1
        # The CLI reads the same file beside the running sidecar (it does not own it).
        env = {k: v for k, v in os.environ.items() if k not in STORAGE_VARS}
        listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "durable_sidecar", "instances",
                                                          "list"], env=env, cwd=tmp_path, capture_output=True,
                                         text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert key in listed.stdout and "payment" in listed.stdout
        await ch.close()
        assert proc.terminate() == 0
    finally:
        proc.stop()


async def test_a_second_sidecar_on_the_same_file_fails_at_once_naming_the_file(tmp_path: Path) -> None:
    first = _first_run(tmp_path)
    await asyncio.to_thread(first.start)
    try:
        second = _first_run(tmp_path)
        began = time.monotonic()
        with pytest.raises(RuntimeError) as err:
            await asyncio.to_thread(second.start)
        assert time.monotonic() - began < 15, "the second sidecar must fail at once, not wait"
        message = str(err.value)
        assert "exited with 1" in message
        assert str(tmp_path / ".durable-data" / "durable.sqlite3") in message
        assert "in use by another sidecar process" in message and "PostgreSQL" in message
        # The first one is unharmed.
        ch = channel(first.port)
        assert (await start(Stubs(ch, TOKEN), new_key())).outcome
        await ch.close()
    finally:
        first.stop()


async def test_the_file_lock_is_held_while_serving_and_released_by_stop(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/data/durable.sqlite3"
    settings = make_settings(url, auth_tokens=f"{TOKEN}=default", auto_migrate=True)
    sidecar = await app.start(settings)
    try:
        with pytest.raises(FailedPrecondition, match="in use by another sidecar process"):
            await app.start(settings)
        # The refused start left nothing behind: the first keeps serving.
        ch = channel(sidecar.port)
        assert (await start(Stubs(ch, TOKEN), new_key())).outcome
        await ch.close()
    finally:
        await sidecar.stop(grace=0.5)
    again = await app.start(settings)
    await again.stop(grace=0.5)


def test_settings_choose_the_embedded_database_without_a_postgresql_url(tmp_path: Path) -> None:
    default = Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders"})
    assert default.embedded and default.redis_url == ""
    assert default.sqlite_path == os.path.join(os.getcwd(), ".durable-data", "durable.sqlite3")
    moved = Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders", "DURABLE_DATA_DIR": str(tmp_path)})
    assert moved.sqlite_path == str(tmp_path / "durable.sqlite3")
    named = Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders",
                               "DURABLE_DATABASE_URL": f"sqlite://{tmp_path}/x.sqlite3"})
    assert named.embedded and named.sqlite_path == str(tmp_path / "x.sqlite3")
    pg = Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders",
                            "DURABLE_DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/durable"})
    assert not pg.embedded
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"DURABLE_AUTH_TOKENS": "abcdefgh1=orders", "DURABLE_DATABASE_URL": "sqlite://relative.db",
                           "DURABLE_DATA_DIR": " ", "DURABLE_MAX_STATE_BYTES": "1073741824",
                           "DURABLE_MAX_MESSAGE_BYTES": "2000000000"})
    text = str(err.value)
    assert "DURABLE_DATABASE_URL" in text and "DURABLE_DATA_DIR" in text and "DURABLE_MAX_STATE_BYTES" in text


async def test_in_process_cache_evicts_least_recently_used_beyond_its_bytes_and_expires_entries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("durable_sidecar.memory.cache.time.monotonic", lambda: now[0])
    cache = MemoryCache(max_bytes=3000, ttl_seconds=60, max_item_bytes=2000)
    blob = b"x" * 700
    for seq in (1, 2, 3):
        await cache.put_state("ns", "wf", "k", seq, blob)
    assert await cache.get_state("ns", "wf", "k", 1) == blob  # 1 is now the most recently used
    await cache.put_state("ns", "wf", "k", 4, blob)  # over budget: 2, the least recently used, goes
    assert await cache.get_state("ns", "wf", "k", 2) is None
    assert [await cache.get_state("ns", "wf", "k", s) for s in (1, 3, 4)] == [blob] * 3
    assert cache.used_bytes <= cache.max_bytes
    await cache.put_state("ns", "wf", "k", 5, b"y" * 2001)  # larger than an item may be: not cached
    assert await cache.get_state("ns", "wf", "k", 5) is None
    await cache.put_completed_key("ns", "scope", "key", b"result", ttl_seconds=5)
    assert await cache.get_completed_keys([("ns", "scope", "key")]) == [b"result"]
    now[0] += 5
    assert await cache.get_completed_key("ns", "scope", "key") is None  # expired with its key's life
    off = MemoryCache(max_bytes=0, ttl_seconds=60, max_item_bytes=2000)
    await off.put_state("ns", "wf", "k", 1, blob)
    assert not off.enabled and await off.get_state("ns", "wf", "k", 1) is None
