"""Domain errors: one class per failure, mapped to gRPC codes in transport/errors.py alone."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every error a caller can act on; the message is safe to show."""


class InvalidArgument(DomainError):
    """The request is malformed; nothing was changed."""


class NotFound(DomainError):
    """The instance, checkpoint, key or version does not exist in the caller's namespace."""


class AlreadyExists(DomainError):
    """The thing to create exists already."""


class FailedPrecondition(DomainError):
    """The row's state forbids the call (e.g. saving to a completed instance)."""


class InstanceFinished(FailedPrecondition):
    """A claim for an instance that is completed, failed or cancelled: no side effect starts for it."""


class StaleFencingToken(DomainError):
    """A fencing token (expected sequence, attempt number) is stale: re-read and retry higher up."""


class TooLarge(DomainError):
    """A payload is above the configured limit; nothing was written."""


class Unauthenticated(DomainError):
    """Missing or unknown bearer token."""


class PermissionDenied(DomainError):
    """The token's role does not allow the call."""


class Unavailable(DomainError):
    """A dependency (PostgreSQL, n8n) cannot be reached; the call may be retried as it is."""


class Unimplemented(DomainError):
    """The RPC is part of the contract but not built yet."""
