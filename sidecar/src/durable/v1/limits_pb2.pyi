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

class LimitKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIMIT_KIND_UNSPECIFIED: _ClassVar[LimitKind]
    LIMIT_KIND_CONCURRENCY: _ClassVar[LimitKind]
    LIMIT_KIND_RATE: _ClassVar[LimitKind]
    LIMIT_KIND_DEBOUNCE: _ClassVar[LimitKind]

class OverLimit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVER_LIMIT_UNSPECIFIED: _ClassVar[OverLimit]
    OVER_LIMIT_WAIT: _ClassVar[OverLimit]
    OVER_LIMIT_REFUSE: _ClassVar[OverLimit]

class AcquireOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACQUIRE_OUTCOME_UNSPECIFIED: _ClassVar[AcquireOutcome]
    ACQUIRE_OUTCOME_ACQUIRED: _ClassVar[AcquireOutcome]
    ACQUIRE_OUTCOME_WAITING: _ClassVar[AcquireOutcome]
    ACQUIRE_OUTCOME_BUSY: _ClassVar[AcquireOutcome]

class ThrottleOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THROTTLE_OUTCOME_UNSPECIFIED: _ClassVar[ThrottleOutcome]
    THROTTLE_OUTCOME_ALLOWED: _ClassVar[ThrottleOutcome]
    THROTTLE_OUTCOME_WAITING: _ClassVar[ThrottleOutcome]
    THROTTLE_OUTCOME_BUSY: _ClassVar[ThrottleOutcome]

class DebounceKeep(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEBOUNCE_KEEP_UNSPECIFIED: _ClassVar[DebounceKeep]
    DEBOUNCE_KEEP_LAST: _ClassVar[DebounceKeep]
    DEBOUNCE_KEEP_FIRST: _ClassVar[DebounceKeep]

class DebounceOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEBOUNCE_OUTCOME_UNSPECIFIED: _ClassVar[DebounceOutcome]
    DEBOUNCE_OUTCOME_WAITING: _ClassVar[DebounceOutcome]
    DEBOUNCE_OUTCOME_RUN: _ClassVar[DebounceOutcome]
    DEBOUNCE_OUTCOME_DEBOUNCED: _ClassVar[DebounceOutcome]
LIMIT_KIND_UNSPECIFIED: LimitKind
LIMIT_KIND_CONCURRENCY: LimitKind
LIMIT_KIND_RATE: LimitKind
LIMIT_KIND_DEBOUNCE: LimitKind
OVER_LIMIT_UNSPECIFIED: OverLimit
OVER_LIMIT_WAIT: OverLimit
OVER_LIMIT_REFUSE: OverLimit
ACQUIRE_OUTCOME_UNSPECIFIED: AcquireOutcome
ACQUIRE_OUTCOME_ACQUIRED: AcquireOutcome
ACQUIRE_OUTCOME_WAITING: AcquireOutcome
ACQUIRE_OUTCOME_BUSY: AcquireOutcome
THROTTLE_OUTCOME_UNSPECIFIED: ThrottleOutcome
THROTTLE_OUTCOME_ALLOWED: ThrottleOutcome
THROTTLE_OUTCOME_WAITING: ThrottleOutcome
THROTTLE_OUTCOME_BUSY: ThrottleOutcome
DEBOUNCE_KEEP_UNSPECIFIED: DebounceKeep
DEBOUNCE_KEEP_LAST: DebounceKeep
DEBOUNCE_KEEP_FIRST: DebounceKeep
DEBOUNCE_OUTCOME_UNSPECIFIED: DebounceOutcome
DEBOUNCE_OUTCOME_WAITING: DebounceOutcome
DEBOUNCE_OUTCOME_RUN: DebounceOutcome
DEBOUNCE_OUTCOME_DEBOUNCED: DebounceOutcome

class AcquireSlotRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "limit_name", "limit_key", "max_holders", "over_limit", "max_wait_ms", "rate")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_HOLDERS_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    limit_name: str
    limit_key: str
    max_holders: int
    over_limit: OverLimit
    max_wait_ms: int
    rate: SectionRate
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., limit_name: _Optional[str] = ..., limit_key: _Optional[str] = ..., max_holders: _Optional[int] = ..., over_limit: _Optional[_Union[OverLimit, str]] = ..., max_wait_ms: _Optional[int] = ..., rate: _Optional[_Union[SectionRate, _Mapping]] = ...) -> None: ...

class SectionRate(_message.Message):
    __slots__ = ("limit", "period_ms", "burst", "calls")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    limit: int
    period_ms: int
    burst: int
    calls: int
    def __init__(self, limit: _Optional[int] = ..., period_ms: _Optional[int] = ..., burst: _Optional[int] = ..., calls: _Optional[int] = ...) -> None: ...

class AcquireSlotResponse(_message.Message):
    __slots__ = ("outcome", "holders", "waiters", "position", "instance", "wait_ms", "slot_at")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SLOT_AT_FIELD_NUMBER: _ClassVar[int]
    outcome: AcquireOutcome
    holders: int
    waiters: int
    position: int
    instance: _common_pb2.Instance
    wait_ms: int
    slot_at: _timestamp_pb2.Timestamp
    def __init__(self, outcome: _Optional[_Union[AcquireOutcome, str]] = ..., holders: _Optional[int] = ..., waiters: _Optional[int] = ..., position: _Optional[int] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., wait_ms: _Optional[int] = ..., slot_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReleaseSlotRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "limit_name", "limit_key")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    limit_name: str
    limit_key: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., limit_name: _Optional[str] = ..., limit_key: _Optional[str] = ...) -> None: ...

class ReleaseSlotResponse(_message.Message):
    __slots__ = ("released", "granted", "holders", "waiters")
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    released: bool
    granted: int
    holders: int
    waiters: int
    def __init__(self, released: _Optional[bool] = ..., granted: _Optional[int] = ..., holders: _Optional[int] = ..., waiters: _Optional[int] = ...) -> None: ...

class ThrottleRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "limit_name", "limit_key", "limit", "period_ms", "burst", "max_wait_ms", "over_limit", "calls")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    OVER_LIMIT_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    limit_name: str
    limit_key: str
    limit: int
    period_ms: int
    burst: int
    max_wait_ms: int
    over_limit: OverLimit
    calls: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., limit_name: _Optional[str] = ..., limit_key: _Optional[str] = ..., limit: _Optional[int] = ..., period_ms: _Optional[int] = ..., burst: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., over_limit: _Optional[_Union[OverLimit, str]] = ..., calls: _Optional[int] = ...) -> None: ...

class ThrottleResponse(_message.Message):
    __slots__ = ("outcome", "wait_ms", "slot_at", "instance")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SLOT_AT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    outcome: ThrottleOutcome
    wait_ms: int
    slot_at: _timestamp_pb2.Timestamp
    instance: _common_pb2.Instance
    def __init__(self, outcome: _Optional[_Union[ThrottleOutcome, str]] = ..., wait_ms: _Optional[int] = ..., slot_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class DebounceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "limit_name", "limit_key", "quiet_ms", "max_wait_ms", "keep")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    QUIET_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    limit_name: str
    limit_key: str
    quiet_ms: int
    max_wait_ms: int
    keep: DebounceKeep
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., limit_name: _Optional[str] = ..., limit_key: _Optional[str] = ..., quiet_ms: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., keep: _Optional[_Union[DebounceKeep, str]] = ...) -> None: ...

class DebounceResponse(_message.Message):
    __slots__ = ("outcome", "decide_at", "instance")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DECIDE_AT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    outcome: DebounceOutcome
    decide_at: _timestamp_pb2.Timestamp
    instance: _common_pb2.Instance
    def __init__(self, outcome: _Optional[_Union[DebounceOutcome, str]] = ..., decide_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class ListLimitKeysRequest(_message.Message):
    __slots__ = ("kind", "limit_name", "page_size", "page_token")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    kind: LimitKind
    limit_name: str
    page_size: int
    page_token: str
    def __init__(self, kind: _Optional[_Union[LimitKind, str]] = ..., limit_name: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class LimitEntry(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "state", "owner", "since", "at")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    state: str
    owner: str
    since: _timestamp_pb2.Timestamp
    at: _timestamp_pb2.Timestamp
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., state: _Optional[str] = ..., owner: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class LimitKeyState(_message.Message):
    __slots__ = ("kind", "limit_name", "limit_key", "holders", "waiters", "next_at", "entries", "updated_at")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    NEXT_AT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    kind: LimitKind
    limit_name: str
    limit_key: str
    holders: int
    waiters: int
    next_at: _timestamp_pb2.Timestamp
    entries: _containers.RepeatedCompositeFieldContainer[LimitEntry]
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[_Union[LimitKind, str]] = ..., limit_name: _Optional[str] = ..., limit_key: _Optional[str] = ..., holders: _Optional[int] = ..., waiters: _Optional[int] = ..., next_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[LimitEntry, _Mapping]]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListLimitKeysResponse(_message.Message):
    __slots__ = ("keys", "next_page_token")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[LimitKeyState]
    next_page_token: str
    def __init__(self, keys: _Optional[_Iterable[_Union[LimitKeyState, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
