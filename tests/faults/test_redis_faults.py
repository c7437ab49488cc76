"""Redis slow, dropped or stale: outcomes identical, only latency changes."""

from __future__ import annotations

import redis as redis_lib
from durable_sidecar import app

from tests.conftest import make_settings
from tests.faults.infra import TcpProxy
from tests.faults.report import TALLY
from tests.sidecar.helpers import Stubs, channel, redis_server
from tests.sidecar.test_checkpoints import item, latest, new_key, save, start


async def test_slow_dropped_and_stale_redis_change_no_outcome(database_url: str) -> None:
    with redis_server() as redis:
        proxy = TcpProxy(target_port=redis.port)
        proxy.start()
        settings = make_settings(database_url, redis_url=f"redis://127.0.0.1:{proxy.port}/0",
                                 auth_tokens="slowredis-1=ns-slowredis", redis_timeout_seconds=0.1)
        sidecar = await app.start(settings)
        ch = channel(sidecar.port)
        s = Stubs(ch, "slowredis-1")
        try:
            keys = [new_key() for _ in range(5)]
            expected = {}
            for i, key in enumerate(keys):
                await start(s, key)
                await save(s, item(key, "payment", {"i": i}))
                expected[key] = (await latest(s, key)).state_json
            faults = 0
            # 1. Slower than the cache timeout: every call falls back to PostgreSQL.
            proxy.latency_s = 0.3
            faults += 1
            for key in keys:
                assert (await latest(s, key)).state_json == expected[key]
            # 2. Connections dropped mid-flight, then refused.
            proxy.latency_s = 0.0
            proxy.drop_all()
            proxy.refusing = True
            faults += 2
            for i, key in enumerate(keys):
                await save(s, item(key, "shipping", {"i": i, "shipped": True}))
                expected[key] = (await latest(s, key)).state_json
            proxy.refusing = False
            # 3. Stale and foreign data planted in the cache is never served.
            client = redis_lib.Redis(port=redis.port)
            for k in client.keys("durable:v1:*"):
                client.set(k, b'{"stale": true}')
            client.close()
            faults += 1
            for key in keys:
                got = await latest(s, key)
                assert got.state_json == expected[key] and b"shipped" in got.state_json
            TALLY.add("redis slow, dropped, refused, stale", faults=faults, operations=30)
        finally:
            await ch.close()
            await sidecar.stop(grace=0.5)
            proxy.stop()
