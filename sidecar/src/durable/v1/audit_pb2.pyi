import datetime

from durable.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class InstanceEvent(_message.Message):
    __slots__ = ("id", "kind", "actor", "execution_id", "detail", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    kind: str
    actor: str
    execution_id: str
    detail: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., kind: _Optional[str] = ..., actor: _Optional[str] = ..., execution_id: _Optional[str] = ..., detail: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListInstanceEventsRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "page_size", "page_token")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    page_size: int
    page_token: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListInstanceEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[InstanceEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[InstanceEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CountInstancesRequest(_message.Message):
    __slots__ = ("workflow_id", "bound_version", "instance_key_prefix", "last_step", "created_after", "created_before", "search_fields", "error_contains")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    BOUND_VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    bound_version: int
    instance_key_prefix: str
    last_step: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    search_fields: _containers.RepeatedCompositeFieldContainer[_common_pb2.SearchFieldFilter]
    error_contains: str
    def __init__(self, workflow_id: _Optional[str] = ..., bound_version: _Optional[int] = ..., instance_key_prefix: _Optional[str] = ..., last_step: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., search_fields: _Optional[_Iterable[_Union[_common_pb2.SearchFieldFilter, _Mapping]]] = ..., error_contains: _Optional[str] = ...) -> None: ...

class StatusCount(_message.Message):
    __slots__ = ("status", "count")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.InstanceStatus
    count: int
    def __init__(self, status: _Optional[_Union[_common_pb2.InstanceStatus, str]] = ..., count: _Optional[int] = ...) -> None: ...

class CountInstancesResponse(_message.Message):
    __slots__ = ("counts", "stalled", "total")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    STALLED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedCompositeFieldContainer[StatusCount]
    stalled: int
    total: int
    def __init__(self, counts: _Optional[_Iterable[_Union[StatusCount, _Mapping]]] = ..., stalled: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class GetCallerRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCallerResponse(_message.Message):
    __slots__ = ("namespace", "role")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    role: str
    def __init__(self, namespace: _Optional[str] = ..., role: _Optional[str] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class WorkflowSummary(_message.Message):
    __slots__ = ("workflow_id", "versions", "latest_version", "latest_label", "instances")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    LATEST_VERSION_FIELD_NUMBER: _ClassVar[int]
    LATEST_LABEL_FIELD_NUMBER: _ClassVar[int]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    versions: int
    latest_version: int
    latest_label: str
    instances: int
    def __init__(self, workflow_id: _Optional[str] = ..., versions: _Optional[int] = ..., latest_version: _Optional[int] = ..., latest_label: _Optional[str] = ..., instances: _Optional[int] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows", "next_page_token")
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[WorkflowSummary]
    next_page_token: str
    def __init__(self, workflows: _Optional[_Iterable[_Union[WorkflowSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
