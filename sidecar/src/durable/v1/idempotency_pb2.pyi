import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class KeyStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KEY_STATUS_UNSPECIFIED: _ClassVar[KeyStatus]
    KEY_STATUS_IN_PROGRESS: _ClassVar[KeyStatus]
    KEY_STATUS_COMPLETED: _ClassVar[KeyStatus]
    KEY_STATUS_FAILED: _ClassVar[KeyStatus]

class ClaimOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLAIM_OUTCOME_UNSPECIFIED: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_ACQUIRED: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_DUPLICATE: _ClassVar[ClaimOutcome]
    CLAIM_OUTCOME_IN_PROGRESS: _ClassVar[ClaimOutcome]
KEY_STATUS_UNSPECIFIED: KeyStatus
KEY_STATUS_IN_PROGRESS: KeyStatus
KEY_STATUS_COMPLETED: KeyStatus
KEY_STATUS_FAILED: KeyStatus
CLAIM_OUTCOME_UNSPECIFIED: ClaimOutcome
CLAIM_OUTCOME_ACQUIRED: ClaimOutcome
CLAIM_OUTCOME_DUPLICATE: ClaimOutcome
CLAIM_OUTCOME_IN_PROGRESS: ClaimOutcome

class IdempotencyKey(_message.Message):
    __slots__ = ("scope", "key", "status", "fingerprint", "attempt", "lease_expires_at", "result_json", "error_message", "expires_at", "created_at", "updated_at", "derived_key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    DERIVED_KEY_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    status: KeyStatus
    fingerprint: str
    attempt: int
    lease_expires_at: _timestamp_pb2.Timestamp
    result_json: bytes
    error_message: str
    expires_at: _timestamp_pb2.Timestamp
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    derived_key: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., status: _Optional[_Union[KeyStatus, str]] = ..., fingerprint: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result_json: _Optional[bytes] = ..., error_message: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., derived_key: _Optional[str] = ...) -> None: ...

class ClaimItem(_message.Message):
    __slots__ = ("scope", "key", "payload_json", "fingerprint", "lease_seconds", "ttl_seconds", "holder", "workflow_id", "instance_key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    payload_json: bytes
    fingerprint: str
    lease_seconds: int
    ttl_seconds: int
    holder: str
    workflow_id: str
    instance_key: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., fingerprint: _Optional[str] = ..., lease_seconds: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., holder: _Optional[str] = ..., workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[ClaimItem]
    def __init__(self, items: _Optional[_Iterable[_Union[ClaimItem, _Mapping]]] = ...) -> None: ...

class ClaimResult(_message.Message):
    __slots__ = ("outcome", "key")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    outcome: ClaimOutcome
    key: IdempotencyKey
    def __init__(self, outcome: _Optional[_Union[ClaimOutcome, str]] = ..., key: _Optional[_Union[IdempotencyKey, _Mapping]] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ClaimResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ClaimResult, _Mapping]]] = ...) -> None: ...

class CompleteRequest(_message.Message):
    __slots__ = ("scope", "key", "attempt", "result_json")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    attempt: int
    result_json: bytes
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., attempt: _Optional[int] = ..., result_json: _Optional[bytes] = ...) -> None: ...

class CompleteResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: IdempotencyKey
    def __init__(self, key: _Optional[_Union[IdempotencyKey, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("scope", "key", "attempt", "error_message")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    attempt: int
    error_message: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., attempt: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: IdempotencyKey
    def __init__(self, key: _Optional[_Union[IdempotencyKey, _Mapping]] = ...) -> None: ...

class GetKeyRequest(_message.Message):
    __slots__ = ("scope", "key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class GetKeyResponse(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: IdempotencyKey
    def __init__(self, key: _Optional[_Union[IdempotencyKey, _Mapping]] = ...) -> None: ...

class ListKeysRequest(_message.Message):
    __slots__ = ("scope", "statuses", "page_size", "page_token", "key_prefix")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    KEY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    scope: str
    statuses: _containers.RepeatedScalarFieldContainer[KeyStatus]
    page_size: int
    page_token: str
    key_prefix: str
    def __init__(self, scope: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[KeyStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., key_prefix: _Optional[str] = ...) -> None: ...

class ListKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[IdempotencyKey]
    next_page_token: str
    def __init__(self, keys: _Optional[_Iterable[_Union[IdempotencyKey, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
