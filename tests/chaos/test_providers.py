"""The chaos providers (chaos/providers.py over e2e/fake_services.py) on a loopback port: an order's document is
the same bytes every time, and a call's multipart form is recorded with its file, as the oracle's rule 7 reads it."""

from __future__ import annotations

import hashlib
import json
import urllib.request

from chaos.providers import Providers, sent_document


def form(boundary: str, fields: dict[str, str], file: tuple[str, str, str, bytes]) -> bytes:
    """A multipart/form-data body as n8n's HTTP Request sends it: text fields, then one file part."""
    out = b""
    for name, value in fields.items():
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    field, file_name, mime, data = file
    out += (f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{file_name}"\r\n'
            f"Content-Type: {mime}\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return out


def test_a_document_downloaded_and_uploaded_as_a_form_is_recorded_with_its_bytes_name_and_type() -> None:
    providers = Providers()
    try:
        with urllib.request.urlopen(f"{providers.url}/documents/k1", timeout=10) as answer:
            data, headers = answer.read(), answer.headers
        with urllib.request.urlopen(f"{providers.url}/documents/k1", timeout=10) as again:
            assert again.read() == data
        want = sent_document("k1")
        assert 20_000 < len(data) < 61_000 and data.startswith(b"%PDF")
        assert headers["Content-Type"] == want.mime == "application/pdf"
        assert headers["Content-Disposition"] == f'attachment; filename="{want.name}"'
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (want.sha256, want.size)
        assert sent_document("k2").sha256 != want.sha256
        body = form("xYz", {"orderId": "k1", "logic": "card"}, ("document", want.name, want.mime, data))
        request = urllib.request.Request(f"{providers.url}/coupon", body, method="POST", headers={
            "Content-Type": "multipart/form-data; boundary=xYz", "Idempotency-Key": "dk-1"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert json.loads(answer.read())["orderId"] == "k1"
        [call] = providers.facts({"k1"})
        assert (call.provider, call.logic, call.idempotency_key, call.effective) == ("coupon", "card", "dk-1", True)
        assert call.files == (want,)
        assert providers.services.downloads("k1") == 2
    finally:
        providers.stop()
