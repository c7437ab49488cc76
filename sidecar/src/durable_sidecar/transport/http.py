"""The durable.v1 contract over HTTP/JSON: the Connect protocol's unary JSON form, on an opt-in address.

Every unary method of the proto's services is served as
`POST /durable.v1.<Service>/<Method>` with `Content-Type: application/json`,
its body the request message in protobuf's canonical JSON mapping (bytes as
base64, 64-bit integers as strings, field names in lowerCamelCase; both spellings
are accepted). The request goes to the very handler gRPC calls (auth, the input
boundary, metrics, spans, error mapping: transport/rpc.py), with the HTTP headers
as its metadata. An error is the Connect error body `{"code": "...", "message":
"..."}` with the HTTP status of `_HTTP_STATUS`, the one table of this boundary.
Server streaming (WatchResumable) stays gRPC-only.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from google.protobuf import json_format

from .boundary import Undecodable
from .dispatch import Aborted, Context, Route

log = logging.getLogger(__name__)

# gRPC status -> (Connect code, HTTP status), as the Connect protocol specifies them.
_HTTP_STATUS: dict[grpc.StatusCode, tuple[str, int]] = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}

# Headers passed to the handlers as call metadata (the rest of HTTP is not part of the contract).
_METADATA_HEADERS = ("authorization", "x-request-id", "traceparent", "tracestate", "durable-session")


def _error(code: grpc.StatusCode, details: str) -> web.Response:
    name, status = _HTTP_STATUS.get(code, ("unknown", 500))
    return web.json_response({"code": name, "message": details}, status=status)


@dataclass(frozen=True)
class Console:
    """The web console's static files (package data) and what its config.json tells the browser."""

    n8n_url: str = ""
    root: Path = Path(__file__).resolve().parent.parent / "console"


# The console's pages load only their own files and talk only to this origin.
_CONSOLE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
                               "form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_CONSOLE_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}


class HttpJsonServer:
    """An aiohttp server for the routes (and the console, when given); `port` is the bound port once started."""

    def __init__(self, address: str, table: dict[str, Route], *, max_body_bytes: int,
                 ssl_context: ssl.SSLContext | None, console: Console | None = None) -> None:
        self.address = address
        self._routes = table
        self._ssl = ssl_context
        self._console = console
        self._app = web.Application(client_max_size=max_body_bytes)
        if console is not None:
            self._app.router.add_get("/console", self._console_redirect)
            self._app.router.add_get("/console/config.json", self._console_config)
            self._app.router.add_get("/console/{name:[A-Za-z0-9_.-]*}", self._console_file)
        self._app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(self._app, access_log=None, handle_signals=False)
        self.port = 0

    async def start(self) -> None:
        host, _, port = self.address.rpartition(":")
        await self._runner.setup()
        site = web.TCPSite(self._runner, host.strip("[]"), int(port), ssl_context=self._ssl, reuse_port=False)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        log.info("HTTP/JSON server listening", extra={"port": self.port, "tls": self._ssl is not None})

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _console_redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPPermanentRedirect("/console/")

    async def _console_config(self, request: web.Request) -> web.StreamResponse:
        assert self._console is not None
        return web.json_response({"n8nUrl": self._console.n8n_url}, headers=_CONSOLE_HEADERS)

    async def _console_file(self, request: web.Request) -> web.StreamResponse:
        """A file of the console folder; no token needed (the files hold no data: every call they make needs one)."""
        assert self._console is not None
        name = request.match_info["name"] or "index.html"
        path = self._console.root / name
        kind = _CONSOLE_TYPES.get(path.suffix)
        if kind is None or name.startswith(".") or not path.is_file():
            raise web.HTTPNotFound(text="no such console file")
        return web.Response(body=path.read_bytes(), content_type=kind, charset="utf-8" if kind != "image/svg+xml"
                            else None, headers=_CONSOLE_HEADERS)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self._routes.get(request.path)
        if route is None:
            return _error(grpc.StatusCode.UNIMPLEMENTED, f"no unary method {request.path} (WatchResumable is gRPC only)")
        if request.method != "POST":
            return web.json_response({"code": "unimplemented", "message": "use POST"}, status=405,
                                     headers={"Allow": "POST"})
        if request.content_type != "application/json":
            return web.json_response({"code": "unknown", "message": "Content-Type must be application/json"},
                                     status=415, headers={"Accept-Post": "application/json"})
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _error(grpc.StatusCode.RESOURCE_EXHAUSTED, "request body larger than DURABLE_MAX_MESSAGE_BYTES")
        decoded: Any
        try:
            decoded = json_format.Parse(body or b"{}", route.request_type(), ignore_unknown_fields=False)
        except (json_format.ParseError, UnicodeDecodeError, ValueError) as exc:
            # Refused by the handler after authentication, like an undecodable gRPC request.
            decoded = Undecodable(route.method, str(exc))
        metadata = [(h, request.headers[h]) for h in _METADATA_HEADERS if h in request.headers]
        try:
            response = await route.handler(decoded, Context(metadata))
        except Aborted as aborted:
            return _error(aborted.code, aborted.details)
        text = json_format.MessageToJson(response, indent=None)
        return web.Response(body=text.encode(), content_type="application/json")


def ssl_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """The same certificate (and client CA, for mutual TLS) as the gRPC server."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx

