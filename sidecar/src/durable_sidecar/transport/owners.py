"""Which lease owners a successful call names, by method: they are recorded against the caller's session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# The session metadata (HTTP/JSON: the header of the same name) a call of an n8n process carries.
SESSION_METADATA = "durable-session"
# The session's own calls are judged by the session service itself, not refused on the way in.
SESSION_METHODS = frozenset({"OpenSession", "Heartbeat", "WatchSession", "CloseSession", "ListSessions"})


# The lease owners a successful call names, by method: what ends with the caller's session.
def _items(field: str) -> Callable[[Any, Any], list[str]]:
    return lambda request, _response: [getattr(item, field) for item in request.items]


OWNERS: dict[str, Callable[[Any, Any], list[str]]] = {
    "StartOrResume": lambda request, _response: [request.execution_id],
    "SaveCheckpoints": _items("execution_id"),
    "Claim": _items("holder"),
    "AwaitEvent": lambda request, _response: [request.execution_id],
    "ClaimResumable": lambda _request, response: [r.claim_token for r in response.instances],
    "WatchResumable": lambda _request, response: [r.claim_token for r in response.instances],
}
