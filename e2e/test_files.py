"""End-to-end: files (n8n binary data) survive an n8n kill (issue 45, scenario 32).

A workflow written from node-package/README.md and docs/files.md, every option at its default: an order's
webhook → Resume Point → Accepted → HTTP Request downloads the order's documents from a fake document
provider (Response Format: File; one node per document, each into its own binary property) → Save
"downloaded" → HTTP Request uploads them to a fake archive (multipart form, one part per file) → Save
"archived" (Complete Instance). The Resume Trigger feeds the same Resume Point, whose "downloaded" output
leads to the upload. n8n is killed (-9) while the uploads are in flight (the archive holds them and never
answers); the restarted n8n resumes each order from "downloaded", with its files restored from the sidecar,
and the archive receives the same bytes, file names and MIME types as the provider sent.
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conftest import REPORT, Stack
from harness import CREDENTIAL_ID, http, wait_until
from scenarios import DocsFlow, all_completed, served, wait_for

FILES_WF = "durableFilesOrders"
FILES3_WF = "durableFilesOrders3"


@dataclass(frozen=True)
class Doc:
    name: str
    mime: str
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class DocumentServices:
    """A document provider (GET /docs/<name>: the bytes, with Content-Type and a Content-Disposition file name)
    and an archive (POST /archive/<order>: a multipart form; each file part recorded by name, file name, MIME
    type, SHA-256 and size). While `hold` is set the archive keeps each upload open without reading it, and
    records nothing of it: the execution that sent it never learns the outcome (it is killed meanwhile)."""

    docs: dict[str, Doc] = field(default_factory=dict)
    archived: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    held: int = 0
    hold: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> DocumentServices:
        services = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server API
                pass

            def do_GET(self) -> None:
                doc = services.docs.get(self.path.rsplit("/", 1)[-1])
                if doc is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", doc.mime)
                self.send_header("Content-Disposition", f'attachment; filename="{doc.name}"')
                self.send_header("Content-Length", str(len(doc.data)))
                self.end_headers()
                self.wfile.write(doc.data)

            def do_POST(self) -> None:
                order = self.path.rsplit("/", 1)[-1]
                if services.hold.is_set():
                    with services.lock:
                        services.held += 1
                    while services.hold.is_set():
                        time.sleep(0.05)
                    with services.lock:
                        services.held -= 1
                    self.close_connection = True
                    return  # n8n was killed meanwhile: nothing recorded, nothing answered
                length = int(self.headers["Content-Length"])
                body = self.rfile.read(length)
                message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                    f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode() + body)
                parts = [{"field": p.get_param("name", header="content-disposition"), "file_name": p.get_filename(),
                          "mime": p.get_content_type(), "sha256": hashlib.sha256(data).hexdigest(),
                          "size": len(data)}
                         for p in message.iter_parts() if (data := p.get_payload(decode=True)) is not None]
                with services.lock:
                    services.archived.setdefault(order, []).append({"parts": parts, "at": time.monotonic()})
                out = b'{"archived": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.hold.clear()
        if self.server is not None:
            self.server.shutdown()


def files_workflow(workflow_id: str, path: str, docs_url: str, documents: list[tuple[str, str]]) -> dict[str, Any]:
    """The order's documents workflow (module docstring); `documents`: (binary property, the provider's name
    of the document, read from the order's body field of that name)."""
    f = DocsFlow(workflow_id, "Order documents (from the node docs)", docs_url, CREDENTIAL_ID)
    hook = f.webhook(path, "responseNode")
    trigger = f.durable("Resume Trigger", "resumeTrigger", {}, (0, 200))
    rp = f.durable("Resume Point", "resumePoint", {"instanceKey": "={{ $json.body.orderId }}",
                                                   "stepOutputs": "downloaded"}, (220, 100))
    ok = f.node("Accepted", "n8n-nodes-base.respondToWebhook", 1.5, {"respondWith": "noData", "options": {}},
                (440, 0))
    previous, x = ok, 660
    downloads = []
    for prop, body_field in documents:
        node = f.node(f"Download {prop}", "n8n-nodes-base.httpRequest", 4.2, {
            "method": "GET", "url": f"={docs_url}/docs/{{{{ $json.body.{body_field} }}}}",
            "options": {"response": {"response": {"responseFormat": "file", "outputPropertyName": prop}}},
        }, (x, 0))
        downloads.append(node)
        f.link(previous, node)
        previous, x = node, x + 220
    save_downloaded = f.durable("Save Downloaded", "durableCheckpoint",
                                {"operation": "save", "stepName": "downloaded"}, (x, 0))
    upload = f.node("Archive", "n8n-nodes-base.httpRequest", 4.2, {
        "method": "POST", "url": f"={docs_url}/archive/{{{{ $json.body.orderId }}}}", "sendBody": True,
        "contentType": "multipart-form-data", "bodyParameters": {"parameters": [
            {"parameterType": "formBinaryData", "name": prop, "inputDataFieldName": prop} for prop, _ in documents]},
        "options": {},
    }, (x + 220, 0))
    save_archived = f.durable("Save Archived", "durableCheckpoint", {
        "operation": "save", "stepName": "archived", "options": {"completeInstance": True}}, (x + 440, 0))
    f.link(hook, rp)
    f.link(trigger, rp)
    f.link(rp, ok, 0)                # Start
    f.link(rp, downloads[0], 1)      # Resume: nothing saved yet
    f.link(rp, upload, 4)            # downloaded
    f.link(previous, save_downloaded)
    f.link(save_downloaded, upload)
    f.link(upload, save_archived)
    return f.workflow()


def _archived_once_with(services: DocumentServices, order: str, docs: dict[str, Doc]) -> list[str]:
    """What is wrong with the order's archive record (nothing: [])."""
    records = services.archived.get(order, [])
    if len(records) != 1:
        return [f"{order}: {len(records)} uploads archived"]
    got = {p["field"]: p for p in records[0]["parts"]}
    wrong = []
    for prop, doc in docs.items():
        part = got.get(prop)
        want = {"field": prop, "file_name": doc.name, "mime": doc.mime, "sha256": doc.sha256, "size": len(doc.data)}
        if part != want:
            wrong.append(f"{order}.{prop}: archived {part}, sent {want}")
    return wrong


def _run(stack: Stack, services: DocumentServices, workflow_id: str, path: str, documents: dict[str, Doc],
         orders: list[str]) -> tuple[float, int]:
    """Delivers the orders with the archive holding every upload, kills n8n (-9) once all are held, restarts it
    and waits until every order completed; (seconds from the kill, uploads held at the kill)."""
    body_fields = {prop: f"doc_{prop}" for prop in documents}
    url = served(stack, path, files_workflow(workflow_id, path, services.url, list(body_fields.items())))
    services.hold.set()
    try:
        for order in orders:
            answer = http("POST", url, {"orderId": order, **{f: documents[p].name for p, f in body_fields.items()}},
                          timeout=120)
            assert answer[0] == 200, answer
        wait_until(f"{len(orders)} uploads to be held by the archive", lambda: services.held >= len(orders),
                   timeout=120)
        held = services.held
        stack.main.kill9()
        killed = time.monotonic()
    finally:
        services.hold.clear()
    stack.restart_n8n()
    done_s = wait_for("every order to complete", lambda: all_completed(stack, orders, workflow_id), killed, 240,
                      lambda: stack.diagnose(orders, workflow_id))
    return done_s, held


def test_32_files_downloaded_before_an_n8n_kill_are_uploaded_after_it_with_the_same_bytes(stack: Stack) -> None:
    """A PDF per order, and a 20 MB file: each saved with the checkpoint, restored on resume, archived once."""
    t0 = time.monotonic()
    services = DocumentServices().start()
    run = os.urandom(3).hex()
    try:
        pdf = Doc(f"invoice-{run}.pdf", "application/pdf", b"%PDF-1.7\n" + os.urandom(180_000) + b"\n%%EOF\n")
        big = Doc(f"scan-{run}.tiff", "image/tiff", os.urandom(20 * 1024 * 1024))
        services.docs = {pdf.name: pdf, big.name: big}
        small_orders = [f"file-{run}-{n}" for n in range(3)]
        done_s, held = _run(stack, services, FILES_WF, f"files-{run}", {"data": pdf}, small_orders)
        wrong = [w for o in small_orders for w in _archived_once_with(services, o, {"data": pdf})]
        assert wrong == [], "\n".join(wrong) + "\n" + stack.diagnose(small_orders, FILES_WF)
        for order in small_orders:
            inst = stack.sidecar.instance(FILES_WF, order)
            assert inst is not None and inst.resume_count >= 1, (order, inst)
        # The same workflow with a 20 MB file (a new workflow id: each run publishes its own).
        big_orders = [f"big-{run}-0"]
        big_s, _ = _run(stack, services, FILES_WF + "Big", f"files-big-{run}", {"data": big}, big_orders)
        wrong = _archived_once_with(services, big_orders[0], {"data": big})
        assert wrong == [], "\n".join(wrong)
    finally:
        services.stop()
    REPORT.add("32. files: a PDF per order and a 20 MB file, kill -9 n8n during the upload",
               len(small_orders) + 1, len(small_orders) + 1, 0, time.monotonic() - t0,
               note=f"{held} uploads held at the kill → each order resumed from 'downloaded' with its file restored "
                    f"and archived once with the provider's bytes, name and type: {done_s:.1f} s; "
                    f"20 MB file: {big_s:.1f} s", kill_to_completed_s=done_s)


def test_32b_three_files_on_one_item_come_back_together(stack: Stack) -> None:
    """Three documents on one item (three binary properties), through the same kill."""
    t0 = time.monotonic()
    services = DocumentServices().start()
    run = os.urandom(3).hex()
    try:
        docs = {"invoice": Doc(f"invoice-{run}.pdf", "application/pdf", b"%PDF-1.4\n" + os.urandom(40_000)),
                "label": Doc(f"label-{run}.png", "image/png", b"\x89PNG\r\n\x1a\n" + os.urandom(30_000)),
                "terms": Doc(f"terms-{run}.txt", "text/plain", b"Terms of sale\n" * 500)}
        services.docs = {d.name: d for d in docs.values()}
        orders = [f"three-{run}-{n}" for n in range(2)]
        done_s, held = _run(stack, services, FILES3_WF, f"files3-{run}", docs, orders)
        wrong = [w for o in orders for w in _archived_once_with(services, o, docs)]
        assert wrong == [], "\n".join(wrong) + "\n" + stack.diagnose(orders, FILES3_WF)
    finally:
        services.stop()
    REPORT.add("32. files: three on one item, kill -9 n8n during the upload", len(orders), len(orders), 0,
               time.monotonic() - t0,
               note=f"{held} uploads held at the kill → all three files of each order archived once, same bytes, "
                    f"names and types: {done_s:.1f} s", kill_to_completed_s=done_s)
