"""Bearer tokens in gRPC metadata mapped to namespaces, and what each token's role may call.

A token carries one role (DURABLE_AUTH_TOKENS `token=namespace[:role]`, admin when none is given):

- **read**: lists, timelines, states, counts: every call that changes nothing;
- **operate**: also what the n8n nodes send (start, save, claim, complete, wait, signal, limits, sessions)
  and the operator's actions on instances (cancel, retry, resume);
- **admin**: also moves between versions and deleting data (pruning checkpoints, purging an instance).

Every method of the contract has its row in ROLES (tests/sidecar/test_roles.py fails for a method without
one); a call with too small a role is refused with PERMISSION_DENIED before it does anything, whichever face
(gRPC, HTTP/JSON, the call stream) carried it.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any

from ..errors import PermissionDenied, Unauthenticated

DEFAULT_NAMESPACE = "default"


class Role(enum.IntEnum):
    READ = 1
    OPERATE = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


_READ, _OPERATE, _ADMIN = Role.READ, Role.OPERATE, Role.ADMIN

# The least role each method needs, by the method's name (names are unique across the contract's services).
ROLES: dict[str, Role] = {
    # InstanceService
    "StartOrResume": _OPERATE, "GetInstance": _READ, "ListInstances": _READ, "SetSearchFields": _OPERATE,
    "CompleteInstance": _OPERATE,
    "FailInstance": _OPERATE, "CancelInstance": _OPERATE, "ScheduleWakeUp": _OPERATE, "ClaimResumable": _OPERATE,
    "WatchResumable": _OPERATE,
    # CheckpointService
    "SaveCheckpoints": _OPERATE, "GetLatestCheckpoint": _READ, "GetCheckpoint": _READ, "ListCheckpoints": _READ,
    "PruneCheckpoints": _ADMIN,
    # IdempotencyService
    "Claim": _OPERATE, "Complete": _OPERATE, "Release": _OPERATE, "GetKey": _READ, "ListKeys": _READ,
    # VersionService (the Resume Point registers and syncs versions; moving instances is an admin's)
    "RegisterVersion": _OPERATE, "SyncVersionFromN8n": _OPERATE, "GetVersion": _READ, "ListVersions": _READ,
    "MoveInstances": _ADMIN, "ListChangeLog": _READ,
    # EventService, RecoveryService
    "AwaitEvent": _OPERATE, "SignalInstance": _OPERATE, "ListEvents": _READ,
    "RetryInstance": _OPERATE, "ResumeInstance": _OPERATE, "PurgeInstance": _ADMIN,
    "ReplayInstance": _OPERATE,  # onto another version: admin (checked by the method, as a move)
    # SessionService (what every n8n process opens)
    "OpenSession": _OPERATE, "Heartbeat": _OPERATE, "WatchSession": _OPERATE, "CloseSession": _OPERATE,
    "ListSessions": _READ,
    # LimitService
    "AcquireSlot": _OPERATE, "ReleaseSlot": _OPERATE, "Throttle": _OPERATE, "Debounce": _OPERATE,
    "ListLimitKeys": _READ,
    # OperationService (bulk actions: an operator's)
    "PreviewOperation": _READ, "StartOperation": _OPERATE, "GetOperation": _READ, "ListOperations": _READ,
    "PauseOperation": _OPERATE, "ContinueOperation": _OPERATE, "CancelOperation": _OPERATE,
    # FileService (the nodes upload what their saves carry; reading a file is reading a checkpoint)
    "StatFiles": _READ, "UploadFile": _OPERATE, "DownloadFile": _READ, "ListCheckpointFiles": _READ,
    "ListKeyFiles": _READ,
    # AuditService
    "ListInstanceEvents": _READ, "CountInstances": _READ, "GetCaller": _READ, "ListWorkflows": _READ,
    # CallService: the stream itself; each call it carries is judged by its own method's row.
    "Call": _READ,
}


# The role of the call being served (set with its namespace before the handler runs).
caller_role: ContextVar[Role] = ContextVar("caller_role", default=Role.READ)


class Authenticator:
    def __init__(self, tokens: dict[str, str], *, disabled: bool, roles: dict[str, str] | None = None) -> None:
        roles = roles or {}
        self._tokens = [(t.encode(), ns, Role[roles.get(t, "admin").upper()]) for t, ns in tokens.items()]
        self._disabled = disabled

    def namespace_for(self, metadata: Sequence[Any] | None) -> str:
        return self.caller(metadata)[0]

    def caller(self, metadata: Sequence[Any] | None) -> tuple[str, Role]:
        """The namespace and the role of the call's token."""
        header = ""
        for item in metadata or ():
            if item[0] == "authorization":
                header = item[1] if isinstance(item[1], str) else item[1].decode()
                break
        if not header:
            if self._disabled:
                return DEFAULT_NAMESPACE, Role.ADMIN
            raise Unauthenticated("missing token: send 'authorization: Bearer <token>' metadata")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("malformed authorization metadata: expected 'Bearer <token>'")
        given = token.strip().encode()
        found: tuple[str, Role] | None = None
        # Compare against every token in constant time so timing reveals nothing.
        for known, ns, role in self._tokens:
            if hmac.compare_digest(known, given):
                found = (ns, role)
        if found is None:
            if self._disabled:
                return DEFAULT_NAMESPACE, Role.ADMIN
            raise Unauthenticated("unknown token: check the token in the Durable Sidecar credential")
        return found

    def authorize(self, metadata: Sequence[Any] | None, method: str) -> tuple[str, Role]:
        """The caller's namespace and role, once its role allows `method`; PermissionDenied otherwise."""
        namespace, role = self.caller(metadata)
        needed = ROLES.get(method, Role.ADMIN)  # a method without a row: admins only (and the test fails)
        if role < needed:
            raise PermissionDenied(f"{method} needs a token with the {needed.label} role; this token's role is "
                                   f"{role.label} (DURABLE_AUTH_TOKENS token=namespace:role)")
        caller_role.set(role)
        return namespace, role
