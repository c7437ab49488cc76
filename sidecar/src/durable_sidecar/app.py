"""Wiring: settings → stores → services → gRPC server, and its ordered start and graceful stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from durable.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    call_pb2,
    call_pb2_grpc,
    checkpoint_pb2,
    checkpoint_pb2_grpc,
    events_pb2,
    events_pb2_grpc,
    files_pb2,
    files_pb2_grpc,
    idempotency_pb2,
    idempotency_pb2_grpc,
    instance_pb2,
    instance_pb2_grpc,
    limits_pb2,
    limits_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    session_pb2,
    session_pb2_grpc,
    version_pb2,
    version_pb2_grpc,
)
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from . import allocator, failpoints, metrics, telemetry
from .failpoints import parse as parse_failpoints
from .services.limits import LimitService
from .settings import Settings
from .stores.backend import Backend
from .stores.base import MAINTENANCE_INTERVAL_SECONDS, Database
from .stores.cache import Cache
from .stores.gauges import instance_gauges
from .transport import dispatch
from .transport import http as http_json
from .transport.audit import AuditServicer
from .transport.auth import Authenticator
from .transport.boundary import Boundary, DecodeGuard, PageTokens, StreamLimits
from .transport.calls import CallServicer
from .transport.checkpoints import CheckpointServicer
from .transport.events import EventServicer, RecoveryServicer
from .transport.files import FileServicer
from .transport.idempotency import IdempotencyServicer
from .transport.instances import InstanceServicer
from .transport.limits import LimitServicer
from .transport.operations import OperationServicer
from .transport.sessions import SessionServicer
from .transport.versions import VersionServicer
from .wiring import Services, build_services, make_cache, open_backend

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Served:
    """One service of the contract: its descriptor, how grpc registers its servicer, and how that is built."""

    descriptor: ServiceDescriptor
    add_to_server: Callable[[Any, grpc.aio.Server], None]
    build: Callable[[Services, Authenticator, asyncio.Event], object]


# The one table of what the sidecar serves: gRPC registration, the HTTP/JSON face, health and
# reflection all read it. A new service is one row here.
SERVED = [
    Served(instance_pb2.DESCRIPTOR.services_by_name["InstanceService"],
           instance_pb2_grpc.add_InstanceServiceServicer_to_server,
           lambda s, auth, stopping: InstanceServicer(s.instances, auth, stopping, s.sessions, s.search)),
    Served(checkpoint_pb2.DESCRIPTOR.services_by_name["CheckpointService"],
           checkpoint_pb2_grpc.add_CheckpointServiceServicer_to_server,
           lambda s, auth, _: CheckpointServicer(s.checkpoints, auth)),
    Served(idempotency_pb2.DESCRIPTOR.services_by_name["IdempotencyService"],
           idempotency_pb2_grpc.add_IdempotencyServiceServicer_to_server,
           lambda s, auth, _: IdempotencyServicer(s.keys, auth)),
    Served(version_pb2.DESCRIPTOR.services_by_name["VersionService"],
           version_pb2_grpc.add_VersionServiceServicer_to_server,
           lambda s, auth, _: VersionServicer(s.versions, auth)),
    Served(audit_pb2.DESCRIPTOR.services_by_name["AuditService"],
           audit_pb2_grpc.add_AuditServiceServicer_to_server,
           lambda s, auth, _: AuditServicer(s.audit, auth)),
    Served(events_pb2.DESCRIPTOR.services_by_name["EventService"],
           events_pb2_grpc.add_EventServiceServicer_to_server,
           lambda s, auth, _: EventServicer(s.events, auth)),
    Served(events_pb2.DESCRIPTOR.services_by_name["RecoveryService"],
           events_pb2_grpc.add_RecoveryServiceServicer_to_server,
           lambda s, auth, _: RecoveryServicer(s.recovery, auth, s.purge, s.replay)),
    Served(session_pb2.DESCRIPTOR.services_by_name["SessionService"],
           session_pb2_grpc.add_SessionServiceServicer_to_server,
           lambda s, auth, stopping: SessionServicer(s.sessions, auth, stopping)),
    Served(limits_pb2.DESCRIPTOR.services_by_name["LimitService"],
           limits_pb2_grpc.add_LimitServiceServicer_to_server,
           lambda s, auth, _: LimitServicer(s.limits, auth)),
    Served(operations_pb2.DESCRIPTOR.services_by_name["OperationService"],
           operations_pb2_grpc.add_OperationServiceServicer_to_server,
           lambda s, auth, _: OperationServicer(s.operations, auth)),
    Served(files_pb2.DESCRIPTOR.services_by_name["FileService"],
           files_pb2_grpc.add_FileServiceServicer_to_server,
           lambda s, auth, _: FileServicer(s.files, auth, max_batch_items=s.checkpoints.max_batch_items)),
]
# The call stream carries the unary methods of SERVED (transport/calls.py); it is built from their routes.
CALL_SERVICE = call_pb2.DESCRIPTOR.services_by_name["CallService"]
SERVICE_NAMES = [*(served.descriptor.full_name for served in SERVED), CALL_SERVICE.full_name]


@dataclass
class Sidecar:
    """A running sidecar; `port` is the bound gRPC port."""

    settings: Settings
    db: Database
    cache: Cache
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    stopping: asyncio.Event
    metrics_server: metrics.MetricsServer | None = None
    http_server: http_json.HttpJsonServer | None = None
    background: list[asyncio.Task[None]] = field(default_factory=list)
    # Awaited after the server stopped and before the pools close (pending cache writes).
    drains: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    stopped: bool = False

    async def stop(self, grace: float | None = None) -> None:
        """Health NOT_SERVING, stop accepting and drain in-flight RPCs, then close pools."""
        if self.stopped:
            return
        self.stopped = True
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        log.info("shutting down: health NOT_SERVING")
        self.stopping.set()
        for name in ["", *SERVICE_NAMES]:
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        log.info("draining in-flight RPCs", extra={"grace_s": grace})
        if self.http_server is not None:
            await self.http_server.stop()
        await self.server.stop(grace)
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        for drain in self.drains:
            await drain()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        await self.cache.close()
        await self.db.close()
        log.info("sidecar stopped")


class HealthMonitor:
    """Pings the database; gRPC health and /readyz say NOT_SERVING while it is unreachable.

    Two failed pings in a row turn health NOT_SERVING (one slow ping under load
    is not an outage); the first good ping turns it SERVING again, with no
    restart. After stop() began, health stays NOT_SERVING.
    """

    def __init__(self, db: Database, health_servicer: health.aio.HealthServicer, stopping: asyncio.Event, *,
                 interval_seconds: float) -> None:
        self.db = db
        self.health = health_servicer
        self.stopping = stopping
        self.interval_seconds = interval_seconds
        self.serving = True
        self._failures = 0

    async def check_once(self) -> None:
        ok = await self.db.ping()
        self._failures = 0 if ok else self._failures + 1
        serving = ok or self._failures < 2
        if serving == self.serving or self.stopping.is_set():
            return
        self.serving = serving
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *SERVICE_NAMES]:
            await self.health.set(name, status)
        if serving:
            log.info("database reachable again: health SERVING")
        else:
            log.warning("database unreachable: health NOT_SERVING until it answers again")

    async def run(self) -> None:
        while not self.stopping.is_set():
            try:
                await self.check_once()
            except Exception:  # the monitor must outlive any one failed check
                log.exception("health check failed unexpectedly")
            try:
                await asyncio.wait_for(self.stopping.wait(), timeout=self.interval_seconds)
            except TimeoutError:
                pass


async def refresh_instance_gauges(db: Database, dialect: str, stopping: asyncio.Event, *,
                                  interval_seconds: float, limits: LimitService) -> None:
    """Every interval, one query sets the instance gauges (metrics.py), one more the limit gauges; scrapes only
    read them."""
    while not stopping.is_set():
        try:
            metrics.set_instance_gauges(await instance_gauges(db, dialect))
            metrics.set_limit_gauges(await limits.gauges())
        except Exception:  # a failed refresh leaves the last values; the timestamp gauge shows their age
            log.warning("instance gauges not refreshed", exc_info=True)
        try:
            await asyncio.wait_for(stopping.wait(), timeout=interval_seconds)
        except TimeoutError:
            pass


async def stand_in_for_autovacuum(db: Database, stopping: asyncio.Event, *, interval_seconds: float) -> None:
    """While PostgreSQL's autovacuum is off, the sidecar's own tables get what its rules would give them."""
    while not stopping.is_set():
        try:
            await asyncio.wait_for(stopping.wait(), timeout=interval_seconds)
            return
        except TimeoutError:
            pass
        try:
            done = await db.stand_in_for_autovacuum()
        except Exception:  # maintenance only; the next round tries again
            log.warning("table maintenance failed", exc_info=True)
            continue
        for what in done:
            statement, _, table = what.rpartition(" ")
            metrics.TABLE_MAINTENANCE.labels(statement, table).inc()
        if done:
            log.info("tables maintained (autovacuum is off)", extra={"statements": done})


def _credentials(settings: Settings) -> grpc.ServerCredentials:
    with open(settings.tls_key_file, "rb") as fh:
        key = fh.read()
    with open(settings.tls_cert_file, "rb") as fh:
        cert = fh.read()
    client_ca = None
    if settings.tls_client_ca_file:
        with open(settings.tls_client_ca_file, "rb") as fh:
            client_ca = fh.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


async def start(settings: Settings) -> Sidecar:
    """Builds, registers, binds and starts the server; fails fast when the database cannot be used."""
    failpoints.enable(parse_failpoints(settings.failpoints))
    backend = await open_backend(settings, owner=True, migrate=settings.auto_migrate)
    if settings.auto_migrate:
        log.info("migrations checked", extra={"applied": list(backend.applied)})
    cache = make_cache(settings)
    try:
        cache.bind(await backend.db.installation_id())
        return await _serve(settings, backend, cache)
    except BaseException:
        # Nothing may stay open: the embedded database's file lock goes with its connection.
        await cache.close()
        await backend.db.close()
        raise


async def _serve(settings: Settings, backend: Backend, cache: Cache) -> Sidecar:
    db = backend.db
    if settings.redis_url and not await cache.ping():
        log.warning("Redis not reachable at start-up; serving from the database until it is")

    services = build_services(settings, backend, cache)
    auth = Authenticator(settings.tokens, disabled=settings.auth_disabled, roles=settings.token_roles)
    stopping = asyncio.Event()
    boundary = Boundary(
        max_json_bytes=settings.max_state_bytes, max_repeated=settings.max_batch_items,
        tokens=PageTokens.derived(settings.page_token_secret, await db.installation_id()),
        streams=StreamLimits(per_namespace=settings.watch_streams_per_namespace,
                             min_poll_interval_ms=settings.watch_min_poll_interval_ms),
    )

    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.so_reuseport", 0),
    ], interceptors=[DecodeGuard()])
    servicers = []
    for served in SERVED:
        servicer = served.build(services, auth, stopping)
        # Every request passes the one input boundary first (transport/rpc.py).
        setattr(servicer, "boundary", boundary)  # noqa: B010 - read by transport/rpc.py, not declared by the servicers
        # Every call that carries a session is judged by the one session service (transport/rpc.py).
        setattr(servicer, "sessions", services.sessions)  # noqa: B010 - as above
        served.add_to_server(servicer, server)
        servicers.append((served.descriptor, servicer))
    table = dispatch.routes(servicers)
    call_pb2_grpc.add_CallServiceServicer_to_server(CallServicer(table, auth, stopping), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        [*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
        server,
    )
    if settings.tls_enabled:
        port = server.add_secure_port(settings.listen_address, _credentials(settings))
    else:
        port = server.add_insecure_port(settings.listen_address)
    if port == 0:
        raise OSError(f"could not bind {settings.listen_address}")
    monitor = HealthMonitor(db, health_servicer, stopping, interval_seconds=settings.health_check_interval_seconds)
    metrics_server = None
    if settings.metrics_address:

        def ready() -> bool:
            return not stopping.is_set() and monitor.serving

        def refresh() -> None:
            stats = db.pool_stats()
            metrics.POOL_SIZE.labels("size").set(stats.get("pool_size", 0))
            metrics.POOL_SIZE.labels("available").set(stats.get("pool_available", 0))
            metrics.POOL_SIZE.labels("waiting").set(stats.get("requests_waiting", 0))

        # Bound before the gRPC server starts, so a taken port fails start-up with nothing left running.
        metrics_server = metrics.MetricsServer(settings.metrics_address, ready=ready, refresh=refresh)
    stop_traces = telemetry.configure(settings.traces_enabled)
    http_server = None
    if settings.http_listen_address:
        tls = (http_json.ssl_context(settings.tls_cert_file, settings.tls_key_file, settings.tls_client_ca_file)
               if settings.tls_enabled else None)
        http_server = http_json.HttpJsonServer(
            settings.http_listen_address, table,
            max_body_bytes=settings.max_message_bytes, ssl_context=tls,
            console=http_json.Console(settings.console_n8n_url) if settings.console_enabled else None,
            streaming=dispatch.streaming([descriptor for descriptor, _ in servicers]),
            files=next(servicer for _, servicer in servicers if isinstance(servicer, FileServicer)))
        # Bound before the gRPC server starts, so a taken port fails start-up with nothing left running.
        await http_server.start()
    await server.start()
    for name in ["", *SERVICE_NAMES]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)

    sidecar = Sidecar(settings=settings, db=db, cache=cache, server=server, health=health_servicer, port=port,
                      stopping=stopping, metrics_server=metrics_server, drains=[services.checkpoints.drain],
                      http_server=http_server)
    if stop_traces is not None:
        sidecar.drains.append(lambda: asyncio.to_thread(stop_traces))  # flushes the last spans
    if metrics_server is not None and settings.instance_gauges_interval_seconds > 0:
        sidecar.background.append(asyncio.create_task(
            refresh_instance_gauges(db, backend.dialect, stopping,
                                    interval_seconds=settings.instance_gauges_interval_seconds,
                                    limits=services.limits),
            name="instance-gauges"))
    sidecar.background.append(asyncio.create_task(services.keys.run_reaper(settings.reaper_interval_seconds),
                                                  name="idempotency-reaper"))
    sidecar.background.append(asyncio.create_task(monitor.run(), name="health-monitor"))
    sidecar.background.append(asyncio.create_task(services.sessions.run(stopping), name="session-sweep"))
    sidecar.background.append(asyncio.create_task(services.operations.run(
        stopping, idle_seconds=settings.operation_poll_interval_seconds), name="bulk-operations"))
    sidecar.background.append(asyncio.create_task(services.files.run_sweeper(
        stopping, interval_seconds=settings.file_sweep_interval_seconds), name="file-sweep"))
    sidecar.background.append(asyncio.create_task(services.limits.run_sweeper(
        stopping, interval_seconds=settings.limit_sweep_interval_seconds), name="limit-sweep"))
    sidecar.background.append(asyncio.create_task(
        stand_in_for_autovacuum(db, stopping, interval_seconds=MAINTENANCE_INTERVAL_SECONDS), name="table-maintenance"))
    if metrics_server is not None:
        metrics_server.start()
    log.info("sidecar serving", extra={"address": settings.listen_address, "port": port,
                                       "tls": settings.tls_enabled, "storage": backend.dialect,
                                       "traces": settings.traces_enabled,
                                       "cache": "redis" if settings.redis_url else "in-process" if cache.enabled else "off"})
    return sidecar


async def serve(settings: Settings) -> None:
    """Runs until SIGTERM or SIGINT, then stops gracefully."""
    allocator.tune()  # large states go back to the system once freed (see allocator.py)
    sidecar = await start(settings)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    await done.wait()
    log.info("signal received")
    await sidecar.stop()
