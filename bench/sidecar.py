"""Sidecar scenarios through the generated durable.v1 stubs: save, load, batched save, claim, start-or-resume."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from durable.v1 import (
    call_pb2,
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    idempotency_pb2,
    idempotency_pb2_grpc,
    instance_pb2,
    instance_pb2_grpc,
    limits_pb2,
    limits_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
)
from durable_sidecar.transport.owners import SESSION_METADATA

from bench import n8n_mix
from bench.call_stream import CallStream
from bench.floors import METADATA
from bench.loadgen import WorkerBody, timed

WORKFLOW = "bench-wf"
BATCH_ITEMS = 100
SCOPE = "bench-payment"
# Worker set-up (creating instances, completing keys) runs at most this many calls at once.
_SETUP_PARALLEL = 32

T = TypeVar("T")


class WrongOutcome(Exception):
    """The sidecar answered, but not with the outcome the scenario measures."""


async def _bounded(factories: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    gate = asyncio.Semaphore(_SETUP_PARALLEL)

    async def one(factory: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await factory()

    return list(await asyncio.gather(*(one(f) for f in factories)))


@dataclass
class _OrderAt:
    """Where one worker's n8n order stands: its key, the index of the next Save (-1: start a new order) and the
    attempt of the key its last call claimed."""

    key: str = ""
    n: int = -1
    attempt: int = 0


class Session:
    """The session an n8n process keeps (node-package/shared/grpc/session.ts): opened at the first call, a
    heartbeat at the interval the sidecar asks for, opened again when it ended (a restarted sidecar's grace
    passed). The mix's calls carry it, as the nodes' do, so each order's first call records its execution
    against it."""

    def __init__(self, channel: Callable[[], grpc.aio.Channel]) -> None:
        self._channel = channel  # the client's current one (a restarted sidecar gets new channels)
        self._id = ""
        self._opening: asyncio.Lock | None = None
        self._beating: asyncio.Task[None] | None = None

    def _stub(self) -> session_pb2_grpc.SessionServiceStub:
        return session_pb2_grpc.SessionServiceStub(self._channel())

    async def id(self) -> str:
        if self._id:
            return self._id
        self._opening = self._opening or asyncio.Lock()
        async with self._opening:
            if not self._id:
                opened = await self._stub().OpenSession(session_pb2.OpenSessionRequest(
                    host="bench-host", pid=1, mode="regular", client="bench"), metadata=METADATA, timeout=10)
                self._id = opened.session.session_id
                if self._beating is None:
                    self._beating = asyncio.create_task(self._beat(opened.heartbeat_interval_ms / 1000 or 1.0))
        return self._id

    async def _beat(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            sid = self._id
            try:
                answer = await self._stub().Heartbeat(session_pb2.HeartbeatRequest(session_id=sid), metadata=METADATA,
                                                    timeout=5)
                if answer.ended and self._id == sid:
                    self._id = ""
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND and self._id == sid:
                    self._id = ""
                # Else the sidecar restarts: the next beat tries again, within the grace.
            except grpc.aio.UsageError:
                pass  # its channel was closed for a restarted sidecar's: the next beat uses the new one

    async def close(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)
        if self._id:
            try:
                await self._stub().CloseSession(session_pb2.CloseSessionRequest(session_id=self._id),
                                              metadata=METADATA, timeout=10)
            except grpc.aio.AioRpcError:
                pass  # the sidecar ends it after its grace


class SidecarClient:
    """Stubs over a few channels; worker i uses channel i mod n."""

    def __init__(self, channels: Sequence[grpc.aio.Channel]) -> None:
        self.channels = channels
        self._streams: dict[int, CallStream] = {}
        self.session = Session(lambda: self.channels[0])
        self._run = uuid.uuid4().hex[:8]
        self._serial = itertools.count()

    def unique(self, kind: str) -> str:
        return f"{kind}-{self._run}-{next(self._serial)}"

    def instances(self, worker: int) -> instance_pb2_grpc.InstanceServiceStub:
        return instance_pb2_grpc.InstanceServiceStub(self.channels[worker % len(self.channels)])

    def checkpoints(self, worker: int) -> checkpoint_pb2_grpc.CheckpointServiceStub:
        return checkpoint_pb2_grpc.CheckpointServiceStub(self.channels[worker % len(self.channels)])

    def idempotency(self, worker: int) -> idempotency_pb2_grpc.IdempotencyServiceStub:
        return idempotency_pb2_grpc.IdempotencyServiceStub(self.channels[worker % len(self.channels)])

    async def start_instance(self, worker: int, key: str, execution_id: str) -> None:
        reply = await self.instances(worker).StartOrResume(instance_pb2.StartOrResumeRequest(
            workflow_id=WORKFLOW, instance_key=key, execution_id=execution_id), metadata=METADATA)
        if reply.outcome != instance_pb2.START_OUTCOME_STARTED:
            raise WrongOutcome(f"StartOrResume of a new key answered {reply.outcome}")

    # -- checkpoints ---------------------------------------------------------------------------------

    async def save_setup(self, concurrency: int) -> list[str]:
        """One new instance per worker."""
        keys = [self.unique("save") for _ in range(concurrency)]
        await _bounded([lambda w=w: self.start_instance(w, keys[w], f"exec-{keys[w]}") for w in range(concurrency)])
        return keys

    def save_bodies(self, keys: list[str], payload: bytes) -> list[WorkerBody]:
        """Each worker appends checkpoints to its own instance, a new step name every call (never deduplicated)."""
        bodies = []
        for worker, key in enumerate(keys):
            stub, counter = self.checkpoints(worker), itertools.count()

            async def save(stub: checkpoint_pb2_grpc.CheckpointServiceStub = stub, key: str = key,
                           counter: itertools.count[int] = counter) -> None:
                reply = await stub.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
                    checkpoint_pb2.SaveCheckpointItem(
                        workflow_id=WORKFLOW, instance_key=key, step_name=f"step-{next(counter)}", state_json=payload,
                        execution_id=f"exec-{key}", node_name="Durable Checkpoint")]), metadata=METADATA)
                if reply.results[0].deduplicated:
                    raise WrongOutcome("a new step was deduplicated")

            bodies.append(timed(save))
        return bodies

    async def load_setup(self, payload: bytes, concurrency: int) -> list[str]:
        """One instance per worker with one checkpoint of `payload`."""
        keys = [self.unique("load") for _ in range(concurrency)]

        async def prepare(worker: int) -> None:
            await self.start_instance(worker, keys[worker], f"exec-{keys[worker]}")
            await self.checkpoints(worker).SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
                checkpoint_pb2.SaveCheckpointItem(workflow_id=WORKFLOW, instance_key=keys[worker], step_name="loaded",
                                                  state_json=payload, execution_id=f"exec-{keys[worker]}")]),
                metadata=METADATA)

        await _bounded([lambda w=w: prepare(w) for w in range(concurrency)])
        return keys

    def load_bodies(self, keys: list[str], payload: bytes) -> list[WorkerBody]:
        """Each worker reads the newest checkpoint of its own instance with its state (the resume read)."""
        bodies = []
        for worker, key in enumerate(keys):
            stub = self.checkpoints(worker)

            async def load(stub: checkpoint_pb2_grpc.CheckpointServiceStub = stub, key: str = key) -> None:
                reply = await stub.GetLatestCheckpoint(checkpoint_pb2.GetLatestCheckpointRequest(
                    workflow_id=WORKFLOW, instance_key=key, include_state=True), metadata=METADATA)
                if len(reply.checkpoint.state_json) != len(payload):
                    raise WrongOutcome("the loaded state has the wrong size")

            bodies.append(timed(load))
        return bodies

    async def batch_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        """Each call saves BATCH_ITEMS checkpoints, one to each of the worker's own instances, in one RPC."""
        keys = [[self.unique("batch") for _ in range(BATCH_ITEMS)] for _ in range(concurrency)]
        await _bounded([lambda w=w, k=k: self.start_instance(w, k, f"exec-batch-w{w}")
                        for w in range(concurrency) for k in keys[w]])
        bodies = []
        for worker in range(concurrency):
            stub, mine, counter = self.checkpoints(worker), keys[worker], itertools.count()

            async def save_batch(stub: checkpoint_pb2_grpc.CheckpointServiceStub = stub, mine: list[str] = mine,
                                 counter: itertools.count[int] = counter, worker: int = worker) -> None:
                step = f"step-{next(counter)}"
                reply = await stub.SaveCheckpoints(checkpoint_pb2.SaveCheckpointsRequest(items=[
                    checkpoint_pb2.SaveCheckpointItem(workflow_id=WORKFLOW, instance_key=key, step_name=step,
                                                      state_json=payload, execution_id=f"exec-batch-w{worker}",
                                                      node_name="Durable Checkpoint")
                    for key in mine]), metadata=METADATA)
                if len(reply.results) != len(mine):
                    raise WrongOutcome("a batch answered the wrong number of results")

            bodies.append(timed(save_batch))
        return bodies

    # -- limits (issue 43) ----------------------------------------------------------------------------

    def limits(self, worker: int) -> limits_pb2_grpc.LimitServiceStub:
        return limits_pb2_grpc.LimitServiceStub(self.channels[worker % len(self.channels)])

    async def limit_setup(self, concurrency: int) -> list[str]:
        """One new instance per worker, held by its execution (what a Resume Point leaves before the limit)."""
        keys = [self.unique("limit") for _ in range(concurrency)]
        await _bounded([lambda w=w: self.start_instance(w, keys[w], f"exec-{keys[w]}") for w in range(concurrency)])
        return keys

    def limit_pair_bodies(self, keys: list[str]) -> list[WorkerBody]:
        """An Enter Section and a Leave Section per call (AcquireSlot, ReleaseSlot), on one key shared by every
        worker with a place for each (a section of an order's side effect)."""
        name, shared = self.unique("section"), "customer-1"
        bodies = []
        for worker, key in enumerate(keys):
            stub = self.limits(worker)

            async def pair(stub: limits_pb2_grpc.LimitServiceStub = stub, key: str = key) -> None:
                got = await stub.AcquireSlot(limits_pb2.AcquireSlotRequest(
                    workflow_id=WORKFLOW, instance_key=key, execution_id=f"exec-{key}", limit_name=name,
                    limit_key=shared, max_holders=len(keys)), metadata=METADATA)
                if got.outcome != limits_pb2.ACQUIRE_OUTCOME_ACQUIRED:
                    raise WrongOutcome(f"AcquireSlot with a place for every worker answered {got.outcome}")
                await stub.ReleaseSlot(limits_pb2.ReleaseSlotRequest(
                    workflow_id=WORKFLOW, instance_key=key, execution_id=f"exec-{key}", limit_name=name),
                    metadata=METADATA)

            bodies.append(timed(pair))
        return bodies

    def limit_rate_bodies(self, keys: list[str]) -> list[WorkerBody]:
        """A Rate Limit acquire per call (Throttle) on one key every worker shares, with a rate above what the
        sidecar serves (every call ALLOWED at once): what the limiter costs per acquire."""
        name = self.unique("rate")
        bodies = []
        for worker, key in enumerate(keys):
            stub = self.limits(worker)

            async def take(stub: limits_pb2_grpc.LimitServiceStub = stub, key: str = key) -> None:
                got = await stub.Throttle(limits_pb2.ThrottleRequest(
                    workflow_id=WORKFLOW, instance_key=key, execution_id=f"exec-{key}", limit_name=name,
                    limit_key="api", limit=1_000_000, period_ms=1000, burst=1_000_000, max_wait_ms=0),
                    metadata=METADATA)
                if got.outcome != limits_pb2.THROTTLE_OUTCOME_ALLOWED:
                    raise WrongOutcome(f"Throttle under its rate answered {got.outcome}")

            bodies.append(timed(take))
        return bodies

    # -- instances -----------------------------------------------------------------------------------

    def start_bodies(self, concurrency: int) -> list[WorkerBody]:
        """StartOrResume of a new business key each call: what every new order's first node does."""
        bodies = []
        for worker in range(concurrency):

            async def start(worker: int = worker) -> None:
                key = self.unique("start")
                await self.start_instance(worker, key, f"exec-{key}")

            bodies.append(timed(start))
        return bodies

    def _order_step(self, start: Callable[[instance_pb2.StartOrResumeRequest],
                                          Awaitable[instance_pb2.StartOrResumeResponse]],
                    save: Callable[[checkpoint_pb2.SaveCheckpointsRequest],
                                   Awaitable[checkpoint_pb2.SaveCheckpointsResponse]]) -> Callable[[], Awaitable[None]]:
        """One worker's next RPC of its current n8n order (bench/n8n_mix.py): StartOrResume (start item, claim
        ahead) then three SaveCheckpoints (state merge, key completion with the next claim; the last completes
        the instance), sent through `start` and `save`."""
        at = _OrderAt()

        async def step() -> None:
            if at.n < 0:
                key = self.unique("order")
                reply = await start(n8n_mix.start_request(WORKFLOW, key, f"exec-{key}"))
                if reply.outcome != instance_pb2.START_OUTCOME_STARTED or not reply.start_claim.key.attempt:
                    raise WrongOutcome(f"a new order's start answered {reply.outcome} without its claim ahead")
                at.key, at.n, at.attempt = key, 0, reply.start_claim.key.attempt
                return
            result = (await save(n8n_mix.save_request(WORKFLOW, at.key, f"exec-{at.key}", at.n, at.attempt))).results[0]
            if result.deduplicated:
                raise WrongOutcome("an order's save was deduplicated")
            last = at.n == len(n8n_mix.CALLS) - 1
            at.n, at.attempt = (-1, 0) if last else (at.n + 1, result.next_claim.key.attempt)

        return step

    def n8n_mix_bodies(self, concurrency: int) -> list[WorkerBody]:
        """The RPCs of durable n8n orders on the documented wiring, each a unary call; latency is per RPC."""
        bodies = []
        for worker in range(concurrency):
            instances, checkpoints = self.instances(worker), self.checkpoints(worker)
            bodies.append(timed(self._order_step(
                self._in_session(instances.StartOrResume), self._in_session(checkpoints.SaveCheckpoints))))
        return bodies

    def _in_session(self, method: Callable[..., Awaitable[T]]) -> Callable[[Any], Awaitable[T]]:
        async def call(request: Any) -> T:
            return await method(request, metadata=(*METADATA, (SESSION_METADATA, await self.session.id())))

        return call

    def stream(self, worker: int) -> CallStream:
        """The open call stream of worker's channel (one per channel, as the nodes keep one per process)."""
        channel = self.channels[worker % len(self.channels)]
        stream = self._streams.get(id(channel))
        if stream is None or stream.reader.done():
            stream = self._streams[id(channel)] = CallStream(channel, METADATA)
        return stream

    def n8n_mix_stream_bodies(self, concurrency: int) -> list[WorkerBody]:
        """The same orders, each call carried on the channel's open CallService/Call stream, as the nodes send
        them (node-package/shared/grpc/call-stream.ts). Latency is per call."""

        def carried(worker: int, path: str, response: Any) -> Callable[[Any], Awaitable[Any]]:
            async def call(request: Any) -> Any:
                answer = await self.stream(worker).send(call_pb2.CallRequest(
                    method=path, request=request.SerializeToString(), session=await self.session.id()))
                if answer.code:
                    raise WrongOutcome(f"{path} answered code {answer.code}: {answer.message}")
                return response.FromString(answer.response)

            return call

        return [timed(self._order_step(
            carried(worker, "/durable.v1.InstanceService/StartOrResume", instance_pb2.StartOrResumeResponse),
            carried(worker, "/durable.v1.CheckpointService/SaveCheckpoints", checkpoint_pb2.SaveCheckpointsResponse)))
            for worker in range(concurrency)]

    # -- idempotency ---------------------------------------------------------------------------------

    def _claim(self, key: str, payload: bytes) -> idempotency_pb2.ClaimRequest:
        return idempotency_pb2.ClaimRequest(items=[idempotency_pb2.ClaimItem(
            scope=SCOPE, key=key, payload_json=payload, holder="bench-exec")])

    def claim_new_bodies(self, payload: bytes, concurrency: int) -> list[WorkerBody]:
        """Claim of a key nobody used before: ACQUIRED, attempt 1."""
        bodies = []
        for worker in range(concurrency):
            stub = self.idempotency(worker)

            async def claim(stub: idempotency_pb2_grpc.IdempotencyServiceStub = stub) -> None:
                reply = await stub.Claim(self._claim(self.unique("key"), payload), metadata=METADATA)
                if reply.results[0].outcome != idempotency_pb2.CLAIM_OUTCOME_ACQUIRED:
                    raise WrongOutcome(f"a new key answered {reply.results[0].outcome}")

            bodies.append(timed(claim))
        return bodies

    async def completed_keys(self, payload: bytes, result: bytes, concurrency: int) -> list[str]:
        """One completed key per worker: claimed, then completed with `result`."""
        keys = [self.unique("done") for _ in range(concurrency)]

        async def complete(worker: int) -> None:
            stub = self.idempotency(worker)
            reply = await stub.Claim(self._claim(keys[worker], payload), metadata=METADATA)
            if reply.results[0].outcome != idempotency_pb2.CLAIM_OUTCOME_ACQUIRED:
                raise WrongOutcome(f"a new key answered {reply.results[0].outcome}")
            await stub.Complete(idempotency_pb2.CompleteRequest(
                scope=SCOPE, key=keys[worker], attempt=reply.results[0].key.attempt, result_json=result),
                metadata=METADATA)

        await _bounded([lambda w=w: complete(w) for w in range(concurrency)])
        return keys

    def claim_done_bodies(self, keys: list[str], payload: bytes, result: bytes) -> list[WorkerBody]:
        """Claim of a completed key with the same payload: DUPLICATE, the stored result replayed."""
        bodies = []
        for worker, key in enumerate(keys):
            stub, request = self.idempotency(worker), self._claim(key, payload)

            async def claim(stub: idempotency_pb2_grpc.IdempotencyServiceStub = stub,
                            request: idempotency_pb2.ClaimRequest = request) -> None:
                reply = await stub.Claim(request, metadata=METADATA)
                got = reply.results[0]
                if got.outcome != idempotency_pb2.CLAIM_OUTCOME_DUPLICATE or len(got.key.result_json) != len(result):
                    raise WrongOutcome(f"a completed key answered {got.outcome}")

            bodies.append(timed(claim))
        return bodies
