"""The one wiring of settings → stores → services, used by `serve` (app.py) and the operator CLI alike."""

from __future__ import annotations

from dataclasses import dataclass

from .domain import RetryPolicy
from .domain_files import FileLimits
from .memory.cache import MemoryCache
from .memory.states import StateMemory
from .n8n_api import N8nClient
from .services.audit import AuditService
from .services.checkpoints import CheckpointService
from .services.events import EventService
from .services.files import FileService
from .services.idempotency import IdempotencyService
from .services.instances import InstanceService
from .services.limits import LimitService
from .services.operations import OperationService
from .services.purge import PurgeService
from .services.recovery import RecoveryService
from .services.replay import ReplayService
from .services.search_fields import SearchFieldService
from .services.sessions import SessionService
from .services.signal_start import SignalStarts
from .services.versions import VersionService
from .settings import Settings
from .stores.backend import Backend, open_postgres, open_sqlite
from .stores.cache import Cache, RedisCache


async def open_backend(settings: Settings, *, owner: bool, migrate: bool) -> Backend:
    """Opens the configured backend, applying pending migrations first when asked.

    owner: this process serves the database (the sidecar). For the embedded
    database that takes the file's exclusive lock, so a second sidecar on the
    same file fails at once; operator commands (the CLI) open it without.
    """
    threshold = settings.compress_threshold_bytes
    if settings.embedded:
        return await open_sqlite(settings.sqlite_path, owner=owner, migrate=migrate,
                                 retry_attempts=settings.db_retry_attempts,
                                 wait_timeout_seconds=settings.db_pool_timeout_seconds,
                                 compress_threshold_bytes=threshold)
    return await open_postgres(settings.database_url, migrate=migrate, min_size=settings.db_pool_min,
                               max_size=settings.db_pool_max, connect_timeout=settings.db_connect_timeout_seconds,
                               retry_attempts=settings.db_retry_attempts, pool_timeout=settings.db_pool_timeout_seconds,
                               compress_threshold_bytes=threshold)


def make_cache(settings: Settings, *, shared_only: bool = False) -> Cache:
    """Redis when a URL is configured; else the in-process cache (or none at all with shared_only)."""
    if settings.redis_url:
        return RedisCache(settings.redis_url, max_connections=settings.redis_pool_max,
                          timeout_seconds=settings.redis_timeout_seconds, ttl_seconds=settings.cache_ttl_seconds,
                          max_item_bytes=settings.cache_max_item_bytes)
    return MemoryCache(max_bytes=0 if shared_only else settings.local_cache_max_bytes,
                       ttl_seconds=settings.cache_ttl_seconds, max_item_bytes=settings.cache_max_item_bytes)


@dataclass
class Services:
    """The services over one backend: what the gRPC servicers and the CLI commands call."""

    instances: InstanceService
    checkpoints: CheckpointService
    keys: IdempotencyService
    versions: VersionService
    events: EventService
    recovery: RecoveryService
    audit: AuditService
    sessions: SessionService
    limits: LimitService
    purge: PurgeService
    search: SearchFieldService
    operations: OperationService
    replay: ReplayService
    files: FileService


def build_services(settings: Settings, backend: Backend, cache: Cache, *, keys_cache: Cache | None = None) -> Services:
    """The services as the server builds them; the CLI passes its own caches (keys_cache: the one keys talk to)."""
    db = backend.db
    keys = IdempotencyService(db, backend.idempotency, keys_cache or cache,
                              default_lease_seconds=settings.idempotency_lease_seconds,
                              default_ttl_seconds=settings.idempotency_ttl_seconds,
                              max_batch_items=settings.max_batch_items, max_payload_bytes=settings.max_state_bytes,
                              reaper_batch_size=settings.reaper_batch_size, instances=backend.instances,
                              local_keys=settings.local_key_cache_entries,
                              # As for states: PostgreSQL serves small results as cheaply as Redis.
                              cache_min_bytes=settings.compress_threshold_bytes if settings.redis_url else 0)
    checkpoints = CheckpointService(db, backend.instances, backend.checkpoints, cache,
                                    max_state_bytes=settings.max_state_bytes,
                                    max_batch_items=settings.max_batch_items,
                                    default_lease_seconds=settings.lease_seconds, keys=keys,
                                    # Small states are cheaper from PostgreSQL than from Redis; the
                                    # in-process cache (embedded setup) is cheaper than either.
                                    cache_min_bytes=settings.compress_threshold_bytes if settings.redis_url else 0,
                                    # Large reads take at most half the pool (and at most 4 at once).
                                    large_read_slots=max(1, min(4, settings.db_pool_max // 2)),
                                    # The newest state per instance, for one-statement step saves where the backend has them.
                                    memory=StateMemory() if backend.checkpoints.one_statement_step_save else None)
    n8n = N8nClient(settings.n8n_base_url, settings.n8n_api_key, timeout_seconds=settings.n8n_timeout_seconds,
                    max_bytes=settings.max_state_bytes)
    versions = VersionService(db, backend.versions, backend.instances, n8n,
                              sync_interval_seconds=settings.n8n_sync_interval_seconds,
                              max_batch_items=settings.max_batch_items)
    default_retry = RetryPolicy(max_automatic_resumes=settings.retry_max_automatic_resumes,
                                initial_backoff_ms=settings.retry_initial_backoff_ms,
                                max_backoff_ms=settings.retry_max_backoff_ms,
                                backoff_multiplier=settings.retry_backoff_multiplier, jitter=settings.retry_jitter)
    instances = InstanceService(db, backend.instances, backend.checkpoints, checkpoints, versions,
                                default_lease_seconds=settings.lease_seconds, waits=backend.waits,
                                default_retry_policy=default_retry, keys=keys)
    instances.fields = backend.search_fields
    # A save with complete_instance completes its instance with the instance service's own completion.
    checkpoints.completer = instances.complete_txn
    events = EventService(db, backend.instances, backend.waits, max_payload_bytes=settings.max_state_bytes,
                          default_lease_seconds=settings.lease_seconds)
    events.starts = SignalStarts(backend.instances, backend.checkpoints, checkpoints, versions, backend.waits,
                                 default_lease_seconds=settings.lease_seconds)
    recovery = RecoveryService(db, backend.instances, backend.waits, purged=backend.purge)
    sessions = SessionService(db, backend.sessions, grace_seconds=settings.session_grace_seconds,
                              key_lease_seconds=settings.idempotency_lease_seconds)
    # The Resume Trigger's streams claim at once when a session's end frees leases.
    instances.wait_for_freed = sessions.wait_for_freed
    limits = LimitService(db, backend.instances, backend.limits)
    replay = ReplayService(db, backend.instances, backend.replay, backend.versions, backend.waits, backend.purge,
                           default_lease_seconds=settings.lease_seconds)
    operations = OperationService(db, backend.operations, recovery, instances.cancel_txn, move=versions.move_one_txn,
                                  replay=replay.replay_txn, versions=backend.versions)
    # Whatever makes instances due now (a place given, an event delivered, a signal's start, a redrive, a bulk
    # operation's batch) or parks one until a time (a rate limit's slot, a wait's timeout, a scheduled wake-up)
    # wakes this replica's Resume Trigger streams: they claim at once, or plan their next claim for that time.
    limits.on_due = events.on_due = recovery.on_due = operations.on_due = replay.on_due = sessions.wake_streams
    instances.on_due = sessions.wake_streams
    # An instance that finishes hands the places it held on at once, not at the limit sweep's next pass.
    checkpoints.on_finished = instances.on_finished = limits.finished
    # The cache the states are in: the CLI's shared one (Redis), else the server's own.
    purge = PurgeService(db, backend.instances, backend.purge, keys_cache or cache, checkpoints)
    search = SearchFieldService(db, backend.instances, backend.search_fields)
    files = FileService(db, backend.files, backend.checkpoints, FileLimits(
        max_file_bytes=settings.max_file_bytes, max_checkpoint_file_bytes=settings.max_checkpoint_file_bytes,
        max_checkpoint_files=settings.max_checkpoint_files,
        max_namespace_file_bytes=settings.max_namespace_file_bytes), grace_seconds=settings.file_grace_seconds)
    # Saves check and attach the files they carry; a replay's fork gets the files of what it copied.
    checkpoints.files = files
    # Saves and starts set the search fields they carry.
    checkpoints.search = instances.search = search
    return Services(instances, checkpoints, keys, versions, events, recovery, AuditService(db, backend.instances, backend.versions),
                    sessions, limits, purge, search, operations, replay, files)
