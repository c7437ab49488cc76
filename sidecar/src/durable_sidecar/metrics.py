"""Prometheus metrics and the small HTTP server for /metrics, /livez and /readyz."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

RPC_TOTAL = Counter("durable_rpc_total", "RPCs handled, by method and status code.", ["method", "code"])
RPC_SECONDS = Histogram(
    "durable_rpc_duration_seconds",
    "RPC latency, by method.",
    ["method"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CALL_STREAMS = Gauge("durable_call_streams", "Open CallService/Call streams (each carries one client process's "
                     "unary calls; those are counted in durable_rpc_total by their own method).")
CACHE_REQUESTS = Counter("durable_cache_requests_total", "Cache lookups, by kind and result.", ["op", "result"])
CACHE_ERRORS = Counter("durable_cache_errors_total", "Cache calls that failed (Redis down or slow).", ["op"])
POOL_SIZE = Gauge("durable_db_pool_connections", "Database connections (the PostgreSQL pool; embedded: its one).",
                  ["state"])
CHECKPOINTS_SAVED = Counter("durable_checkpoints_saved_total", "Checkpoint items saved, by result.", ["result"])
STEP_SAVES = Counter("durable_step_saves_total", "Lone step-result saves, by path: one_statement (merged into the "
                     "state this sidecar remembered) or transaction (the state read back first).", ["path"])
GROUPED_SAVES = Counter("durable_grouped_saves_total", "Lone plain saves that arrived while others of their "
                        "namespace were being written and were written together with them, in one statement.")
IDEMPOTENCY_CLAIMS = Counter("durable_idempotency_claims_total", "Idempotency claims, by outcome.", ["outcome"])
KEYS_REAPED = Counter("durable_idempotency_keys_reaped_total", "Expired idempotency keys deleted.")
# Refreshed by one periodic query (app.py, DURABLE_INSTANCE_GAUGES_INTERVAL_SECONDS), never per scrape. Every
# sidecar on one database reports the same values: aggregate with max by (namespace), not sum.
INSTANCES = Gauge("durable_instances", "Instances by state: running (live lease), waiting (for a wake-up, a retry "
                  "backoff or an event), stalled (lease lapsed, nothing scheduled), suspended (retry policy used up: "
                  "an operator must retry, resume or cancel).", ["namespace", "state"])
WAKE_UPS_DUE = Gauge("durable_wake_ups_due", "Instances whose wake-up time has passed and not yet resumed.",
                     ["namespace"])
OLDEST_STALLED = Gauge("durable_oldest_stalled_instance_age_seconds",
                       "Seconds since the lease of the oldest stalled instance lapsed (0: none stalled).", ["namespace"])
SESSIONS_OPENED = Counter("durable_sessions_opened_total", "Sessions opened by n8n processes.")
SESSIONS_ENDED = Counter("durable_sessions_ended_total", "Sessions ended, by reason: closed (the process said so) "
                         "or expired (no heartbeat for the grace period).", ["reason"])
SESSIONS_ALIVE = Gauge("durable_sessions_alive", "Sessions this sidecar saw alive at its last sweep (all replicas').")
LEASES_FREED = Counter("durable_leases_freed_by_session_end_total", "Leases freed because their session ended, by "
                       "kind: instance or key; late: both, of a call recorded after its session had ended.", ["kind"])
LEASES_FREED_BY_RELEASE = Counter("durable_leases_released_total", "Leases freed because their n8n process said "
                                  "their execution failed (Heartbeat.released_owners).")
LIMIT_CALLS = Counter("durable_limit_calls_total", "Flow-control answers (issue 43), by kind (concurrency, rate, "
                      "debounce) and outcome (acquired, allowed, waiting, busy, run, debounced).", ["kind", "outcome"])
LIMIT_WAIT_SECONDS = Histogram(
    "durable_limit_wait_seconds",
    "How long items waited at a limit: a waiter until it was given a place, a parked or in-process rate-limited "
    "call until its slot, a debounced burst's item until its decision; by kind.",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 86400),
)
# Refreshed with the instance gauges. Per limit name, not per key (keys are customers: unbounded); the console and
# ListLimitKeys show each key's holders and waiters.
LIMIT_ENTRIES = Gauge("durable_limit_entries", "Instances at flow-control limits, by kind, limit name and state: "
                      "holding and waiting (concurrency; waiting is the queue depth), reserved (rate: parked for a "
                      "slot), candidate (debounce: a burst's item parked until it ends), run and debounced "
                      "(debounce decisions not yet read).", ["kind", "limit", "state"])
TABLE_MAINTENANCE = Counter("durable_table_maintenance_total", "VACUUM and ANALYZE runs the sidecar made on its "
                            "own tables while PostgreSQL's autovacuum is off, by statement and table.",
                            ["statement", "table"])
SESSION_REFUSALS = Counter("durable_session_refusals_total", "Calls refused because they carried an ended session.")
INSTANCE_GAUGES_UPDATED = Gauge("durable_instance_gauges_updated_timestamp_seconds",
                                "When the instance gauges were last refreshed (Unix time).")
_INSTANCE_STATES = ("running", "waiting", "stalled", "suspended")
_gauge_namespaces: set[str] = set()


class InstanceCounts(Protocol):
    @property
    def running(self) -> int: ...
    @property
    def waiting(self) -> int: ...
    @property
    def stalled(self) -> int: ...
    @property
    def due_wake_ups(self) -> int: ...
    @property
    def oldest_stalled_seconds(self) -> float: ...
    @property
    def suspended(self) -> int: ...


def set_instance_gauges(by_namespace: Mapping[str, InstanceCounts]) -> None:
    """Sets the instance gauges; a namespace with no running instance left drops out."""
    for namespace in _gauge_namespaces - set(by_namespace):
        for state in _INSTANCE_STATES:
            INSTANCES.remove(namespace, state)
        WAKE_UPS_DUE.remove(namespace)
        OLDEST_STALLED.remove(namespace)
    for namespace, g in by_namespace.items():
        INSTANCES.labels(namespace, "running").set(g.running)
        INSTANCES.labels(namespace, "waiting").set(g.waiting)
        INSTANCES.labels(namespace, "stalled").set(g.stalled)
        INSTANCES.labels(namespace, "suspended").set(g.suspended)
        WAKE_UPS_DUE.labels(namespace).set(g.due_wake_ups)
        OLDEST_STALLED.labels(namespace).set(g.oldest_stalled_seconds)
    _gauge_namespaces.clear()
    _gauge_namespaces.update(by_namespace)
    INSTANCE_GAUGES_UPDATED.set_to_current_time()


_limit_labels: set[tuple[str, str, str]] = set()


def set_limit_gauges(rows: list[tuple[str, str, str, int]]) -> None:
    """Sets durable_limit_entries from (kind, limit name, state, count) rows; labels no longer present drop out."""
    now = {(kind, name, state) for kind, name, state, _ in rows}
    for labels in _limit_labels - now:
        LIMIT_ENTRIES.remove(*labels)
    for kind, name, state, n in rows:
        LIMIT_ENTRIES.labels(kind, name, state).set(n)
    _limit_labels.clear()
    _limit_labels.update(now)


class _Handler(BaseHTTPRequestHandler):
    ready: Callable[[], bool] = staticmethod(lambda: True)
    refresh: Callable[[], None] = staticmethod(lambda: None)

    def do_GET(self) -> None:
        if self.path == "/metrics":
            type(self).refresh()
            body, ctype, status = generate_latest(), CONTENT_TYPE_LATEST, 200
        elif self.path == "/livez":
            body, ctype, status = b"ok\n", "text/plain", 200
        elif self.path == "/readyz":
            ok = type(self).ready()
            body, ctype, status = (b"ready\n" if ok else b"not ready\n"), "text/plain", 200 if ok else 503
        else:
            body, ctype, status = b"not found\n", "text/plain", 404
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server API
        pass


class MetricsServer:
    """HTTP server in a daemon thread; `ready` and `refresh` are called from that thread."""

    def __init__(self, address: str, *, ready: Callable[[], bool], refresh: Callable[[], None]) -> None:
        host, _, port = address.rpartition(":")
        handler = type("Handler", (_Handler,), {"ready": staticmethod(ready), "refresh": staticmethod(refresh)})
        self._server = ThreadingHTTPServer((host.strip("[]"), int(port)), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("metrics server listening", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
