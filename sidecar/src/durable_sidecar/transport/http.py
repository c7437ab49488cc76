"""The durable.v1 contract over HTTP: the Connect protocol's unary calls, on an opt-in address.

Every unary method of the proto's services is served as
`POST /durable.v1.<Service>/<Method>`, its body the request message either as
JSON (`Content-Type: application/json`: protobuf's canonical JSON mapping, bytes
as base64, 64-bit integers as strings, field names in lowerCamelCase; both
spellings are accepted) or as binary protobuf (`application/proto`); the answer
comes in the request's encoding. A method the proto marks free of side effects
(`idempotency_level = NO_SIDE_EFFECTS`: the reads) is served by GET as well,
Connect's form: `?encoding=json|proto&message=<the request>` (`&base64=1` when the
message is base64url-encoded). `Connect-Timeout-Ms` bounds the call. The request
goes to the very handler gRPC calls (auth, the input boundary, metrics, spans,
error mapping: transport/rpc.py), with the HTTP headers as its metadata. An error
is the Connect error body `{"code": "...", "message": "..."}` with the HTTP status
of `_HTTP_STATUS`, the one table of this boundary. Streaming methods
(WatchResumable, WatchSession, the call stream) stay gRPC-only: asked for here,
they answer 404 `unimplemented`, which Connect clients report as unimplemented.
FileService's two streams are plain HTTP instead, the file's bytes as the body:
`PUT /files/<sha256>` (UploadFile) and `GET /files/<sha256>` (DownloadFile),
through the same servicer methods as gRPC.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
from aiohttp import web
from durable.v1 import files_pb2
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from ..domain_files import CHUNK_BYTES
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


def _metadata_of(request: web.Request) -> list[tuple[str, str]]:
    """The HTTP headers a handler sees as its call metadata."""
    return [(h, request.headers[h]) for h in _METADATA_HEADERS if h in request.headers]


def _error(code: grpc.StatusCode, details: str, *, status: int = 0) -> web.Response:
    name, mapped = _HTTP_STATUS.get(code, ("unknown", 500))
    return web.json_response({"code": name, "message": details}, status=status or mapped)


# Connect's unary encodings: the Content-Type of a POST (the `encoding` of a GET) and how each reads and writes.
_ENCODINGS = {"application/json": "json", "application/proto": "proto"}
_TIMEOUT = re.compile(r"[0-9]{1,10}")
# A MIME type a download may be labelled with (anything else goes as application/octet-stream).
_MIME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}")


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
                 ssl_context: ssl.SSLContext | None, console: Console | None = None,
                 streaming: set[str] | None = None, files: Any = None) -> None:
        self.address = address
        self._routes = table
        self._streaming = streaming or set()
        self._ssl = ssl_context
        self._console = console
        self._app = web.Application(client_max_size=max_body_bytes)
        if console is not None:
            self._app.router.add_get("/console", self._console_redirect)
            self._app.router.add_get("/console/config.json", self._console_config)
            self._app.router.add_get("/console/{name:[A-Za-z0-9_.-]*}", self._console_file)
        # FileService's streams as plain HTTP: a file's bytes are the body (files: its gRPC servicer).
        self._files = files
        if files is not None:
            self._app.router.add_get("/files/{sha256}", self._download)
            self._app.router.add_put("/files/{sha256}", self._upload)
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

    async def _download(self, request: web.Request) -> web.StreamResponse:
        """GET /files/<sha256>: FileService.DownloadFile's bytes as the body, always as an attachment (a file is
        the senders' content: never shown inline on the console's origin); ?name= and ?type= name it."""
        metadata = _metadata_of(request)
        parts = self._files.DownloadFile(files_pb2.DownloadFileRequest(sha256=request.match_info["sha256"]),
                                         Context(metadata))
        try:
            first = await anext(parts)
        except Aborted as aborted:
            return _error(aborted.code, aborted.details)
        kind = request.query.get("type", "")
        name = request.query.get("name", "") or request.match_info["sha256"]
        response = web.StreamResponse(headers={
            "Content-Type": kind if _MIME.fullmatch(kind) else "application/octet-stream",
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name[:255], safe='')}",
            "Content-Length": str(first.size_bytes),
            "Content-Security-Policy": "sandbox; default-src 'none'",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=31536000, immutable",  # a content never changes under its hash
        })
        await response.prepare(request)
        await response.write(first.chunk)
        async for part in parts:  # an error now cuts the body short of its Content-Length: the client sees it
            await response.write(part.chunk)
        await response.write_eof()
        return response

    async def _upload(self, request: web.Request) -> web.StreamResponse:
        """PUT /files/<sha256> with the content as the body (Content-Length required): FileService.UploadFile.
        201 when stored, 200 when the namespace held it already."""
        size = request.content_length
        if size is None:
            return _error(grpc.StatusCode.INVALID_ARGUMENT, "Content-Length is required: the upload's size is "
                          "checked against the limits before anything is stored", status=411)
        sha256 = request.match_info["sha256"]

        async def messages() -> AsyncIterator[files_pb2.UploadFileRequest]:
            yield files_pb2.UploadFileRequest(header=files_pb2.UploadFileHeader(sha256=sha256, size_bytes=size))
            async for chunk in request.content.iter_chunked(CHUNK_BYTES):
                yield files_pb2.UploadFileRequest(chunk=chunk)

        metadata = _metadata_of(request)
        try:
            reply = await self._files.UploadFile(messages(), Context(metadata))
        except Aborted as aborted:
            # Over a limit: 413, which no client retries as it might a 429 (the Connect mapping's).
            too_large = aborted.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            return _error(aborted.code, aborted.details, status=413 if too_large else 0)
        return web.json_response(json_format.MessageToDict(reply, always_print_fields_with_no_presence=True),
                                 status=201 if reply.stored else 200)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self._routes.get(request.path)
        if route is None:
            # 404: what a Connect client reports as unimplemented (a 501 it would report as unknown).
            if request.path in self._streaming:
                return _error(grpc.StatusCode.UNIMPLEMENTED, f"{request.path} is a streaming method, served on gRPC "
                              "only; the HTTP face serves the unary methods", status=404)
            return _error(grpc.StatusCode.UNIMPLEMENTED, f"no method {request.path}: the HTTP face serves "
                          "/durable.v1.<Service>/<Method> for the contract's unary methods", status=404)
        allowed = "POST, GET" if route.read_only else "POST"
        if request.method == "GET" and route.read_only:
            encoding = request.query.get("encoding", "")
            if encoding not in ("json", "proto"):
                return web.json_response({"code": "unknown", "message": "encoding must be json or proto"},
                                         status=415)
            raw = request.query.get("message", "")
            try:
                body = (base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)) if request.query.get("base64") == "1"
                        else raw.encode())
            except ValueError as exc:
                return _error(grpc.StatusCode.INVALID_ARGUMENT, f"message is not base64url: {exc}")
        elif request.method == "POST":
            encoding = _ENCODINGS.get(request.content_type, "")
            if not encoding:
                return web.json_response(
                    {"code": "unknown", "message": "Content-Type must be application/json or application/proto"},
                    status=415, headers={"Accept-Post": "application/json, application/proto"})
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                return _error(grpc.StatusCode.RESOURCE_EXHAUSTED, "request body larger than DURABLE_MAX_MESSAGE_BYTES")
        else:
            hint = " (GET for this read)" if route.read_only else " (this method changes state: GET is for reads)"
            return web.json_response({"code": "unimplemented", "message": f"use {allowed}{hint}"}, status=405,
                                     headers={"Allow": allowed})
        timeout = request.headers.get("connect-timeout-ms")
        if timeout is not None and not _TIMEOUT.fullmatch(timeout):
            return _error(grpc.StatusCode.INVALID_ARGUMENT, "Connect-Timeout-Ms must be 1 to 10 digits of milliseconds")
        decoded: Any
        try:
            if encoding == "json":
                decoded = json_format.Parse(body or b"{}", route.request_type(), ignore_unknown_fields=False)
            else:
                decoded = route.request_type.FromString(body)
        except (json_format.ParseError, DecodeError, UnicodeDecodeError, ValueError) as exc:
            # Refused by the handler after authentication, like an undecodable gRPC request.
            decoded = Undecodable(route.method, str(exc))
        metadata = _metadata_of(request)
        try:
            if timeout is None:
                response = await route.handler(decoded, Context(metadata))
            else:
                async with asyncio.timeout(int(timeout) / 1000):
                    response = await route.handler(decoded, Context(metadata))
        except Aborted as aborted:
            return _error(aborted.code, aborted.details)
        except TimeoutError:
            return _error(grpc.StatusCode.DEADLINE_EXCEEDED, f"the call took longer than its Connect-Timeout-Ms "
                          f"({timeout} ms)")
        if encoding == "proto":
            return web.Response(body=response.SerializeToString(), content_type="application/proto")
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

