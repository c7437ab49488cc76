import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InstanceStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTANCE_STATUS_UNSPECIFIED: _ClassVar[InstanceStatus]
    INSTANCE_STATUS_RUNNING: _ClassVar[InstanceStatus]
    INSTANCE_STATUS_COMPLETED: _ClassVar[InstanceStatus]
    INSTANCE_STATUS_FAILED: _ClassVar[InstanceStatus]
    INSTANCE_STATUS_CANCELLED: _ClassVar[InstanceStatus]
    INSTANCE_STATUS_SUSPENDED: _ClassVar[InstanceStatus]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_STATE_ACTIVE: _ClassVar[RunState]
    RUN_STATE_WAITING: _ClassVar[RunState]
    RUN_STATE_SCHEDULED: _ClassVar[RunState]
    RUN_STATE_STALLED: _ClassVar[RunState]

class SearchFieldOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_FIELD_OP_UNSPECIFIED: _ClassVar[SearchFieldOp]
    SEARCH_FIELD_OP_EQ: _ClassVar[SearchFieldOp]
    SEARCH_FIELD_OP_LT: _ClassVar[SearchFieldOp]
    SEARCH_FIELD_OP_LTE: _ClassVar[SearchFieldOp]
    SEARCH_FIELD_OP_GT: _ClassVar[SearchFieldOp]
    SEARCH_FIELD_OP_GTE: _ClassVar[SearchFieldOp]
INSTANCE_STATUS_UNSPECIFIED: InstanceStatus
INSTANCE_STATUS_RUNNING: InstanceStatus
INSTANCE_STATUS_COMPLETED: InstanceStatus
INSTANCE_STATUS_FAILED: InstanceStatus
INSTANCE_STATUS_CANCELLED: InstanceStatus
INSTANCE_STATUS_SUSPENDED: InstanceStatus
RUN_STATE_UNSPECIFIED: RunState
RUN_STATE_ACTIVE: RunState
RUN_STATE_WAITING: RunState
RUN_STATE_SCHEDULED: RunState
RUN_STATE_STALLED: RunState
SEARCH_FIELD_OP_UNSPECIFIED: SearchFieldOp
SEARCH_FIELD_OP_EQ: SearchFieldOp
SEARCH_FIELD_OP_LT: SearchFieldOp
SEARCH_FIELD_OP_LTE: SearchFieldOp
SEARCH_FIELD_OP_GT: SearchFieldOp
SEARCH_FIELD_OP_GTE: SearchFieldOp

class RetryPolicy(_message.Message):
    __slots__ = ("max_automatic_resumes", "initial_backoff_ms", "max_backoff_ms", "backoff_multiplier", "jitter", "defaults_for_unset")
    MAX_AUTOMATIC_RESUMES_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_MS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_FOR_UNSET_FIELD_NUMBER: _ClassVar[int]
    max_automatic_resumes: int
    initial_backoff_ms: int
    max_backoff_ms: int
    backoff_multiplier: float
    jitter: float
    defaults_for_unset: bool
    def __init__(self, max_automatic_resumes: _Optional[int] = ..., initial_backoff_ms: _Optional[int] = ..., max_backoff_ms: _Optional[int] = ..., backoff_multiplier: _Optional[float] = ..., jitter: _Optional[float] = ..., defaults_for_unset: _Optional[bool] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "event_name", "dedupe_id", "payload_json", "sender", "received_at", "consumed_at")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAME_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_AT_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    event_name: str
    dedupe_id: str
    payload_json: bytes
    sender: str
    received_at: _timestamp_pb2.Timestamp
    consumed_at: _timestamp_pb2.Timestamp
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., event_name: _Optional[str] = ..., dedupe_id: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., sender: _Optional[str] = ..., received_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., consumed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "status", "bound_version", "version_label", "lease_owner", "lease_expires_at", "wake_at", "last_sequence", "last_step", "checkpoint_count", "resume_count", "error_message", "result_json", "created_by_execution_id", "created_at", "updated_at", "finished_at", "lease_seconds", "run_state", "awaited_event", "wait_deadline", "retry_policy", "attempt", "last_error", "suspended_at", "search_fields_json")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BOUND_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_LABEL_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    WAKE_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_COUNT_FIELD_NUMBER: _ClassVar[int]
    RESUME_COUNT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    AWAITED_EVENT_FIELD_NUMBER: _ClassVar[int]
    WAIT_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_AT_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_JSON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    status: InstanceStatus
    bound_version: int
    version_label: str
    lease_owner: str
    lease_expires_at: _timestamp_pb2.Timestamp
    wake_at: _timestamp_pb2.Timestamp
    last_sequence: int
    last_step: str
    checkpoint_count: int
    resume_count: int
    error_message: str
    result_json: bytes
    created_by_execution_id: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    lease_seconds: int
    run_state: RunState
    awaited_event: str
    wait_deadline: _timestamp_pb2.Timestamp
    retry_policy: RetryPolicy
    attempt: int
    last_error: str
    suspended_at: _timestamp_pb2.Timestamp
    search_fields_json: bytes
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., status: _Optional[_Union[InstanceStatus, str]] = ..., bound_version: _Optional[int] = ..., version_label: _Optional[str] = ..., lease_owner: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., wake_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_sequence: _Optional[int] = ..., last_step: _Optional[str] = ..., checkpoint_count: _Optional[int] = ..., resume_count: _Optional[int] = ..., error_message: _Optional[str] = ..., result_json: _Optional[bytes] = ..., created_by_execution_id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease_seconds: _Optional[int] = ..., run_state: _Optional[_Union[RunState, str]] = ..., awaited_event: _Optional[str] = ..., wait_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., retry_policy: _Optional[_Union[RetryPolicy, _Mapping]] = ..., attempt: _Optional[int] = ..., last_error: _Optional[str] = ..., suspended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., search_fields_json: _Optional[bytes] = ...) -> None: ...

class SearchFieldFilter(_message.Message):
    __slots__ = ("name", "op", "value_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    op: SearchFieldOp
    value_json: bytes
    def __init__(self, name: _Optional[str] = ..., op: _Optional[_Union[SearchFieldOp, str]] = ..., value_json: _Optional[bytes] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "sequence", "step_name", "state_json", "sha256", "size_bytes", "stored_bytes", "execution_id", "node_name", "created_at", "file_count")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FILE_COUNT_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    sequence: int
    step_name: str
    state_json: bytes
    sha256: str
    size_bytes: int
    stored_bytes: int
    execution_id: str
    node_name: str
    created_at: _timestamp_pb2.Timestamp
    file_count: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., sequence: _Optional[int] = ..., step_name: _Optional[str] = ..., state_json: _Optional[bytes] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., stored_bytes: _Optional[int] = ..., execution_id: _Optional[str] = ..., node_name: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., file_count: _Optional[int] = ...) -> None: ...

class FileRef(_message.Message):
    __slots__ = ("property", "file_name", "mime_type", "sha256", "size_bytes")
    PROPERTY_FIELD_NUMBER: _ClassVar[int]
    FILE_NAME_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    property: str
    file_name: str
    mime_type: str
    sha256: str
    size_bytes: int
    def __init__(self, property: _Optional[str] = ..., file_name: _Optional[str] = ..., mime_type: _Optional[str] = ..., sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...
