"""The one table turning domain errors into gRPC status codes."""

from __future__ import annotations

import grpc

from .. import errors

STATUS_BY_ERROR: dict[type[errors.DomainError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.StaleFencingToken: grpc.StatusCode.ABORTED,
    errors.TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
}


def status_for(exc: errors.DomainError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return grpc.StatusCode.INTERNAL
