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

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_VERSION_REGISTERED: _ClassVar[ChangeKind]
    CHANGE_KIND_INSTANCE_MOVED: _ClassVar[ChangeKind]
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_VERSION_REGISTERED: ChangeKind
CHANGE_KIND_INSTANCE_MOVED: ChangeKind

class Version(_message.Message):
    __slots__ = ("workflow_id", "version", "content_hash", "n8n_version_id", "label", "note", "definition_json", "created_at", "node_names")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    N8N_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    NODE_NAMES_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    version: int
    content_hash: str
    n8n_version_id: str
    label: str
    note: str
    definition_json: bytes
    created_at: _timestamp_pb2.Timestamp
    node_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, workflow_id: _Optional[str] = ..., version: _Optional[int] = ..., content_hash: _Optional[str] = ..., n8n_version_id: _Optional[str] = ..., label: _Optional[str] = ..., note: _Optional[str] = ..., definition_json: _Optional[bytes] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., node_names: _Optional[_Iterable[str]] = ...) -> None: ...

class RegisterVersionRequest(_message.Message):
    __slots__ = ("workflow_id", "definition_json", "n8n_version_id", "label", "note", "actor")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_JSON_FIELD_NUMBER: _ClassVar[int]
    N8N_VERSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    definition_json: bytes
    n8n_version_id: str
    label: str
    note: str
    actor: str
    def __init__(self, workflow_id: _Optional[str] = ..., definition_json: _Optional[bytes] = ..., n8n_version_id: _Optional[str] = ..., label: _Optional[str] = ..., note: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class RegisterVersionResponse(_message.Message):
    __slots__ = ("version", "created")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    version: Version
    created: bool
    def __init__(self, version: _Optional[_Union[Version, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class SyncVersionFromN8nRequest(_message.Message):
    __slots__ = ("workflow_id", "actor")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    actor: str
    def __init__(self, workflow_id: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class SyncVersionFromN8nResponse(_message.Message):
    __slots__ = ("version", "created")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    version: Version
    created: bool
    def __init__(self, version: _Optional[_Union[Version, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetVersionRequest(_message.Message):
    __slots__ = ("workflow_id", "version")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    version: int
    def __init__(self, workflow_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class GetVersionResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: Version
    def __init__(self, version: _Optional[_Union[Version, _Mapping]] = ...) -> None: ...

class ListVersionsRequest(_message.Message):
    __slots__ = ("workflow_id", "page_size", "page_token")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    page_size: int
    page_token: str
    def __init__(self, workflow_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListVersionsResponse(_message.Message):
    __slots__ = ("versions", "next_page_token")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[Version]
    next_page_token: str
    def __init__(self, versions: _Optional[_Iterable[_Union[Version, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class InstanceSelector(_message.Message):
    __slots__ = ("workflow_id", "instance_keys", "statuses", "from_version")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEYS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_keys: _containers.RepeatedScalarFieldContainer[str]
    statuses: _containers.RepeatedScalarFieldContainer[_common_pb2.InstanceStatus]
    from_version: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_keys: _Optional[_Iterable[str]] = ..., statuses: _Optional[_Iterable[_Union[_common_pb2.InstanceStatus, str]]] = ..., from_version: _Optional[int] = ...) -> None: ...

class MoveInstancesRequest(_message.Message):
    __slots__ = ("selector", "to_version", "dry_run", "reason", "actor")
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    selector: InstanceSelector
    to_version: int
    dry_run: bool
    reason: str
    actor: str
    def __init__(self, selector: _Optional[_Union[InstanceSelector, _Mapping]] = ..., to_version: _Optional[int] = ..., dry_run: _Optional[bool] = ..., reason: _Optional[str] = ..., actor: _Optional[str] = ...) -> None: ...

class InstanceMove(_message.Message):
    __slots__ = ("instance_key", "from_version", "to_version", "last_step", "last_step_missing_in_target")
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_STEP_MISSING_IN_TARGET_FIELD_NUMBER: _ClassVar[int]
    instance_key: str
    from_version: int
    to_version: int
    last_step: str
    last_step_missing_in_target: bool
    def __init__(self, instance_key: _Optional[str] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., last_step: _Optional[str] = ..., last_step_missing_in_target: _Optional[bool] = ...) -> None: ...

class MoveInstancesResponse(_message.Message):
    __slots__ = ("moves", "dry_run")
    MOVES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    moves: _containers.RepeatedCompositeFieldContainer[InstanceMove]
    dry_run: bool
    def __init__(self, moves: _Optional[_Iterable[_Union[InstanceMove, _Mapping]]] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class ChangeLogEntry(_message.Message):
    __slots__ = ("id", "kind", "workflow_id", "instance_key", "from_version", "to_version", "actor", "reason", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    FROM_VERSION_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    kind: ChangeKind
    workflow_id: str
    instance_key: str
    from_version: int
    to_version: int
    actor: str
    reason: str
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., from_version: _Optional[int] = ..., to_version: _Optional[int] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListChangeLogRequest(_message.Message):
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

class ListChangeLogResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ChangeLogEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[ChangeLogEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
