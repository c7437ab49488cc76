"""The sidecar's one settings object, read once from DURABLE_* environment variables."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .failpoints import parse as parse_failpoints
from .urls import POSTGRES_SCHEMES as _POSTGRES_SCHEMES
from .urls import SQLITE_SCHEME as _SQLITE_SCHEME
from .urls import sqlite_path_of

EMBEDDED_FILE_NAME = "durable.sqlite3"
# SQLite's default limit on one value is 1e9 bytes; the row around the state needs a little room.
_SQLITE_MAX_STATE_BYTES = 900_000_000


class SettingsError(Exception):
    """Every invalid setting, reported together so one start-up shows them all."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid settings:\n  - " + "\n  - ".join(problems))


def _meta(env: str, doc: str) -> dict[str, str]:
    return {"env": env, "doc": doc}


@dataclass(frozen=True)
class Settings:
    """Documented settings; each field's metadata names its variable and unit."""

    database_url: str = field(
        default="",
        metadata=_meta(
            "DURABLE_DATABASE_URL",
            "PostgreSQL connection URL (libpq form). Empty: the embedded SQLite database in DURABLE_DATA_DIR, "
            "owned by this one process; sqlite:///absolute/path.sqlite3 names its file.",
        ),
    )
    data_dir: str = field(
        default=".durable-data",
        metadata=_meta(
            "DURABLE_DATA_DIR",
            f"Folder of the embedded database ({EMBEDDED_FILE_NAME}) when DURABLE_DATABASE_URL is empty; "
            "relative to the working directory; created when missing.",
        ),
    )
    redis_url: str = field(
        default="",
        metadata=_meta(
            "DURABLE_REDIS_URL",
            "Redis URL of a cache the replicas share; empty: an in-process cache (DURABLE_LOCAL_CACHE_MAX_BYTES).",
        ),
    )
    local_cache_max_bytes: int = field(
        default=67_108_864,
        metadata=_meta(
            "DURABLE_LOCAL_CACHE_MAX_BYTES",
            "Size of the in-process cache used when DURABLE_REDIS_URL is empty; 0 disables it (bytes).",
        ),
    )
    listen_address: str = field(
        default="127.0.0.1:50051",
        metadata=_meta("DURABLE_LISTEN_ADDRESS", "host:port the gRPC server binds (port 0 picks a free one)."),
    )
    metrics_address: str = field(
        default="127.0.0.1:9464",
        metadata=_meta(
            "DURABLE_METRICS_ADDRESS",
            "host:port of the HTTP server for /metrics, /livez and /readyz; empty disables it.",
        ),
    )
    http_listen_address: str = field(
        default="",
        metadata=_meta(
            "DURABLE_HTTP_LISTEN_ADDRESS",
            "host:port of the HTTP/JSON face (the Connect protocol's unary JSON form of the same services, same "
            "tokens and TLS); empty disables it.",
        ),
    )
    console_enabled: bool = field(
        default=False,
        metadata=_meta(
            "DURABLE_CONSOLE_ENABLED",
            "The web console at /console/ on DURABLE_HTTP_LISTEN_ADDRESS (static files; every call it makes "
            "is an HTTP/JSON call with the operator's bearer token).",
        ),
    )
    console_n8n_url: str = field(
        default="",
        metadata=_meta(
            "DURABLE_CONSOLE_N8N_URL",
            "n8n's editor URL (e.g. https://n8n.example.com) the console links executions to; empty: no links.",
        ),
    )
    instance_gauges_interval_seconds: float = field(
        default=15.0,
        metadata=_meta(
            "DURABLE_INSTANCE_GAUGES_INTERVAL_SECONDS",
            "How often one query refreshes the instance gauges (by status, due wake-ups, oldest stalled) for "
            "/metrics; 0 turns them off (seconds).",
        ),
    )
    operation_poll_interval_seconds: float = field(
        default=2.0,
        metadata=_meta(
            "DURABLE_OPERATION_POLL_INTERVAL_SECONDS",
            "How often an idle sidecar looks for a bulk operation to run (one recorded by the CLI or another "
            "replica, or left by a sidecar that died); one it starts itself runs at once (seconds).",
        ),
    )
    limit_sweep_interval_seconds: float = field(
        default=1.0,
        metadata=_meta(
            "DURABLE_LIMIT_SWEEP_INTERVAL_SECONDS",
            "How often the sidecar hands places that were freed without a release (a holder finished, died or "
            "parked) to the waiters of concurrency limits; one query when none wait (seconds).",
        ),
    )
    traces_enabled: bool = field(
        default=False,
        metadata=_meta(
            "DURABLE_TRACES_ENABLED",
            "OpenTelemetry spans for every RPC, exported over OTLP/gRPC as the standard OTEL_* variables say "
            "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, ...).",
        ),
    )
    db_pool_min: int = field(
        default=2, metadata=_meta("DURABLE_DB_POOL_MIN", "Minimum PostgreSQL connections (the embedded database has one)."))
    db_pool_max: int = field(
        default=10, metadata=_meta("DURABLE_DB_POOL_MAX", "Maximum PostgreSQL connections (the embedded database has one)."))
    db_connect_timeout_seconds: float = field(
        default=10.0,
        metadata=_meta("DURABLE_DB_CONNECT_TIMEOUT_SECONDS",
                       "How long start-up waits for PostgreSQL; unused by the embedded database (seconds)."),
    )
    db_retry_attempts: int = field(
        default=5,
        metadata=_meta(
            "DURABLE_DB_RETRY_ATTEMPTS",
            "Attempts for a transaction that hits a transient error (PostgreSQL SQLSTATE 08, 40001, 40P01, 53, 57; "
            "SQLite busy or full).",
        ),
    )
    redis_pool_max: int = field(default=32, metadata=_meta("DURABLE_REDIS_POOL_MAX", "Maximum Redis connections."))
    redis_timeout_seconds: float = field(
        default=0.25,
        metadata=_meta("DURABLE_REDIS_TIMEOUT_SECONDS", "Socket timeout of every Redis call (seconds)."),
    )
    cache_ttl_seconds: int = field(
        default=3600, metadata=_meta("DURABLE_CACHE_TTL_SECONDS", "Lifetime of a cached checkpoint state (seconds).")
    )
    cache_max_item_bytes: int = field(
        default=1_048_576,
        metadata=_meta("DURABLE_CACHE_MAX_ITEM_BYTES", "States larger than this are not cached (bytes)."),
    )
    local_key_cache_entries: int = field(
        default=10_000,
        metadata=_meta(
            "DURABLE_LOCAL_KEY_CACHE_ENTRIES",
            "Completed idempotency keys each process keeps in memory in front of the shared cache, replayed "
            "without a network hop; 0 disables it (entries).",
        ),
    )
    lease_seconds: int = field(
        default=1800,
        metadata=_meta("DURABLE_LEASE_SECONDS", "The ceiling of an instance's lease: how long it lives after its "
                       "last renewal when nobody vouches for it (an n8n session renews the leases of executions "
                       "n8n still runs and frees those of ended ones) (seconds)."),
    )
    session_grace_seconds: float = field(
        default=5.0,
        metadata=_meta("DURABLE_SESSION_GRACE_SECONDS", "How long a session of an n8n process may go without a "
                       "heartbeat before it ends and its leases are freed; heartbeats come five times per period "
                       "(seconds)."),
    )
    retry_max_automatic_resumes: int = field(
        default=20,
        metadata=_meta("DURABLE_RETRY_MAX_AUTOMATIC_RESUMES",
                       "Default retry policy: automatic resumes of an instance without progress before it is "
                       "suspended; 0: no limit (count). A Resume Point's retry policy replaces the defaults."),
    )
    retry_initial_backoff_ms: int = field(
        default=0,
        metadata=_meta("DURABLE_RETRY_INITIAL_BACKOFF_MS",
                       "Default retry policy: backoff before the first automatic resume; 0: at once (milliseconds)."),
    )
    retry_max_backoff_ms: int = field(
        default=0,
        metadata=_meta("DURABLE_RETRY_MAX_BACKOFF_MS",
                       "Default retry policy: cap of the backoff; 0: one day (milliseconds)."),
    )
    retry_backoff_multiplier: float = field(
        default=2.0,
        metadata=_meta("DURABLE_RETRY_BACKOFF_MULTIPLIER",
                       "Default retry policy: growth of the backoff per attempt, 1 to 10 (factor)."),
    )
    retry_jitter: float = field(
        default=0.0,
        metadata=_meta("DURABLE_RETRY_JITTER",
                       "Default retry policy: fraction of the backoff taken off at random, 0 to 1 (fraction)."),
    )
    max_state_bytes: int = field(
        default=16_777_216,
        metadata=_meta(
            "DURABLE_MAX_STATE_BYTES", "Largest checkpoint state accepted; larger is RESOURCE_EXHAUSTED (bytes)."
        ),
    )
    max_file_bytes: int = field(
        default=104_857_600,
        metadata=_meta("DURABLE_MAX_FILE_BYTES", "Largest file (one n8n binary property) accepted; a larger upload "
                       "is RESOURCE_EXHAUSTED before anything is stored (bytes; default 100 MiB)."),
    )
    max_checkpoint_file_bytes: int = field(
        default=209_715_200,
        metadata=_meta("DURABLE_MAX_CHECKPOINT_FILE_BYTES", "Largest sum of the files one checkpoint carries; a "
                       "larger save is RESOURCE_EXHAUSTED and nothing is written (bytes; default 200 MiB)."),
    )
    max_checkpoint_files: int = field(
        default=100,
        metadata=_meta("DURABLE_MAX_CHECKPOINT_FILES", "Most files one checkpoint may carry."),
    )
    max_namespace_file_bytes: int = field(
        default=10_737_418_240,
        metadata=_meta("DURABLE_MAX_NAMESPACE_FILE_BYTES", "Most bytes of files one namespace may hold (each "
                       "content counted once); an upload past it is RESOURCE_EXHAUSTED (bytes; default 10 GiB)."),
    )
    file_grace_seconds: int = field(
        default=3600,
        metadata=_meta("DURABLE_FILE_GRACE_SECONDS", "How long a file no checkpoint or key refers to is kept "
                       "before the sweep prunes it (it may be uploaded for a save not yet made) (seconds)."),
    )
    file_sweep_interval_seconds: float = field(
        default=300.0,
        metadata=_meta("DURABLE_FILE_SWEEP_INTERVAL_SECONDS", "Pause between passes of the sweep that prunes "
                       "unreferenced files (seconds)."),
    )
    compress_threshold_bytes: int = field(
        default=16_384,
        metadata=_meta("DURABLE_COMPRESS_THRESHOLD_BYTES", "States at least this large are stored zlib-compressed and, with Redis, cached (bytes)."),
    )
    max_message_bytes: int = field(
        default=67_108_864,
        metadata=_meta(
            "DURABLE_MAX_MESSAGE_BYTES", "Largest gRPC message sent or received; at least max state + 1 MiB (bytes)."
        ),
    )
    max_batch_items: int = field(
        default=1000, metadata=_meta("DURABLE_MAX_BATCH_ITEMS", "Most items in one batched RPC.")
    )
    watch_streams_per_namespace: int = field(
        default=64,
        metadata=_meta(
            "DURABLE_WATCH_STREAMS_PER_NAMESPACE",
            "Most open WatchResumable streams of one namespace on one sidecar process; one more is "
            "RESOURCE_EXHAUSTED (streams).",
        ),
    )
    watch_min_poll_interval_ms: int = field(
        default=250,
        metadata=_meta(
            "DURABLE_WATCH_MIN_POLL_INTERVAL_MS",
            "Floor on a WatchResumable stream's poll interval; a shorter one asked for is raised to it (ms).",
        ),
    )
    page_token_secret: str = field(
        default="",
        metadata=_meta(
            "DURABLE_PAGE_TOKEN_SECRET",
            "Key that signs page tokens (HMAC-SHA256); empty: derived from the database's installation id, "
            "so every replica of one database shares it.",
        ),
    )
    health_check_interval_seconds: float = field(
        default=2.0,
        metadata=_meta(
            "DURABLE_HEALTH_CHECK_INTERVAL_SECONDS",
            "How often the database is pinged for gRPC health and /readyz: NOT_SERVING while it is unreachable "
            "(seconds).",
        ),
    )
    idempotency_lease_seconds: int = field(
        default=60,
        metadata=_meta("DURABLE_IDEMPOTENCY_LEASE_SECONDS", "Default lease of an acquired idempotency key (seconds)."),
    )
    idempotency_ttl_seconds: int = field(
        default=86_400,
        metadata=_meta("DURABLE_IDEMPOTENCY_TTL_SECONDS", "Default lifetime of an idempotency key (seconds)."),
    )
    reaper_interval_seconds: float = field(
        default=30.0,
        metadata=_meta("DURABLE_REAPER_INTERVAL_SECONDS", "Pause between expired-key reaper passes (seconds)."),
    )
    reaper_batch_size: int = field(
        default=500, metadata=_meta("DURABLE_REAPER_BATCH_SIZE", "Expired keys deleted per reaper transaction.")
    )
    auth_tokens: str = field(
        default="",
        metadata=_meta(
            "DURABLE_AUTH_TOKENS",
            "Comma-separated token=namespace pairs; a bearer token selects its namespace. token=namespace:read "
            "or token=namespace:operate gives the token a role with fewer rights than admin (the default): "
            "docs/operations.md, Who may do what.",
        ),
    )
    auth_disabled: bool = field(
        default=False,
        metadata=_meta(
            "DURABLE_AUTH_DISABLED",
            "Accept calls without a token, all in namespace 'default' (local trials only).",
        ),
    )
    tls_cert_file: str = field(
        default="", metadata=_meta("DURABLE_TLS_CERT_FILE", "PEM server certificate; set with the key to enable TLS.")
    )
    tls_key_file: str = field(default="", metadata=_meta("DURABLE_TLS_KEY_FILE", "PEM private key of the certificate."))
    tls_client_ca_file: str = field(
        default="",
        metadata=_meta("DURABLE_TLS_CLIENT_CA_FILE", "PEM CA bundle; when set, clients must present a certificate."),
    )
    log_level: str = field(default="INFO", metadata=_meta("DURABLE_LOG_LEVEL", "DEBUG, INFO, WARNING or ERROR."))
    log_format: str = field(default="json", metadata=_meta("DURABLE_LOG_FORMAT", "json (one object a line) or text."))
    auto_migrate: bool = field(
        default=True, metadata=_meta("DURABLE_AUTO_MIGRATE", "Whether `serve` applies pending migrations first.")
    )
    shutdown_grace_seconds: float = field(
        default=10.0,
        metadata=_meta("DURABLE_SHUTDOWN_GRACE_SECONDS", "How long SIGTERM waits for in-flight RPCs (seconds)."),
    )
    db_pool_timeout_seconds: float = field(
        default=5.0,
        metadata=_meta(
            "DURABLE_DB_POOL_TIMEOUT_SECONDS",
            "How long a call waits for a free PostgreSQL connection (embedded: for its turn at the database file) "
            "before UNAVAILABLE (seconds).",
        ),
    )
    failpoints: str = field(
        default="",
        metadata=_meta("DURABLE_FAILPOINTS", "Test only: comma-separated failpoints where the process dies on purpose."),
    )
    n8n_base_url: str = field(
        default="",
        metadata=_meta("DURABLE_N8N_BASE_URL", "n8n base URL for its public REST API (e.g. http://127.0.0.1:5678)."),
    )
    n8n_api_key: str = field(default="", metadata=_meta("DURABLE_N8N_API_KEY", "n8n API key (X-N8N-API-KEY)."))
    n8n_timeout_seconds: float = field(
        default=10.0,
        metadata=_meta("DURABLE_N8N_TIMEOUT_SECONDS", "Timeout of one request to n8n's REST API (seconds)."),
    )
    n8n_sync_interval_seconds: int = field(
        default=60,
        metadata=_meta(
            "DURABLE_N8N_SYNC_INTERVAL_SECONDS",
            "With n8n API access, StartOrResume re-reads a workflow's definition from n8n at most this often "
            "(and always while it has no version); 0 reads it only while it has none (seconds).",
        ),
    )

    @property
    def tokens(self) -> dict[str, str]:
        """Token to namespace map parsed from auth_tokens."""
        return _parse_tokens(self.auth_tokens)

    @property
    def token_roles(self) -> dict[str, str]:
        """Token to role ("read", "operate", "admin") parsed from auth_tokens."""
        return {token: role for token, (_, role) in _parse_token_entries(self.auth_tokens).items()}

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls_cert_file)

    @property
    def embedded(self) -> bool:
        """Whether the state lives in the embedded SQLite database (no PostgreSQL URL configured)."""
        return not self.database_url.startswith(_POSTGRES_SCHEMES)

    @property
    def sqlite_path(self) -> str:
        """The absolute path of the embedded database file."""
        if self.database_url.startswith(_SQLITE_SCHEME):
            return sqlite_path_of(self.database_url)
        return os.path.abspath(os.path.join(self.data_dir, EMBEDDED_FILE_NAME))

    @property
    def storage_url(self) -> str:
        """The PostgreSQL URL, or sqlite:// and the embedded database's absolute path."""
        return self.database_url if not self.embedded else _SQLITE_SCHEME + self.sqlite_path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Reads every DURABLE_* variable; raises SettingsError listing all problems."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        problems: list[str] = []
        for f in fields(cls):
            name = f.metadata["env"]
            if f.name in overrides:
                values[f.name] = overrides[f.name]
                continue
            raw = env.get(name)
            if raw is None:
                continue
            parser = _PARSERS[type(f.default)]
            try:
                values[f.name] = parser(raw.strip())
            except ValueError as exc:
                problems.append(f"{name}={raw!r}: {exc}")
        settings = cls(**values)
        problems.extend(settings.problems())
        if problems:
            raise SettingsError(problems)
        return settings

    def problems(self) -> list[str]:
        """Cross-field and range checks."""
        out: list[str] = []

        def need(cond: bool, env: str, msg: str) -> None:
            if not cond:
                out.append(f"{env}: {msg}")

        need(self.database_url == "" or self.database_url.startswith(_POSTGRES_SCHEMES)
             or (self.database_url.startswith(_SQLITE_SCHEME + "/") and len(self.database_url) > len(_SQLITE_SCHEME) + 1),
             "DURABLE_DATABASE_URL",
             "must be a postgresql:// URL, sqlite:///absolute/path.sqlite3, or empty (the embedded database)")
        need(bool(self.data_dir.strip()), "DURABLE_DATA_DIR", "must not be empty")
        need(self.local_cache_max_bytes >= 0, "DURABLE_LOCAL_CACHE_MAX_BYTES", "must not be negative")
        need(self.redis_url == "" or self.redis_url.startswith(("redis://", "rediss://", "unix://")),
             "DURABLE_REDIS_URL", "must be a redis:// or rediss:// URL, or empty")
        need(_is_host_port(self.listen_address), "DURABLE_LISTEN_ADDRESS", "must be host:port")
        need(self.metrics_address == "" or _is_host_port(self.metrics_address), "DURABLE_METRICS_ADDRESS",
             "must be host:port or empty")
        need(self.http_listen_address == "" or _is_host_port(self.http_listen_address), "DURABLE_HTTP_LISTEN_ADDRESS",
             "must be host:port or empty")
        need(self.http_listen_address == "" or self.http_listen_address.endswith(":0")
             or self.http_listen_address not in (self.listen_address, self.metrics_address),
             "DURABLE_HTTP_LISTEN_ADDRESS", "must differ from DURABLE_LISTEN_ADDRESS and DURABLE_METRICS_ADDRESS")
        need(not self.console_enabled or self.http_listen_address != "", "DURABLE_CONSOLE_ENABLED",
             "the console is served on the HTTP/JSON face: set DURABLE_HTTP_LISTEN_ADDRESS too")
        need(self.console_n8n_url == "" or self.console_n8n_url.startswith(("http://", "https://")),
             "DURABLE_CONSOLE_N8N_URL", "must be an http:// or https:// URL, or empty")
        need(self.instance_gauges_interval_seconds == 0 or 1 <= self.instance_gauges_interval_seconds <= 3600,
             "DURABLE_INSTANCE_GAUGES_INTERVAL_SECONDS", "must be 0 (off) or 1 to 3600")
        need(0.1 <= self.limit_sweep_interval_seconds <= 3600, "DURABLE_LIMIT_SWEEP_INTERVAL_SECONDS",
             "must be 0.1 to 3600")
        need(0.1 <= self.operation_poll_interval_seconds <= 3600, "DURABLE_OPERATION_POLL_INTERVAL_SECONDS",
             "must be 0.1 to 3600")
        need(self.max_file_bytes >= 0, "DURABLE_MAX_FILE_BYTES", "must not be negative")
        need(self.max_checkpoint_file_bytes >= 0, "DURABLE_MAX_CHECKPOINT_FILE_BYTES", "must not be negative")
        need(0 <= self.max_checkpoint_files <= 10_000, "DURABLE_MAX_CHECKPOINT_FILES", "must be 0 to 10000")
        need(self.max_namespace_file_bytes >= 0, "DURABLE_MAX_NAMESPACE_FILE_BYTES", "must not be negative")
        need(0 <= self.file_grace_seconds <= 30 * 86_400, "DURABLE_FILE_GRACE_SECONDS", "must be 0 to 2592000")
        need(0.1 <= self.file_sweep_interval_seconds <= 86_400, "DURABLE_FILE_SWEEP_INTERVAL_SECONDS",
             "must be 0.1 to 86400")
        need(1 <= self.db_pool_min <= self.db_pool_max, "DURABLE_DB_POOL_MIN", "must be 1 to DURABLE_DB_POOL_MAX")
        need(1 <= self.db_pool_max <= 1000, "DURABLE_DB_POOL_MAX", "must be 1 to 1000")
        need(self.db_connect_timeout_seconds > 0, "DURABLE_DB_CONNECT_TIMEOUT_SECONDS", "must be positive")
        need(0 < self.db_pool_timeout_seconds <= 600, "DURABLE_DB_POOL_TIMEOUT_SECONDS", "must be in (0, 600]")
        try:
            parse_failpoints(self.failpoints)
        except ValueError as exc:
            out.append(f"DURABLE_FAILPOINTS: {exc}")
        need(1 <= self.db_retry_attempts <= 100, "DURABLE_DB_RETRY_ATTEMPTS", "must be 1 to 100")
        need(1 <= self.redis_pool_max <= 10_000, "DURABLE_REDIS_POOL_MAX", "must be 1 to 10000")
        need(0 < self.redis_timeout_seconds <= 60, "DURABLE_REDIS_TIMEOUT_SECONDS", "must be in (0, 60]")
        need(self.cache_ttl_seconds >= 1, "DURABLE_CACHE_TTL_SECONDS", "must be at least 1")
        need(self.cache_max_item_bytes >= 0, "DURABLE_CACHE_MAX_ITEM_BYTES", "must not be negative")
        need(self.local_key_cache_entries >= 0, "DURABLE_LOCAL_KEY_CACHE_ENTRIES", "must not be negative")
        need(1 <= self.lease_seconds <= 86_400, "DURABLE_LEASE_SECONDS", "must be 1 to 86400")
        need(1.0 <= self.session_grace_seconds <= 300.0, "DURABLE_SESSION_GRACE_SECONDS", "must be 1 to 300")
        need(0 <= self.retry_max_automatic_resumes <= 1000, "DURABLE_RETRY_MAX_AUTOMATIC_RESUMES",
             "must be 0 to 1000")
        need(0 <= self.retry_initial_backoff_ms <= 86_400_000, "DURABLE_RETRY_INITIAL_BACKOFF_MS",
             "must be 0 to 86400000")
        need(0 <= self.retry_max_backoff_ms <= 86_400_000 and (
            self.retry_max_backoff_ms == 0 or self.retry_max_backoff_ms >= self.retry_initial_backoff_ms),
             "DURABLE_RETRY_MAX_BACKOFF_MS", "must be 0, or DURABLE_RETRY_INITIAL_BACKOFF_MS to 86400000")
        need(1 <= self.retry_backoff_multiplier <= 10, "DURABLE_RETRY_BACKOFF_MULTIPLIER", "must be 1 to 10")
        need(0 <= self.retry_jitter <= 1, "DURABLE_RETRY_JITTER", "must be 0 to 1")
        need(1 <= self.max_state_bytes <= 1_073_741_824, "DURABLE_MAX_STATE_BYTES", "must be 1 to 1 GiB")
        need(not self.embedded or self.max_state_bytes <= _SQLITE_MAX_STATE_BYTES, "DURABLE_MAX_STATE_BYTES",
             f"must be at most {_SQLITE_MAX_STATE_BYTES} with the embedded database (SQLite stores at most 1 GB "
             "in one value)")
        need(self.compress_threshold_bytes >= 0, "DURABLE_COMPRESS_THRESHOLD_BYTES", "must not be negative")
        need(self.max_message_bytes >= self.max_state_bytes + 1_048_576, "DURABLE_MAX_MESSAGE_BYTES",
             "must be at least DURABLE_MAX_STATE_BYTES + 1 MiB")
        need(self.max_message_bytes <= 2_147_483_647, "DURABLE_MAX_MESSAGE_BYTES", "must fit in 2 GiB")
        need(1 <= self.max_batch_items <= 100_000, "DURABLE_MAX_BATCH_ITEMS", "must be 1 to 100000")
        need(1 <= self.watch_streams_per_namespace <= 100_000, "DURABLE_WATCH_STREAMS_PER_NAMESPACE",
             "must be 1 to 100000")
        need(100 <= self.watch_min_poll_interval_ms <= 600_000, "DURABLE_WATCH_MIN_POLL_INTERVAL_MS",
             "must be 100 to 600000")
        need(0 < self.health_check_interval_seconds <= 300, "DURABLE_HEALTH_CHECK_INTERVAL_SECONDS",
             "must be in (0, 300]")
        need(1 <= self.idempotency_lease_seconds <= 86_400, "DURABLE_IDEMPOTENCY_LEASE_SECONDS",
             "must be 1 to 86400")
        need(60 <= self.idempotency_ttl_seconds <= 31_622_400, "DURABLE_IDEMPOTENCY_TTL_SECONDS",
             "must be 60 to 31622400")
        need(self.reaper_interval_seconds > 0, "DURABLE_REAPER_INTERVAL_SECONDS", "must be positive")
        need(1 <= self.reaper_batch_size <= 100_000, "DURABLE_REAPER_BATCH_SIZE", "must be 1 to 100000")
        try:
            tokens = _parse_tokens(self.auth_tokens)
        except ValueError as exc:
            out.append(f"DURABLE_AUTH_TOKENS: {exc}")
            tokens = {}
        need(bool(tokens) or self.auth_disabled, "DURABLE_AUTH_TOKENS",
             "no token configured: set token=namespace pairs (or DURABLE_AUTH_DISABLED=true for a local trial)")
        need(bool(self.tls_cert_file) == bool(self.tls_key_file), "DURABLE_TLS_CERT_FILE",
             "DURABLE_TLS_CERT_FILE and DURABLE_TLS_KEY_FILE must be set together")
        for env, path in (("DURABLE_TLS_CERT_FILE", self.tls_cert_file), ("DURABLE_TLS_KEY_FILE", self.tls_key_file),
                          ("DURABLE_TLS_CLIENT_CA_FILE", self.tls_client_ca_file)):
            need(path == "" or os.path.isfile(path), env, f"file {path!r} does not exist")
        need(not self.tls_client_ca_file or bool(self.tls_cert_file), "DURABLE_TLS_CLIENT_CA_FILE",
             "needs DURABLE_TLS_CERT_FILE and DURABLE_TLS_KEY_FILE")
        need(self.log_level.upper() in ("DEBUG", "INFO", "WARNING", "ERROR"), "DURABLE_LOG_LEVEL",
             "must be DEBUG, INFO, WARNING or ERROR")
        need(self.log_format in ("json", "text"), "DURABLE_LOG_FORMAT", "must be json or text")
        need(self.shutdown_grace_seconds >= 0, "DURABLE_SHUTDOWN_GRACE_SECONDS", "must not be negative")
        need(self.n8n_base_url == "" or self.n8n_base_url.startswith(("http://", "https://")),
             "DURABLE_N8N_BASE_URL", "must be an http:// or https:// URL, or empty")
        need(bool(self.n8n_base_url) == bool(self.n8n_api_key), "DURABLE_N8N_API_KEY",
             "DURABLE_N8N_BASE_URL and DURABLE_N8N_API_KEY must be set together")
        need(0 < self.n8n_timeout_seconds <= 300, "DURABLE_N8N_TIMEOUT_SECONDS", "must be in (0, 300]")
        need(0 <= self.n8n_sync_interval_seconds <= 86_400, "DURABLE_N8N_SYNC_INTERVAL_SECONDS", "must be 0 to 86400")
        return out


def describe() -> list[tuple[str, str, str]]:
    """(variable, default, description) for every setting, for docs and `--help`."""
    return [(f.metadata["env"], repr(f.default), f.metadata["doc"]) for f in fields(Settings)]


def _parse_bool(raw: str) -> bool:
    low = raw.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected true or false")


def _parse_int(raw: str) -> int:
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        raise ValueError("expected a whole number") from None


def _parse_float(raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError("expected a number") from None


_PARSERS: dict[type, Callable[[str], Any]] = {str: str, int: _parse_int, float: _parse_float, bool: _parse_bool}


# What a token may do (transport/auth.py ROLES): token=namespace is an admin token (every right, as before
# roles existed); token=namespace:read and token=namespace:operate give less.
TOKEN_ROLES = ("read", "operate", "admin")


def _parse_token_entries(raw: str) -> dict[str, tuple[str, str]]:
    """token → (namespace, role) from `token=namespace[:role]` entries."""
    tokens: dict[str, tuple[str, str]] = {}
    for part in raw.split(","):
        part = part.strip()
        if not part:
            continue
        token, sep, target = part.partition("=")
        token, target = token.strip(), target.strip()
        namespace, colon, role = target.rpartition(":") if ":" in target else (target, "", "admin")
        namespace, role = namespace.strip(), role.strip()
        if not sep or not token or not namespace:
            raise ValueError("each entry must be token=namespace or token=namespace:role")
        if colon and role not in TOKEN_ROLES:
            raise ValueError(f"unknown role {role!r} (roles: {', '.join(TOKEN_ROLES)})")
        if len(token) < 8:
            raise ValueError("tokens must be at least 8 characters")
        if token in tokens:
            raise ValueError("a token is listed twice")
        tokens[token] = (namespace, role)
    return tokens


def _parse_tokens(raw: str) -> dict[str, str]:
    return {token: namespace for token, (namespace, _) in _parse_token_entries(raw).items()}


def _is_host_port(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep) and bool(host) and port.isdigit() and 0 <= int(port) <= 65535
