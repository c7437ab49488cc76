"""Prometheus metrics and the small HTTP server for /metrics, /livez and /readyz."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger(__name__)

RPC_TOTAL = Counter("durable_rpc_total", "RPCs handled, by method and status code.", ["method", "code"])
RPC_SECONDS = Histogram(
    "durable_rpc_duration_seconds",
    "RPC latency, by method.",
    ["method"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CACHE_REQUESTS = Counter("durable_cache_requests_total", "Cache lookups, by kind and result.", ["op", "result"])
CACHE_ERRORS = Counter("durable_cache_errors_total", "Cache calls that failed (Redis down or slow).", ["op"])
POOL_SIZE = Gauge("durable_db_pool_connections", "Database connections (the PostgreSQL pool; embedded: its one).",
                  ["state"])
CHECKPOINTS_SAVED = Counter("durable_checkpoints_saved_total", "Checkpoint items saved, by result.", ["result"])
IDEMPOTENCY_CLAIMS = Counter("durable_idempotency_claims_total", "Idempotency claims, by outcome.", ["outcome"])
KEYS_REAPED = Counter("durable_idempotency_keys_reaped_total", "Expired idempotency keys deleted.")


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
