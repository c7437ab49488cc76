"""N8nClient: reads workflow definitions from n8n's public REST API (GET /api/v1/workflows/{id})."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import IO, Any

from .errors import FailedPrecondition, NotFound, Unavailable

log = logging.getLogger(__name__)

# Fields of n8n's workflow object that make up a runnable definition; the rest
# (staticData, pinData, shared, tags, timestamps) is runtime or ownership data.
_DEFINITION_FIELDS = ("id", "name", "nodes", "connections", "settings")


@dataclass(frozen=True)
class N8nWorkflow:
    definition_json: bytes
    version_id: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would resend the API key to wherever it points: refuse instead."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> urllib.request.Request | None:
        return None


class N8nClient:
    """Configured when both the base URL and the API key are set; never logs the key."""

    def __init__(self, base_url: str, api_key: str, *, timeout_seconds: float, max_bytes: int) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_seconds = timeout_seconds
        self.max_bytes = max_bytes
        self._opener = urllib.request.build_opener(_NoRedirects())

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self._api_key)

    async def fetch_workflow(self, workflow_id: str) -> N8nWorkflow:
        """The workflow's definition; FailedPrecondition / NotFound / Unavailable with a message to act on."""
        if not self.configured:
            raise FailedPrecondition(
                "n8n API access is not configured: set DURABLE_N8N_BASE_URL and DURABLE_N8N_API_KEY on the sidecar "
                "(or register the definition with RegisterVersion, or send it with StartOrResume)"
            )
        body = await asyncio.to_thread(self._get, f"/api/v1/workflows/{urllib.parse.quote(workflow_id, safe='')}",
                                       workflow_id)
        try:
            doc = json.loads(body)
        except ValueError:
            raise FailedPrecondition(f"n8n at {self.base_url} answered with something that is not JSON: "
                                     "is DURABLE_N8N_BASE_URL the n8n base URL?") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
            raise FailedPrecondition(f"n8n at {self.base_url} answered without a workflow (no 'nodes' array): "
                                     "is DURABLE_N8N_BASE_URL the n8n base URL?")
        definition = {k: doc[k] for k in _DEFINITION_FIELDS if k in doc}
        version_id = doc.get("versionId")
        published = doc.get("activeVersion")
        if isinstance(published, dict) and isinstance(published.get("nodes"), list):
            # n8n 2.x keeps an edited draft beside the published version; production executions
            # (webhooks, triggers, the Resume Trigger) run the published one, so that is the version.
            definition["nodes"] = published["nodes"]
            definition["connections"] = published.get("connections", {})
            version_id = published.get("versionId", version_id)
        return N8nWorkflow(
            definition_json=json.dumps(definition, ensure_ascii=False, separators=(",", ":")).encode(),
            version_id=version_id if isinstance(version_id, str) else "",
        )

    def _get(self, path: str, workflow_id: str) -> bytes:
        request = urllib.request.Request(
            self.base_url + path,
            headers={"X-N8N-API-KEY": self._api_key, "Accept": "application/json",
                     "User-Agent": "durable-sidecar"},
            method="GET",
        )
        try:
            with self._opener.open(request, timeout=self.timeout_seconds) as response:
                body: bytes = response.read(self.max_bytes + 1)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, workflow_id) from None
        except (urllib.error.URLError, OSError) as exc:
            reason: Any = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                reason = f"no answer within {self.timeout_seconds}s"
            log.warning("n8n not reachable", extra={"n8n": self.base_url, "error": str(reason)})
            raise Unavailable(f"n8n at {self.base_url} cannot be reached: {reason}") from None
        if len(body) > self.max_bytes:
            raise FailedPrecondition(f"the definition of workflow {workflow_id} in n8n is larger than "
                                     f"{self.max_bytes} bytes")
        return body

    def _http_error(self, exc: urllib.error.HTTPError, workflow_id: str) -> Exception:
        code = exc.code
        exc.close()
        log.warning("n8n refused", extra={"n8n": self.base_url, "http_status": code})
        if code in (401, 403):
            return FailedPrecondition(f"n8n at {self.base_url} refused the API key (HTTP {code}): check "
                                      "DURABLE_N8N_API_KEY (n8n Settings > n8n API)")
        if code == 404:
            return NotFound(f"workflow {workflow_id} does not exist in n8n at {self.base_url} (HTTP 404)")
        if 300 <= code < 400:
            return FailedPrecondition(f"n8n at {self.base_url} answered with a redirect (HTTP {code}): set "
                                      "DURABLE_N8N_BASE_URL to the URL n8n is served at")
        if code == 429 or code >= 500:
            return Unavailable(f"n8n at {self.base_url} is unavailable (HTTP {code}); retry later")
        return FailedPrecondition(f"n8n at {self.base_url} answered HTTP {code} for workflow {workflow_id}")
