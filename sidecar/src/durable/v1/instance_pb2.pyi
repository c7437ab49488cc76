import datetime

from durable.v1 import common_pb2 as _common_pb2
from durable.v1 import session_pb2 as _session_pb2
from durable.v1 import idempotency_pb2 as _idempotency_pb2
from durable.v1 import version_pb2 as _version_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    START_OUTCOME_UNSPECIFIED: _ClassVar[StartOutcome]
    START_OUTCOME_STARTED: _ClassVar[StartOutcome]
    START_OUTCOME_RESUMED: _ClassVar[StartOutcome]
    START_OUTCOME_FINISHED: _ClassVar[StartOutcome]
    START_OUTCOME_BUSY: _ClassVar[StartOutcome]
    START_OUTCOME_DIFFERENT: _ClassVar[StartOutcome]

class ResumeReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESUME_REASON_UNSPECIFIED: _ClassVar[ResumeReason]
    RESUME_REASON_STALLED: _ClassVar[ResumeReason]
    RESUME_REASON_WAKE_UP: _ClassVar[ResumeReason]
    RESUME_REASON_EVENT: _ClassVar[ResumeReason]
    RESUME_REASON_TIMEOUT: _ClassVar[ResumeReason]
    RESUME_REASON_RETRY: _ClassVar[ResumeReason]
    RESUME_REASON_REDRIVE: _ClassVar[ResumeReason]
START_OUTCOME_UNSPECIFIED: StartOutcome
START_OUTCOME_STARTED: StartOutcome
START_OUTCOME_RESUMED: StartOutcome
START_OUTCOME_FINISHED: StartOutcome
START_OUTCOME_BUSY: StartOutcome
START_OUTCOME_DIFFERENT: StartOutcome
RESUME_REASON_UNSPECIFIED: ResumeReason
RESUME_REASON_STALLED: ResumeReason
RESUME_REASON_WAKE_UP: ResumeReason
RESUME_REASON_EVENT: ResumeReason
RESUME_REASON_TIMEOUT: ResumeReason
RESUME_REASON_RETRY: ResumeReason
RESUME_REASON_REDRIVE: ResumeReason

class StartOrResumeRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "lease_seconds", "version_label", "pinned_version", "definition_json", "claim_token", "include_state", "start_item_json", "retry_policy", "claim_on_start", "wait_seconds", "check_delivery", "search_fields_json", "workflow_fingerprint")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_LABEL_FIELD_NUMBER: _ClassVar[int]
    PINNED_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    START_ITEM_JSON_FIELD_NUMBER: _ClassVar[int]
    RETRY_POLICY_FIELD_NUMBER: _ClassVar[int]
    CLAIM_ON_START_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHECK_DELIVERY_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_JSON_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    lease_seconds: int
    version_label: str
    pinned_version: int
    definition_json: bytes
    claim_token: str
    include_state: bool
    start_item_json: bytes
    retry_policy: _common_pb2.RetryPolicy
    claim_on_start: _idempotency_pb2.ClaimItem
    wait_seconds: int
    check_delivery: bool
    search_fields_json: bytes
    workflow_fingerprint: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., lease_seconds: _Optional[int] = ..., version_label: _Optional[str] = ..., pinned_version: _Optional[int] = ..., definition_json: _Optional[bytes] = ..., claim_token: _Optional[str] = ..., include_state: _Optional[bool] = ..., start_item_json: _Optional[bytes] = ..., retry_policy: _Optional[_Union[_common_pb2.RetryPolicy, _Mapping]] = ..., claim_on_start: _Optional[_Union[_idempotency_pb2.ClaimItem, _Mapping]] = ..., wait_seconds: _Optional[int] = ..., check_delivery: _Optional[bool] = ..., search_fields_json: _Optional[bytes] = ..., workflow_fingerprint: _Optional[str] = ...) -> None: ...

class StartOrResumeResponse(_message.Message):
    __slots__ = ("outcome", "instance", "latest_checkpoint", "current_version", "version_mismatch", "bound_version", "start_item_json", "event", "wait_outcome", "start_claim")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CURRENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_MISMATCH_FIELD_NUMBER: _ClassVar[int]
    BOUND_VERSION_FIELD_NUMBER: _ClassVar[int]
    START_ITEM_JSON_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    WAIT_OUTCOME_FIELD_NUMBER: _ClassVar[int]
    START_CLAIM_FIELD_NUMBER: _ClassVar[int]
    outcome: StartOutcome
    instance: _common_pb2.Instance
    latest_checkpoint: _common_pb2.Checkpoint
    current_version: int
    version_mismatch: bool
    bound_version: _version_pb2.Version
    start_item_json: bytes
    event: _common_pb2.Event
    wait_outcome: ResumeReason
    start_claim: _idempotency_pb2.ClaimResult
    def __init__(self, outcome: _Optional[_Union[StartOutcome, str]] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., current_version: _Optional[int] = ..., version_mismatch: _Optional[bool] = ..., bound_version: _Optional[_Union[_version_pb2.Version, _Mapping]] = ..., start_item_json: _Optional[bytes] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ..., wait_outcome: _Optional[_Union[ResumeReason, str]] = ..., start_claim: _Optional[_Union[_idempotency_pb2.ClaimResult, _Mapping]] = ...) -> None: ...

class GetInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ...) -> None: ...

class GetInstanceResponse(_message.Message):
    __slots__ = ("instance", "latest_checkpoint", "lease_holder")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    LEASE_HOLDER_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    latest_checkpoint: _common_pb2.Checkpoint
    lease_holder: _session_pb2.Session
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., lease_holder: _Optional[_Union[_session_pb2.Session, _Mapping]] = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = ("workflow_id", "statuses", "bound_version", "stalled_only", "page_size", "page_token", "instance_key_prefix", "last_step", "created_after", "created_before", "search_fields", "sort_by_field", "sort_descending", "error_contains")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    BOUND_VERSION_FIELD_NUMBER: _ClassVar[int]
    STALLED_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_PREFIX_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_FIELD_NUMBER: _ClassVar[int]
    SORT_BY_FIELD_FIELD_NUMBER: _ClassVar[int]
    SORT_DESCENDING_FIELD_NUMBER: _ClassVar[int]
    ERROR_CONTAINS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.InstanceStatus]
    bound_version: int
    stalled_only: bool
    page_size: int
    page_token: str
    instance_key_prefix: str
    last_step: str
    created_after: _timestamp_pb2.Timestamp
    created_before: _timestamp_pb2.Timestamp
    search_fields: _containers.RepeatedCompositeFieldContainer[_common_pb2.SearchFieldFilter]
    sort_by_field: str
    sort_descending: bool
    error_contains: str
    def __init__(self, workflow_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.InstanceStatus, str]]] = ..., bound_version: _Optional[int] = ..., stalled_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., instance_key_prefix: _Optional[str] = ..., last_step: _Optional[str] = ..., created_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., created_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., search_fields: _Optional[_Iterable[_Union[_common_pb2.SearchFieldFilter, _Mapping]]] = ..., sort_by_field: _Optional[str] = ..., sort_descending: _Optional[bool] = ..., error_contains: _Optional[str] = ...) -> None: ...

class ListInstancesResponse(_message.Message):
    __slots__ = ("instances", "next_page_token")
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[_common_pb2.Instance]
    next_page_token: str
    def __init__(self, instances: _Optional[_Iterable[_Union[_common_pb2.Instance, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SetSearchFieldsRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "fields_json")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    FIELDS_JSON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    fields_json: bytes
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., fields_json: _Optional[bytes] = ...) -> None: ...

class SetSearchFieldsResponse(_message.Message):
    __slots__ = ("fields_json",)
    FIELDS_JSON_FIELD_NUMBER: _ClassVar[int]
    fields_json: bytes
    def __init__(self, fields_json: _Optional[bytes] = ...) -> None: ...

class CompleteInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "result_json")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    result_json: bytes
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., result_json: _Optional[bytes] = ...) -> None: ...

class CompleteInstanceResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class FailInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "error_message", "retry", "suspend")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    error_message: str
    retry: bool
    suspend: bool
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., error_message: _Optional[str] = ..., retry: _Optional[bool] = ..., suspend: _Optional[bool] = ...) -> None: ...

class FailInstanceResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class CancelInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "actor", "reason")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    actor: str
    reason: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelInstanceResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class ScheduleWakeUpRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "wake_at", "delay_seconds")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    WAKE_AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_SECONDS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    wake_at: _timestamp_pb2.Timestamp
    delay_seconds: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., wake_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay_seconds: _Optional[int] = ...) -> None: ...

class ScheduleWakeUpResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class ResumableInstance(_message.Message):
    __slots__ = ("instance", "reason", "claim_token", "latest_checkpoint", "event")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CLAIM_TOKEN_FIELD_NUMBER: _ClassVar[int]
    LATEST_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    reason: ResumeReason
    claim_token: str
    latest_checkpoint: _common_pb2.Checkpoint
    event: _common_pb2.Event
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., reason: _Optional[_Union[ResumeReason, str]] = ..., claim_token: _Optional[str] = ..., latest_checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ...) -> None: ...

class ClaimResumableRequest(_message.Message):
    __slots__ = ("workflow_ids", "claimant", "max_instances", "lease_seconds")
    WORKFLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    CLAIMANT_FIELD_NUMBER: _ClassVar[int]
    MAX_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    workflow_ids: _containers.RepeatedScalarFieldContainer[str]
    claimant: str
    max_instances: int
    lease_seconds: int
    def __init__(self, workflow_ids: _Optional[_Iterable[str]] = ..., claimant: _Optional[str] = ..., max_instances: _Optional[int] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class ClaimResumableResponse(_message.Message):
    __slots__ = ("instances",)
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[ResumableInstance]
    def __init__(self, instances: _Optional[_Iterable[_Union[ResumableInstance, _Mapping]]] = ...) -> None: ...

class WatchResumableRequest(_message.Message):
    __slots__ = ("workflow_ids", "claimant", "max_instances", "lease_seconds", "poll_interval_ms")
    WORKFLOW_IDS_FIELD_NUMBER: _ClassVar[int]
    CLAIMANT_FIELD_NUMBER: _ClassVar[int]
    MAX_INSTANCES_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    POLL_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    workflow_ids: _containers.RepeatedScalarFieldContainer[str]
    claimant: str
    max_instances: int
    lease_seconds: int
    poll_interval_ms: int
    def __init__(self, workflow_ids: _Optional[_Iterable[str]] = ..., claimant: _Optional[str] = ..., max_instances: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., poll_interval_ms: _Optional[int] = ...) -> None: ...

class WatchResumableResponse(_message.Message):
    __slots__ = ("instances",)
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[ResumableInstance]
    def __init__(self, instances: _Optional[_Iterable[_Union[ResumableInstance, _Mapping]]] = ...) -> None: ...
