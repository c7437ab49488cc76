"""The web console's files on the HTTP/JSON face: opt-in, offline (no file from elsewhere), no data without a token.

The console itself is driven in a real browser by e2e/test_console_browser.py; here only what the
sidecar serves: the files, their headers, config.json, and that they are off by default.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from durable_sidecar import app
from durable_sidecar.settings import SettingsError
from durable_sidecar.transport.http import Console

from tests.conftest import make_settings


@pytest.fixture
async def console(database_url: str) -> AsyncIterator[str]:
    settings = make_settings(database_url, auth_tokens="console-token-1=ns-console", http_listen_address="127.0.0.1:0",
                             console_enabled=True, console_n8n_url="https://n8n.example.com")
    sidecar = await app.start(settings)
    assert sidecar.http_server is not None
    try:
        yield f"http://127.0.0.1:{sidecar.http_server.port}"
    finally:
        await sidecar.stop(grace=0.5)


async def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as session, session.get(url, allow_redirects=False) as reply:
        return reply.status, dict(reply.headers), await reply.read()


async def test_console_files_are_served_with_a_strict_policy_and_load_nothing_from_elsewhere(console: str) -> None:
    status, headers, body = await _get(f"{console}/console/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"console.js" in body and b"console.css" in body
    for name in ("index.html", "console.js", "console.css"):
        status, _, text = await _get(f"{console}/console/{name}")
        assert status == 200, name
        # Offline: no URL of another origin anywhere in the files (links to n8n come from config.json).
        assert not re.search(rb"(src|href)=[\"']?(https?:)?//", text), name
        assert b"cdn" not in text.lower(), name
    status, headers, _ = await _get(f"{console}/console")
    assert status == 308 and headers["Location"] == "/console/"


async def test_console_config_names_the_n8n_url_and_unknown_files_are_404(console: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{console}/console/config.json") as reply:
        assert reply.status == 200 and await reply.json() == {"n8nUrl": "https://n8n.example.com"}
    for name in ("nothing.js", ".hidden.js", "README"):
        status, _, _ = await _get(f"{console}/console/{name}")
        assert status == 404, name
    # Nothing outside the console folder: a path that leaves it is no console route at all.
    for name in ("..%2Fapp.py", "%2E%2E/app.py"):
        status, _, body = await _get(f"{console}/console/{name}")
        assert status in (404, 501) and b"import" not in body, name


async def test_console_data_needs_the_token_the_files_do_not(console: str) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"{console}/durable.v1.AuditService/CountInstances"
        async with session.post(url, json={}, headers={"Authorization": "Bearer wrong-token-1"}) as reply:
            assert reply.status == 401 and (await reply.json())["code"] == "unauthenticated"
        async with session.post(url, json={}, headers={"Authorization": "Bearer console-token-1"}) as reply:
            assert reply.status == 200 and (await reply.json()).get("total", "0") == "0"  # proto3 JSON omits zeros


async def test_console_is_off_by_default_and_needs_the_http_face(database_url: str) -> None:
    settings = make_settings(database_url, auth_tokens="console-token-1=ns-console", http_listen_address="127.0.0.1:0")
    sidecar = await app.start(settings)
    assert sidecar.http_server is not None
    try:
        status, _, _ = await _get(f"http://127.0.0.1:{sidecar.http_server.port}/console/")
        assert status != 200
    finally:
        await sidecar.stop(grace=0.5)
    with pytest.raises(SettingsError, match="DURABLE_CONSOLE_ENABLED"):
        make_settings(database_url, auth_disabled=True, console_enabled=True)
    with pytest.raises(SettingsError, match="DURABLE_CONSOLE_N8N_URL"):
        make_settings(database_url, auth_disabled=True, http_listen_address="127.0.0.1:0", console_enabled=True,
                      console_n8n_url="n8n.example.com")


def test_console_files_ship_in_the_package() -> None:
    root = Console().root
    assert {"index.html", "console.js", "console.css"} <= {p.name for p in root.iterdir()}
