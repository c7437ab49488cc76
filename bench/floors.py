"""The floors: a raw psycopg single-row durable INSERT (and primary-key SELECT), and a no-op grpc.aio call (unary,
and carried on an open stream as the nodes send theirs)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import grpc
from durable.v1 import call_pb2, checkpoint_pb2
from psycopg_pool import AsyncConnectionPool

from bench.call_stream import CallStream
from bench.infra import TOKEN
from bench.loadgen import WorkerBody, timed
from bench.noop_server import LOAD_METHOD, SAVE_METHOD, STREAM_METHOD

METADATA = (("authorization", f"Bearer {TOKEN}"),)


class RawPostgres:
    """psycopg 3 straight to PostgreSQL: what one durable write and one read cost with nothing in between.

    Autocommit, so each INSERT is its own transaction and commits with the
    server's synchronous_commit (on). The pool is as large as the sidecar's, so
    both get the same number of PostgreSQL connections at every concurrency.
    """

    def __init__(self, database_url: str, pool_max: int) -> None:
        self.database_url = database_url
        self.pool_max = pool_max
        self.pool: AsyncConnectionPool | None = None

    async def open(self, concurrency: int) -> None:
        size = max(1, min(concurrency, self.pool_max))
        self.pool = AsyncConnectionPool(self.database_url, min_size=size, max_size=size, open=False,
                                        kwargs={"autocommit": True}, name="bench-floor")
        await self.pool.open()
        await self.pool.wait(timeout=30)
        async with self.pool.connection() as conn:
            await conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, payload bytea NOT NULL)")
            cur = await conn.execute("SHOW synchronous_commit")
            row = await cur.fetchone()
            assert row is not None and row[0] == "on", f"synchronous_commit is {row}: the floor must be durable"

    async def close(self) -> None:
        if self.pool is not None:
            async with self.pool.connection() as conn:
                await conn.execute("TRUNCATE bench_floor")
            await self.pool.close()
            self.pool = None

    def insert_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        pool = self.pool
        assert pool is not None

        async def insert() -> None:
            async with pool.connection() as conn:
                await conn.execute("INSERT INTO bench_floor (payload) VALUES (%s)", (payload,))

        return [timed(insert) for _ in range(concurrency)]

    async def select_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        pool = self.pool
        assert pool is not None
        async with pool.connection() as conn:
            cur = await conn.execute("INSERT INTO bench_floor (payload) VALUES (%s) RETURNING id", (payload,))
            row = await cur.fetchone()
        assert row is not None
        row_id = row[0]

        async def select() -> None:
            async with pool.connection() as conn:
                cur = await conn.execute("SELECT payload FROM bench_floor WHERE id = %s", (row_id,))
                got = await cur.fetchone()
                assert got is not None and len(got[0]) == len(payload)

        return [timed(select) for _ in range(concurrency)]


def save_request(payload: bytes, step: str) -> checkpoint_pb2.SaveCheckpointsRequest:
    """The SaveCheckpoints request the sidecar benchmark sends, so the floor carries the same bytes."""
    return checkpoint_pb2.SaveCheckpointsRequest(items=[checkpoint_pb2.SaveCheckpointItem(
        workflow_id="bench-wf", instance_key="bench-w0-0000000000", step_name=step, state_json=payload,
        execution_id="bench-exec-w0", node_name="Durable Checkpoint")])


class NoopGrpc:
    """Calls the no-op server: the cost of a grpc.aio round trip of the same size, both ends in Python."""

    def __init__(self, channels: Sequence[grpc.aio.Channel]) -> None:
        self.channels = channels
        self._streams: dict[int, CallStream] = {}

    def stream_save_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        """The save floor carried on one open stream per channel (bench/noop_server.py `Stream`), as the nodes'
        calls are: the CallRequest envelope and its answer, no handler behind them."""
        bodies = []
        for worker in range(concurrency):
            channel = self.channels[worker % len(self.channels)]
            stream = self._streams.get(id(channel))
            if stream is None or stream.reader.done():
                stream = self._streams[id(channel)] = CallStream(channel, METADATA, STREAM_METHOD)
            counter = itertools.count()

            async def save(stream: CallStream = stream, counter: itertools.count[int] = counter) -> None:
                await stream.send(call_pb2.CallRequest(
                    method=SAVE_METHOD, request=save_request(payload, f"step-{next(counter)}").SerializeToString()))

            bodies.append(timed(save))
        return bodies

    def save_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        bodies = []
        for worker in range(concurrency):
            call = self.channels[worker % len(self.channels)].unary_unary(SAVE_METHOD)
            counter = itertools.count()

            async def save(call: grpc.aio.UnaryUnaryMultiCallable = call, counter: itertools.count[int] = counter) -> None:
                # Built and serialised per call, as the sidecar client does.
                await call(save_request(payload, f"step-{next(counter)}").SerializeToString(), metadata=METADATA)

            bodies.append(timed(save))
        return bodies

    def load_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        size = len(payload)
        bodies = []
        for worker in range(concurrency):
            call = self.channels[worker % len(self.channels)].unary_unary(LOAD_METHOD)

            async def load(call: grpc.aio.UnaryUnaryMultiCallable = call) -> None:
                reply = await call(size.to_bytes(8, "big"), metadata=METADATA)
                assert len(reply) == size

            bodies.append(timed(load))
        return bodies
