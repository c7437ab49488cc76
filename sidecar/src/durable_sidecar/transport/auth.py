"""Bearer tokens in gRPC metadata mapped to namespaces."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from ..errors import Unauthenticated

DEFAULT_NAMESPACE = "default"


class Authenticator:
    def __init__(self, tokens: dict[str, str], *, disabled: bool) -> None:
        self._tokens = [(t.encode(), ns) for t, ns in tokens.items()]
        self._disabled = disabled

    def namespace_for(self, metadata: Sequence[Any] | None) -> str:
        header = ""
        for item in metadata or ():
            if item[0] == "authorization":
                header = item[1] if isinstance(item[1], str) else item[1].decode()
                break
        if not header:
            if self._disabled:
                return DEFAULT_NAMESPACE
            raise Unauthenticated("missing token: send 'authorization: Bearer <token>' metadata")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("malformed authorization metadata: expected 'Bearer <token>'")
        given = token.strip().encode()
        namespace = None
        # Compare against every token in constant time so timing reveals nothing.
        for known, ns in self._tokens:
            if hmac.compare_digest(known, given):
                namespace = ns
        if namespace is None:
            if self._disabled:
                return DEFAULT_NAMESPACE
            raise Unauthenticated("unknown token: check the token in the Durable Sidecar credential")
        return namespace
