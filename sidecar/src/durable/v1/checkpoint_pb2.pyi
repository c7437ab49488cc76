from durable.v1 import common_pb2 as _common_pb2
from durable.v1 import idempotency_pb2 as _idempotency_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StateMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_MODE_UNSPECIFIED: _ClassVar[StateMode]
    STATE_MODE_REPLACE: _ClassVar[StateMode]
    STATE_MODE_ADD_STEP_RESULT: _ClassVar[StateMode]
STATE_MODE_UNSPECIFIED: StateMode
STATE_MODE_REPLACE: StateMode
STATE_MODE_ADD_STEP_RESULT: StateMode

class SaveCheckpointItem(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "step_name", "state_json", "execution_id", "node_name", "expected_sequence", "lease_seconds", "state_mode", "complete_key", "complete_instance", "claim_next", "search_fields_json", "files")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    STEP_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STATE_MODE_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_KEY_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NEXT_FIELD_NUMBER: _ClassVar[int]
    SEARCH_FIELDS_JSON_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    step_name: str
    state_json: bytes
    execution_id: str
    node_name: str
    expected_sequence: int
    lease_seconds: int
    state_mode: StateMode
    complete_key: KeyCompletion
    complete_instance: bool
    claim_next: _idempotency_pb2.ClaimItem
    search_fields_json: bytes
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.FileRef]
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., step_name: _Optional[str] = ..., state_json: _Optional[bytes] = ..., execution_id: _Optional[str] = ..., node_name: _Optional[str] = ..., expected_sequence: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., state_mode: _Optional[_Union[StateMode, str]] = ..., complete_key: _Optional[_Union[KeyCompletion, _Mapping]] = ..., complete_instance: _Optional[bool] = ..., claim_next: _Optional[_Union[_idempotency_pb2.ClaimItem, _Mapping]] = ..., search_fields_json: _Optional[bytes] = ..., files: _Optional[_Iterable[_Union[_common_pb2.FileRef, _Mapping]]] = ...) -> None: ...

class KeyCompletion(_message.Message):
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

class SaveCheckpointsRequest(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[SaveCheckpointItem]
    def __init__(self, items: _Optional[_Iterable[_Union[SaveCheckpointItem, _Mapping]]] = ...) -> None: ...

class SaveCheckpointResult(_message.Message):
    __slots__ = ("checkpoint", "deduplicated", "state_json", "completed_key", "completed_instance", "next_claim")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_KEY_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    NEXT_CLAIM_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _common_pb2.Checkpoint
    deduplicated: bool
    state_json: bytes
    completed_key: _idempotency_pb2.IdempotencyKey
    completed_instance: _common_pb2.Instance
    next_claim: _idempotency_pb2.ClaimResult
    def __init__(self, checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ..., deduplicated: _Optional[bool] = ..., state_json: _Optional[bytes] = ..., completed_key: _Optional[_Union[_idempotency_pb2.IdempotencyKey, _Mapping]] = ..., completed_instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., next_claim: _Optional[_Union[_idempotency_pb2.ClaimResult, _Mapping]] = ...) -> None: ...

class SaveCheckpointsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SaveCheckpointResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SaveCheckpointResult, _Mapping]]] = ...) -> None: ...

class GetLatestCheckpointRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "include_state")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    include_state: bool
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., include_state: _Optional[bool] = ...) -> None: ...

class GetLatestCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _common_pb2.Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class GetCheckpointRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "sequence", "include_state")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    sequence: int
    include_state: bool
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., sequence: _Optional[int] = ..., include_state: _Optional[bool] = ...) -> None: ...

class GetCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint",)
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _common_pb2.Checkpoint
    def __init__(self, checkpoint: _Optional[_Union[_common_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "page_size", "page_token", "include_state")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STATE_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    page_size: int
    page_token: str
    include_state: bool
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_state: _Optional[bool] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints", "next_page_token")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_common_pb2.Checkpoint]
    next_page_token: str
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_common_pb2.Checkpoint, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PruneCheckpointsRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "keep_last", "older_than_seconds", "dry_run")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    KEEP_LAST_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    keep_last: int
    older_than_seconds: int
    dry_run: bool
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., keep_last: _Optional[int] = ..., older_than_seconds: _Optional[int] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class PruneCheckpointsResponse(_message.Message):
    __slots__ = ("deleted_count", "instance_count")
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_COUNT_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    instance_count: int
    def __init__(self, deleted_count: _Optional[int] = ..., instance_count: _Optional[int] = ...) -> None: ...
