"""The one input boundary: every field of every request is checked before any service runs.

The rules follow the field's type and name in the proto descriptor, so a field
added to the contract is checked without touching this file:

- ``*_json`` bytes: strict UTF-8 JSON (validation.json_bytes: no object tree), at most
  DURABLE_MAX_STATE_BYTES (RESOURCE_EXHAUSTED above it);
- other bytes: at most DURABLE_MAX_STATE_BYTES;
- strings: identifiers (at most 255 characters, no C0/DEL/C1 control
  characters, no lone surrogates); free text (``error_message``, ``reason``,
  ``note``): at most 4,096 characters, tabs and line breaks allowed, no other
  control characters; ``version_label``/``label``: a semantic version;
  ``page_token``: a token this server signed (see PageTokens);
- integers: 0 to 2^53 - 1 (what JavaScript and every store hold exactly;
  no field of the contract means anything negative), and the durations
  below in range;
- doubles (retry policy factors): finite, 0 or more;
- Timestamps: inside the Timestamp range (years 1 to 9999), nanos 0 to 999,999,999;
- enums: a value the contract defines;
- repeated fields: at most DURABLE_MAX_BATCH_ITEMS entries.

Requiredness and the ranges one RPC gives a field (lease lengths, page sizes)
stay with the services; this module guarantees that nothing a service,
store or database driver receives can make it fail in a way that is not a
DomainError, before anything is written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from .. import validation
from ..definitions import semver_label
from ..errors import InvalidArgument, TooLarge
from ..services.instances import POLL_INTERVAL_MS

MAX_SAFE_INTEGER = 2**53 - 1
# Age and delay fields: a century is past any retention or wake-up anyone means.
MAX_DURATION_SECONDS = 100 * 366 * 86_400
_DURATION_FIELDS = frozenset({"older_than_seconds", "delay_seconds", "ttl_seconds", "timeout_seconds"})
_FREE_TEXT = frozenset({"error_message", "reason", "note", "last_error"})
_SEMVER = frozenset({"version_label", "label"})
MAX_PAGE_TOKEN_LENGTH = 2048
# google.protobuf.Timestamp: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z.
_TS_MIN_SECONDS, _TS_MAX_SECONDS = -62_135_596_800, 253_402_300_799
_INTEGER_TYPES = frozenset({FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT32,
                            FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64,
                            FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_FIXED64,
                            FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_SFIXED64})


@dataclass(frozen=True)
class Undecodable:
    """Stands for a request that is not a valid message (corrupt wire format, a string that is not UTF-8)."""

    method: str
    error: str


class DecodeGuard(grpc.aio.ServerInterceptor):
    """Requests gRPC cannot decode reach the handler as Undecodable, which the boundary refuses.

    Without it, the library answers such a request UNKNOWN before any of our
    code runs; with it, the answer is INVALID_ARGUMENT, after authentication,
    like every other malformed request. Only durable.v1 methods are wrapped.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        method: str = details.method
        if method in self._handlers:
            return self._handlers[method]
        handler = await continuation(details)
        if handler is None or not method.startswith("/durable.v1.") or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer

        def safe(data: bytes) -> Any:
            try:
                return decode(data)
            except DecodeError as exc:
                return Undecodable(method, str(exc))

        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(handler.unary_unary, request_deserializer=safe,
                                                          response_serializer=handler.response_serializer)
        elif handler.unary_stream is not None:
            wrapped = grpc.unary_stream_rpc_method_handler(handler.unary_stream, request_deserializer=safe,
                                                           response_serializer=handler.response_serializer)
        elif handler.stream_unary is not None:
            wrapped = grpc.stream_unary_rpc_method_handler(handler.stream_unary, request_deserializer=safe,
                                                           response_serializer=handler.response_serializer)
        elif handler.stream_stream is not None:
            wrapped = grpc.stream_stream_rpc_method_handler(handler.stream_stream, request_deserializer=safe,
                                                            response_serializer=handler.response_serializer)
        else:
            return handler
        self._handlers[method] = wrapped
        return wrapped


def refuse_undecodable(request: object) -> None:
    if isinstance(request, Undecodable):
        raise InvalidArgument(f"the request is not a valid message for {request.method.rsplit('/', 1)[-1]}: "
                              f"{request.error}")


class PageTokens:
    """Page tokens are opaque: the store's cursor, signed with HMAC-SHA256 for one RPC and namespace.

    A token the server did not make (or made for another list or namespace)
    is INVALID_ARGUMENT before any store decodes it. Every replica derives the
    same key (DURABLE_PAGE_TOKEN_SECRET, else the database's installation id),
    so a token from one replica pages on another.
    """

    _PREFIX = "p1."

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def derived(cls, secret: str, installation_id: str) -> PageTokens:
        material = secret.encode() if secret else b"durable page tokens\0" + installation_id.encode()
        return cls(hashlib.sha256(material).digest())

    def _mac(self, method: str, namespace: str, cursor: bytes) -> bytes:
        msg = method.encode() + b"\0" + namespace.encode() + b"\0" + cursor
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:16]

    def sign(self, method: str, namespace: str, cursor: str) -> str:
        if not cursor:
            return ""
        raw = cursor.encode()
        return (self._PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=") + "."
                + base64.urlsafe_b64encode(self._mac(method, namespace, raw)).decode().rstrip("="))

    def verify(self, method: str, namespace: str, token: str) -> str:
        """The cursor inside a token this server signed; InvalidArgument for anything else."""
        if not token:
            return ""
        refused = InvalidArgument("page_token is not a token this server issued for this list: "
                                  "pass next_page_token exactly as returned, or leave it empty for the first page")
        if len(token) > MAX_PAGE_TOKEN_LENGTH or not token.isascii() or not token.startswith(self._PREFIX):
            raise refused
        body, _, mac = token[len(self._PREFIX):].partition(".")
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        except ValueError:
            raise refused from None
        if not hmac.compare_digest(given, self._mac(method, namespace, raw)):
            raise refused
        return raw.decode()


@dataclass
class StreamLimits:
    """Open WatchResumable streams per namespace (in this process) and the floor on their poll interval."""

    per_namespace: int
    min_poll_interval_ms: int
    open: dict[str, int] = field(default_factory=dict)

    @contextmanager
    def stream(self, namespace: str) -> Iterator[None]:
        if self.open.get(namespace, 0) >= self.per_namespace:
            raise TooLarge(f"namespace already has {self.per_namespace} open WatchResumable streams on this sidecar "
                           "(DURABLE_WATCH_STREAMS_PER_NAMESPACE): close one, or share one Resume Trigger per workflow")
        self.open[namespace] = self.open.get(namespace, 0) + 1
        try:
            yield
        finally:
            left = self.open[namespace] - 1
            if left:
                self.open[namespace] = left
            else:
                del self.open[namespace]


class Boundary:
    """Checks requests (check), unwraps their page tokens and signs the ones in responses."""

    def __init__(self, *, max_json_bytes: int, max_repeated: int, tokens: PageTokens, streams: StreamLimits) -> None:
        self.max_json_bytes = max_json_bytes
        self.max_repeated = max_repeated
        self.tokens = tokens
        self.streams = streams

    def admit(self, method: str, namespace: str, request: Any) -> None:
        """Checks every field; replaces a page token by the cursor it carries; clamps poll intervals."""
        self.check(request)
        desc = request.DESCRIPTOR
        if "page_token" in desc.fields_by_name:
            token = request.page_token
            request.page_token = self.tokens.verify(method, namespace, token)
        if "poll_interval_ms" in desc.fields_by_name:
            interval = request.poll_interval_ms
            # Only an interval the contract accepts is raised to the floor; one outside it is refused.
            if POLL_INTERVAL_MS[0] <= interval < self.streams.min_poll_interval_ms:
                request.poll_interval_ms = self.streams.min_poll_interval_ms

    def seal(self, method: str, namespace: str, response: Any) -> None:
        if "next_page_token" in response.DESCRIPTOR.fields_by_name:
            cursor = response.next_page_token
            response.next_page_token = self.tokens.sign(method, namespace, cursor)

    def json_bytes(self, request: Message) -> int:
        """Total bytes of JSON fields (the caller moves big checks off the event loop)."""
        total = 0
        for rule in _plan(request.DESCRIPTOR):
            value = getattr(request, rule.name)
            if rule.kind == _JSON:
                total += sum(len(v) for v in value) if rule.repeated else len(value)
            elif rule.kind == _MESSAGE and rule.sub is not None:
                for item in value if rule.repeated else ([value] if request.HasField(rule.name) else []):
                    total += self.json_bytes(item)
        return total

    def check(self, request: Message, prefix: str = "") -> None:
        """Every field of the message and of its nested messages; the field's path names it in an error."""
        for rule in _plan(request.DESCRIPTOR):
            value = getattr(request, rule.name)
            if rule.repeated:
                if len(value) > self.max_repeated:
                    raise InvalidArgument(f"{prefix}{rule.name} has {len(value)} entries; the limit is "
                                          f"{self.max_repeated} (DURABLE_MAX_BATCH_ITEMS)")
                if rule.kind == _MESSAGE and rule.sub is not None and len(value) > 1 and self._plainly_fine(value):
                    continue
                for i, item in enumerate(value):
                    self._check_one(rule, item, request, prefix, i)
            else:
                self._check_one(rule, value, request, prefix, None)

    def _plainly_fine(self, items: Any) -> bool:
        """Many messages of one type (a batch's items), checked a field at a time across all of them.

        True: every field of every item passes the checks of _check_one. False (or an error raised here): the
        caller checks item by item, which decides and names the first problem in the items' order.
        """
        try:
            for rule in _plan(items[0].DESCRIPTOR):
                kind = rule.kind
                if kind == _OTHER and not rule.repeated:
                    continue  # bool: every value is in range
                name = rule.name
                values = [getattr(item, name) for item in items]
                if rule.repeated or kind in (_MESSAGE, _TIMESTAMP, _FLOAT, _PAGE_TOKEN) or rule.semver:
                    for item, value in zip(items, values, strict=True):
                        if rule.repeated:
                            if len(value) > self.max_repeated:
                                return False
                            for i, one in enumerate(value):
                                self._check_one(rule, one, item, "", i)
                        else:
                            self._check_one(rule, value, item, "", None)
                elif kind == _IDENTIFIER or kind == _TEXT:
                    # One search over the values joined by a space (a character both rules allow).
                    joined = " ".join(values)
                    if (max(map(len, values)) > (validation.MAX_ID_LENGTH if kind == _IDENTIFIER
                                                 else validation.MAX_MESSAGE_LENGTH)
                            or (_BAD_ID if kind == _IDENTIFIER else _BAD_TEXT).search(joined) or not joined.isascii()):
                        return False
                elif kind == _JSON or kind == _BYTES:
                    if max(map(len, values)) > self.max_json_bytes:
                        return False
                    if kind == _JSON:
                        for value in values:
                            if value:
                                validation.json_bytes(name, value)
                elif kind == _INTEGER:
                    if min(values) < 0 or max(values) > rule.high:
                        return False
                elif kind == _ENUM:
                    if not rule.known.issuperset(values):
                        return False
        except (InvalidArgument, TooLarge):
            return False
        return True

    def _check_one(self, field: _Field, value: Any, parent: Message, prefix: str, index: int | None) -> None:
        kind = field.kind
        # The fast paths accept what is plainly fine; anything else goes to the full check, which names the field.
        if kind == _IDENTIFIER:
            if value and (len(value) > validation.MAX_ID_LENGTH or _BAD_ID.search(value) or not value.isascii()):
                where = _where(prefix, field.name, index)
                validation.identifier(where, value, required=False)
            if field.semver and value:
                semver_label(_where(prefix, field.name, index), value)
        elif kind == _TEXT:
            if value and (len(value) > validation.MAX_MESSAGE_LENGTH or _BAD_TEXT.search(value) or not value.isascii()):
                validation.text(_where(prefix, field.name, index), value)
        elif kind == _PAGE_TOKEN:
            if len(value) > MAX_PAGE_TOKEN_LENGTH:
                raise InvalidArgument(f"{_where(prefix, field.name, index)} is not a token this server issued")
        elif kind in (_JSON, _BYTES):
            if len(value) > self.max_json_bytes:
                raise TooLarge(f"{_where(prefix, field.name, index)} is {len(value)} bytes; the limit is "
                               f"{self.max_json_bytes} bytes (DURABLE_MAX_STATE_BYTES)")
            if kind == _JSON and value:
                validation.json_bytes(_where(prefix, field.name, index), value)
        elif kind == _INTEGER:
            if not 0 <= value <= field.high:
                raise InvalidArgument(f"{_where(prefix, field.name, index)} must be 0 to {field.high}, got {value}")
        elif kind == _FLOAT:
            if not (math.isfinite(value) and 0 <= value <= MAX_SAFE_INTEGER):
                raise InvalidArgument(f"{_where(prefix, field.name, index)} must be a finite number, 0 or more, "
                                      f"got {value}")
        elif kind == _ENUM:
            if value not in field.known:
                raise InvalidArgument(f"{_where(prefix, field.name, index)} is {value}, not a value of {field.type_name}")
        elif kind == _TIMESTAMP:
            if (index is not None or parent.HasField(field.name)) and not (
                    _TS_MIN_SECONDS <= value.seconds <= _TS_MAX_SECONDS and 0 <= value.nanos <= 999_999_999):
                raise InvalidArgument(f"{_where(prefix, field.name, index)} is outside the Timestamp range "
                                      "(years 1 to 9999)")
        elif kind == _MESSAGE and field.sub is not None and (index is not None or parent.HasField(field.name)):
            self.check(value, _where(prefix, field.name, index) + ".")


def _where(prefix: str, name: str, index: int | None) -> str:
    return f"{prefix}{name}" if index is None else f"{prefix}{name}[{index}]"


# The rule each field gets, by type and name; computed once per message type.
_IDENTIFIER, _TEXT, _PAGE_TOKEN, _JSON, _BYTES, _INTEGER, _ENUM, _TIMESTAMP, _MESSAGE, _OTHER, _FLOAT = range(11)
_BAD_ID = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_BAD_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class _Field:
    name: str
    kind: int
    repeated: bool
    high: int = MAX_SAFE_INTEGER
    known: frozenset[int] = frozenset()
    type_name: str = ""
    semver: bool = False
    sub: Any = None


_PLANS: dict[str, tuple[_Field, ...]] = {}


def _plan(desc: Any) -> tuple[_Field, ...]:
    found = _PLANS.get(desc.full_name)
    if found is None:
        found = _PLANS[desc.full_name] = tuple(_rule(fd) for fd in desc.fields)
    return found


def _rule(fd: Any) -> _Field:
    name, repeated = fd.name, bool(fd.is_repeated)
    if fd.type == FieldDescriptor.TYPE_STRING:
        kind = _PAGE_TOKEN if name == "page_token" else _TEXT if name in _FREE_TEXT else _IDENTIFIER
        return _Field(name, kind, repeated, semver=name in _SEMVER)
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return _Field(name, _JSON if name.endswith("_json") else _BYTES, repeated)
    if fd.type == FieldDescriptor.TYPE_ENUM:
        return _Field(name, _ENUM, repeated, known=frozenset(v.number for v in fd.enum_type.values),
                      type_name=fd.enum_type.name)
    if fd.type in _INTEGER_TYPES:
        return _Field(name, _INTEGER, repeated, high=MAX_DURATION_SECONDS if name in _DURATION_FIELDS else MAX_SAFE_INTEGER)
    if fd.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return _Field(name, _FLOAT, repeated)
    if fd.type == FieldDescriptor.TYPE_MESSAGE:
        if fd.message_type.full_name == "google.protobuf.Timestamp":
            return _Field(name, _TIMESTAMP, repeated)
        if fd.message_type.full_name.startswith("google.protobuf."):
            return _Field(name, _OTHER, repeated)
        return _Field(name, _MESSAGE, repeated, sub=fd.message_type)
    return _Field(name, _OTHER, repeated)  # bool: every value is in range
