"""A local fake of the external services an order touches: payment, inventory, shipping, coupons.

It behaves like a well-behaved API (Stripe's Idempotency-Key contract): a
repeated key replays the first response and performs nothing. It counts every
call and every *effect* per order and per service, so a test can prove that
each side effect happened exactly once, and it can be told to stall a service
(hold requests open) so a crash can land while a call is in flight. Its
answers come in one of two shapes (`set_shape`): "echo" repeats the order id
and the service, "bare" is only `{ "id": ..., "status": ... }`, as many real
APIs answer, so a workflow that reads the order from the response breaks.

For `make chaos` each call's record also says how it was answered and whether it performed; a seeded
schedule per service and order fails its first calls or slows them; a call whose key is still being
performed can be answered 409 as Stripe does; and a planted defect makes the services ignore
Idempotency-Key. `GET /documents/<order>` serves the order's document (`document`: the same bytes, file name and
type for the same order, every time), and a call may carry files as a multipart form (its text fields are the
body, its files are recorded by field, file name, MIME type, SHA-256 and size).

For `make run` it is the demo order services, with two more abilities:

- **slow mode**: `POST /slow?payment=10` makes every payment call take 10 s
  (any service, several at once; 0 turns it off; `GET /slow` shows them), so
  a user can kill n8n while a call is in flight;
- **a ledger that survives restarts**: given a file, the effects and the
  stored answers are written there after every effect and read back at start,
  so `GET /stats` still counts one charge after `make run` itself restarts.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import os
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

SERVICES = ("payment", "inventory", "shipping", "coupon", "notify")
# The rate-limited CRM (POST /crm, body { orderId, customerId }): per customer at most CRM_RATE requests in any
# CRM_WINDOW_S (sliding, every request counted) and CRM_CONCURRENT in flight, else 429 and nothing performed;
# each call takes CRM_SERVICE_S. GET /crm lists every request (customer, order, at, end, status).
CRM_RATE, CRM_WINDOW_S, CRM_CONCURRENT, CRM_SERVICE_S = 5, 1.0, 2, 0.05
DOCUMENT_MIME = "application/pdf"


def document(order: str) -> tuple[str, bytes]:
    """The order's document, served as DOCUMENT_MIME by GET /documents/<order>: its file name and its bytes (a
    PDF-looking 20 to 60 KB derived from the order, so every download of an order gets the same ones)."""
    seed = hashlib.sha256(order.encode()).digest()
    size = 20_000 + int.from_bytes(seed[:4], "big") % 40_000
    return f"order-{order}.pdf", b"%PDF-1.7\n" + hashlib.shake_256(seed).digest(size) + b"\n%%EOF\n"


def multipart(content_type: str, raw: bytes) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """A multipart/form-data body: its text fields, and its files (field, file_name, mime, sha256, size)."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    fields: dict[str, str] = {}
    files: list[dict[str, Any]] = []
    for part in message.iter_parts():
        name = str(part.get_param("name", header="content-disposition") or "")
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            continue
        if part.get_filename() is None:
            fields[name] = data.decode()
            continue
        files.append({"field": name, "file_name": part.get_filename(), "mime": part.get_content_type(),
                      "sha256": hashlib.sha256(data).hexdigest(), "size": len(data)})
    return fields, files


@dataclass
class Ledger:
    """What the services saw; guarded by one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: list[dict[str, Any]] = field(default_factory=list)
    effects: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    responses: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    stalled: set[str] = field(default_factory=set)
    release: threading.Event = field(default_factory=threading.Event)
    routes: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))
    # GET /documents/<order>: how often each order's document was downloaded.
    downloads: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # The `logic` a caller sent with each effect (workflow versions mark their calls with it).
    logic: dict[str, dict[str, list[str]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    shape: str = "echo"
    # (service, order) pairs that answer 500 and perform nothing (a poison order), until healed.
    failing: set[tuple[str, str]] = field(default_factory=set)
    # Slow mode: seconds each call of a service takes before it is performed.
    delays: dict[str, float] = field(default_factory=dict)
    # Where effects and stored answers are kept across restarts (None: in memory only).
    journal: Path | None = None
    # A schedule per (service, order): how many calls answer 500 (performing nothing) before the
    # service works again, and seconds each of the order's calls takes (make chaos's providers).
    failures_left: dict[tuple[str, str], int] = field(default_factory=dict)
    order_delays: dict[tuple[str, str], float] = field(default_factory=dict)
    # A planted defect for make chaos: the service ignores Idempotency-Key, so every call performs.
    ignore_keys: bool = False
    # Stripe's rule for a key whose first request is still being performed: answer 409 and perform nothing
    # (make chaos turns it on; the keys being performed are in `performing`).
    conflict_in_progress: bool = False
    performing: set[tuple[str, str]] = field(default_factory=set)
    # The CRM's requests (see CRM_RATE) and its customers' requests in flight.
    crm: list[dict[str, Any]] = field(default_factory=list)
    crm_in_flight: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Notified (under `lock`) whenever an order takes a route.
    routed: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.routed = threading.Condition(self.lock)

    def save(self) -> None:
        """Writes the effects and the stored answers to the journal (the caller holds the lock)."""
        if self.journal is None:
            return
        data = {"effects": {s: dict(o) for s, o in self.effects.items()},
                "responses": [[svc, key, reply] for (svc, key), reply in self.responses.items()],
                "calls": len(self.calls) + self.calls_before}
        tmp = self.journal.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.journal)

    def load(self) -> None:
        if self.journal is None or not self.journal.exists():
            return
        data = json.loads(self.journal.read_text())
        for service, orders in data.get("effects", {}).items():
            for order, n in orders.items():
                self.effects[service][order] = int(n)
        for service, key, reply in data.get("responses", []):
            self.responses[(service, key)] = reply
        self.calls_before = int(data.get("calls", 0))

    calls_before: int = 0  # calls counted by earlier runs (journal)


class _Handler(BaseHTTPRequestHandler):
    ledger: Ledger

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server API
        pass

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller (an n8n we killed) is gone

    def do_GET(self) -> None:
        if self.path == "/stats":
            with self.ledger.lock:
                self._reply(200, {
                    "effects": {s: dict(o) for s, o in self.ledger.effects.items()},
                    "calls": len(self.ledger.calls) + self.ledger.calls_before,
                    "in_flight": dict(self.ledger.in_flight),
                    "routes": {r: dict(o) for r, o in self.ledger.routes.items()},
                    "slow_seconds": dict(self.ledger.delays),
                })
            return
        if self.path == "/slow":
            with self.ledger.lock:
                self._reply(200, {"slow_seconds": dict(self.ledger.delays)})
            return
        if self.path == "/crm":
            with self.ledger.lock:
                self._reply(200, {"requests": [dict(r) for r in self.ledger.crm]})
            return
        if self.path.startswith("/documents/"):
            self._document(self.path.split("/", 2)[2])
            return
        self._reply(404, {"error": "not found"})

    def _document(self, order: str) -> None:
        name, data = document(order)
        with self.ledger.lock:
            self.ledger.downloads[order] += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", DOCUMENT_MIME)
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _crm(self, body: dict[str, Any], free: bool = False) -> None:
        """The rate-limited CRM: 429 over CRM_RATE per CRM_WINDOW_S or CRM_CONCURRENT in flight per customer
        (`free`: /crm?free=1 enforces neither, for measuring a workflow without limits)."""
        customer, order = str(body.get("customerId", "")), str(body.get("orderId", ""))
        key = self.headers.get("Idempotency-Key", "")
        now = time.time()
        with self.ledger.lock:
            recent = sum(1 for r in self.ledger.crm if r["customer"] == customer and r["at"] > now - CRM_WINDOW_S)
            busy = self.ledger.crm_in_flight[customer]
            record: dict[str, Any] = {"customer": customer, "order": order, "at": now, "end": now, "status": 0,
                                      "recent": recent, "in_flight": busy}
            self.ledger.crm.append(record)
            if not free and (recent >= CRM_RATE or busy >= CRM_CONCURRENT):
                record["status"] = 429
            else:
                self.ledger.crm_in_flight[customer] += 1
            stall = "crm" in self.ledger.stalled
        if record["status"] == 429:
            self._reply(429, {"error": "too many requests", "recent": recent, "in_flight": busy})
            return
        if stall:
            self.ledger.release.wait(timeout=120)
        time.sleep(CRM_SERVICE_S)
        with self.ledger.lock:
            self.ledger.crm_in_flight[customer] -= 1
            record["status"], record["end"] = 200, time.time()
            if key and ("crm", key) in self.ledger.responses:
                reply = {**self.ledger.responses[("crm", key)], "replayed": True}
            else:
                self.ledger.effects["crm"][order] += 1
                reply = {"id": f"crm_{uuid.uuid4().hex[:12]}", "status": "ok", "orderId": order}
                if key:
                    self.ledger.responses[("crm", key)] = reply
        self._reply(200, reply)

    def _slow(self) -> None:
        """POST /slow?payment=10&shipping=0: seconds per call, per service (0 turns a service's delay off)."""
        asked = parse_qsl(urlsplit(self.path).query)
        unknown = [name for name, _ in asked if name not in SERVICES]
        if not asked or unknown:
            self._reply(400, {"error": f"name services among {', '.join(SERVICES)}, e.g. /slow?payment=10"})
            return
        try:
            seconds = {name: float(value) for name, value in asked}
        except ValueError:
            self._reply(400, {"error": "each value is a number of seconds"})
            return
        if any(not 0 <= v <= 600 for v in seconds.values()):
            self._reply(400, {"error": "seconds from 0 to 600"})
            return
        with self.ledger.lock:
            for name, value in seconds.items():
                if value:
                    self.ledger.delays[name] = value
                else:
                    self.ledger.delays.pop(name, None)
            self._reply(200, {"slow_seconds": dict(self.ledger.delays)})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        content_type = self.headers.get("Content-Type", "")
        files: list[dict[str, Any]] = []
        if len(raw) < length:
            self._reply(400, {"error": "body cut short"})  # its sender died while sending it
            return
        if content_type.startswith("multipart/form-data"):
            fields, files = multipart(content_type, raw)
            body: dict[str, Any] = dict(fields)
        else:
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._reply(400, {"error": "body is not JSON"})
                return
        path = self.path.strip("/").split("?")[0]
        if path == "slow":
            self._slow()
            return
        if path == "crm":
            self._crm(body, free="free=1" in urlsplit(self.path).query)
            return
        if path.startswith("route/"):
            # Records which route of a workflow an order took (e.g. "completed").
            route = path.split("/", 1)[1]
            with self.ledger.routed:
                self.ledger.routes[route][str(body.get("orderId", ""))] += 1
                self.ledger.routed.notify_all()
            self._reply(200, {"ok": True})
            return
        if path not in SERVICES:
            self._reply(404, {"error": f"unknown service {path}"})
            return
        order = str(body.get("orderId") or body.get("subscriptionId") or "")
        key = self.headers.get("Idempotency-Key", "")
        # Each call's record: when it came, how it was answered (status), whether it performed (effective)
        # and the id of the answer it got (a replay gets the stored answer's id).
        call: dict[str, Any] = {"service": path, "order": order, "key": key, "at": time.time(), "body": body,
                                "status": 0, "effective": False, "reply_id": "", "files": files}
        with self.ledger.lock:
            self.ledger.calls.append(call)
            failing = (path, order) in self.ledger.failing
            if not failing and self.ledger.failures_left.get((path, order), 0) > 0:
                self.ledger.failures_left[(path, order)] -= 1
                failing = True
            conflict = (not failing and self.ledger.conflict_in_progress and not self.ledger.ignore_keys
                        and bool(key) and (path, key) in self.ledger.performing)
            if failing or conflict:
                call["status"], call["end"] = (500 if failing else 409), time.time()
            else:
                self.ledger.in_flight[path] += 1
                if key:
                    self.ledger.performing.add((path, key))
            stall = path in self.ledger.stalled
            delay = self.ledger.delays.get(path, 0.0) + self.ledger.order_delays.get((path, order), 0.0)
        if failing:
            self._reply(500, {"error": f"{path} is down for order {order}"})
            return
        if conflict:
            self._reply(409, {"error": f"a request with Idempotency-Key {key} is being performed"})
            return
        try:
            if stall:
                self.ledger.release.wait(timeout=120)
            if delay:
                time.sleep(delay)
            with self.ledger.lock:
                if key and (path, key) in self.ledger.responses and not self.ledger.ignore_keys:
                    reply = {**self.ledger.responses[(path, key)], "replayed": True}
                else:
                    call["effective"] = True
                    self.ledger.effects[path][order] += 1
                    self.ledger.logic[path][order].append(str(body.get("logic", "")))
                    reply = {"id": f"{path}_{uuid.uuid4().hex[:12]}", "status": "ok"}
                    if self.ledger.shape == "echo":
                        reply |= {"orderId": order, "service": path}
                    if key:
                        self.ledger.responses[(path, key)] = reply
                    self.ledger.save()
                call["status"], call["reply_id"] = 200, reply["id"]
        finally:
            with self.ledger.lock:
                self.ledger.in_flight[path] -= 1
                self.ledger.performing.discard((path, key))
                call["end"] = time.time()
        self._reply(200, reply)


class FakeServices:
    """The fake in a daemon thread on a free loopback port."""

    def __init__(self, port: int = 0, journal: Path | None = None) -> None:
        self.ledger = Ledger(journal=journal)
        self.ledger.load()
        handler = type("Handler", (_Handler,), {"ledger": self.ledger})
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-services", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeServices:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.ledger.release.set()
        self.server.shutdown()
        self.server.server_close()

    def stall(self, service: str) -> None:
        with self.ledger.lock:
            self.ledger.release.clear()
            self.ledger.stalled.add(service)

    def unstall(self) -> None:
        with self.ledger.lock:
            self.ledger.stalled.clear()
        self.ledger.release.set()

    def fail(self, service: str, order: str) -> None:
        """Every call of `order` to `service` answers 500 and performs nothing, until `heal`."""
        with self.ledger.lock:
            self.ledger.failing.add((service, order))

    def schedule(self, service: str, order: str, *, fail_first: int = 0, delay_s: float = 0.0) -> None:
        """The order's next `fail_first` calls to `service` answer 500 and perform nothing; each of its calls
        then takes `delay_s` seconds before it is performed (make chaos's seeded provider schedule)."""
        with self.ledger.lock:
            self.ledger.failures_left[(service, order)] = fail_first
            self.ledger.order_delays[(service, order)] = delay_s

    def ignore_keys(self, ignore: bool = True) -> None:
        """A planted defect: every call performs, whatever its Idempotency-Key (an oracle must see it)."""
        with self.ledger.lock:
            self.ledger.ignore_keys = ignore

    def refuse_keys_in_progress(self) -> None:
        """Stripe's rule: a call whose Idempotency-Key is still being performed gets 409 and performs nothing."""
        with self.ledger.lock:
            self.ledger.conflict_in_progress = True

    def call_records(self) -> list[dict[str, Any]]:
        """A copy of every call's record (service, order, key, at, body, status, effective, reply_id, files, and end
        once answered), in order."""
        with self.ledger.lock:
            return [dict(c) for c in self.ledger.calls]

    def downloads(self, order: str) -> int:
        """How often the order's document was downloaded (GET /documents/<order>)."""
        with self.ledger.lock:
            return self.ledger.downloads[order]

    def crm_requests(self) -> list[dict[str, Any]]:
        """Every request the rate-limited CRM saw (customer, order, at, end, status), in arrival order."""
        with self.ledger.lock:
            return [dict(r) for r in self.ledger.crm]

    def heal(self) -> None:
        with self.ledger.lock:
            self.ledger.failing.clear()

    def set_shape(self, shape: str) -> None:
        """"echo" (the default) or "bare": `{ "id": ..., "status": ... }` and nothing else."""
        assert shape in ("echo", "bare"), shape
        with self.ledger.lock:
            self.ledger.shape = shape

    def bodies(self, service: str, order: str) -> list[dict[str, Any]]:
        """The request bodies of every call the order made to the service, in order."""
        with self.ledger.lock:
            return [dict(c["body"]) for c in self.ledger.calls if c["service"] == service and c["order"] == order]

    def in_flight(self, service: str) -> int:
        with self.ledger.lock:
            return self.ledger.in_flight[service]

    def effects(self, service: str, order: str) -> int:
        with self.ledger.lock:
            return self.ledger.effects[service][order]

    def logic(self, service: str, order: str) -> list[str]:
        """The `logic` field of the body of each effect the order had on the service ("" when absent)."""
        with self.ledger.lock:
            return list(self.ledger.logic[service][order])

    def call_times(self, service: str, order: str) -> list[float]:
        """When each call of the order to the service arrived (time.time()), in order."""
        with self.ledger.lock:
            return [c["at"] for c in self.ledger.calls if c["service"] == service and c["order"] == order]

    def calls(self, service: str, order: str) -> int:
        with self.ledger.lock:
            return sum(1 for c in self.ledger.calls if c["service"] == service and c["order"] == order)

    def route(self, route: str, order: str) -> int:
        with self.ledger.lock:
            return self.ledger.routes[route][order]

    def wait_route(self, route: str, order: str, timeout: float) -> bool:
        """Waits until the order took the route (a POST to /route/<route>); False after `timeout` seconds."""
        with self.ledger.routed:
            return self.ledger.routed.wait_for(lambda: self.ledger.routes[route][order] > 0, timeout)

    def duplicate_effects(self, orders: list[str], services: tuple[str, ...]) -> list[str]:
        """Every (order, service) whose effect ran other than exactly once."""
        out = []
        with self.ledger.lock:
            for order in orders:
                for service in services:
                    n = self.ledger.effects[service][order]
                    if n != 1:
                        out.append(f"{order}/{service} ran {n} times")
        return out
