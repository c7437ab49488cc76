import datetime

from durable.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BulkAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BULK_ACTION_UNSPECIFIED: _ClassVar[BulkAction]
    BULK_ACTION_RETRY: _ClassVar[BulkAction]
    BULK_ACTION_RESUME: _ClassVar[BulkAction]
    BULK_ACTION_CANCEL: _ClassVar[BulkAction]
    BULK_ACTION_MOVE: _ClassVar[BulkAction]
    BULK_ACTION_REPLAY: _ClassVar[BulkAction]

class OperationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATUS_UNSPECIFIED: _ClassVar[OperationStatus]
    OPERATION_STATUS_RUNNING: _ClassVar[OperationStatus]
    OPERATION_STATUS_PAUSED: _ClassVar[OperationStatus]
    OPERATION_STATUS_CANCELLED: _ClassVar[OperationStatus]
    OPERATION_STATUS_COMPLETED: _ClassVar[OperationStatus]
BULK_ACTION_UNSPECIFIED: BulkAction
BULK_ACTION_RETRY: BulkAction
BULK_ACTION_RESUME: BulkAction
BULK_ACTION_CANCEL: BulkAction
BULK_ACTION_MOVE: BulkAction
BULK_ACTION_REPLAY: BulkAction
OPERATION_STATUS_UNSPECIFIED: OperationStatus
OPERATION_STATUS_RUNNING: OperationStatus
OPERATION_STATUS_PAUSED: OperationStatus
OPERATION_STATUS_CANCELLED: OperationStatus
OPERATION_STATUS_COMPLETED: OperationStatus

class BulkSelector(_message.Message):
    __slots__ = ("workflow_id", "statuses", "bound_version", "stalled_only", "instance_key_prefix", "last_step", "created_after", "created_before", "search_fields", "error_contains")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    BOUND_VERSION_FIELD_NUMBER: _ClassVar[int]
    STALLED_ONLY_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.InstanceStatus]
    bound_version: int
    stalled_only: bool
    instance_key_prefix: str
    last_step: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    search_fields: _containers.RepeatedCompositeFieldContainer[_common_pb2.SearchFieldFilter]
    error_contains: str
    def __init__(self, workflow_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.InstanceStatus, str]]] = ..., bound_version: _Optional[int] = ..., stalled_only: _Optional[bool] = ..., instance_key_prefix: _Optional[str] = ..., last_step: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., search_fields: _Optional[_Iterable[_Union[_common_pb2.SearchFieldFilter, _Mapping]]] = ..., error_contains: _Optional[str] = ...) -> None: ...

class PreviewOperationRequest(_message.Message):
    __slots__ = ("selector", "sample_size")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    selector: BulkSelector
    sample_size: int
    def __init__(self, selector: _Optional[_Union[BulkSelector, _Mapping]] = ..., sample_size: _Optional[int] = ...) -> None: ...

class PreviewOperationResponse(_message.Message):
    __slots__ = ("count", "sample")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_FIELD_NUMBER: _ClassVar[int]
    count: int
    sample: _containers.RepeatedCompositeFieldContainer[_common_pb2.Instance]
    def __init__(self, count: _Optional[int] = ..., sample: _Optional[_Iterable[_Union[_common_pb2.Instance, _Mapping]]] = ...) -> None: ...

class StartOperationRequest(_message.Message):
    __slots__ = ("action", "selector", "actor", "reason", "to_version", "replay_from_step")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    action: BulkAction
    selector: BulkSelector
    actor: str
    reason: str
    to_version: int
    replay_from_step: str
    def __init__(self, action: _Optional[_Union[BulkAction, str]] = ..., selector: _Optional[_Union[BulkSelector, _Mapping]] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., to_version: _Optional[int] = ..., replay_from_step: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("id", "action", "status", "selector_json", "actor", "reason", "matched_at_start", "acted", "skipped", "created_at", "updated_at", "finished_at", "last_workflow_id", "last_instance_key", "last_skip", "to_version", "replay_from_step")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_JSON_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MATCHED_AT_START_FIELD_NUMBER: _ClassVar[int]
    ACTED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    LAST_SKIP_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    id: int
    action: BulkAction
    status: OperationStatus
    selector_json: str
    actor: str
    reason: str
    matched_at_start: int
    acted: int
    skipped: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    last_workflow_id: str
    last_instance_key: str
    last_skip: str
    to_version: int
    replay_from_step: str
    def __init__(self, id: _Optional[int] = ..., action: _Optional[_Union[BulkAction, str]] = ..., status: _Optional[_Union[OperationStatus, str]] = ..., selector_json: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., matched_at_start: _Optional[int] = ..., acted: _Optional[int] = ..., skipped: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_workflow_id: _Optional[str] = ..., last_instance_key: _Optional[str] = ..., last_skip: _Optional[str] = ..., to_version: _Optional[int] = ..., replay_from_step: _Optional[str] = ...) -> None: ...

class StartOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class GetOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class OperationActionRequest(_message.Message):
    __slots__ = ("id", "actor")
    ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    id: int
    actor: str
    def __init__(self, id: _Optional[int] = ..., actor: _Optional[str] = ...) -> None: ...

class OperationActionResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...
