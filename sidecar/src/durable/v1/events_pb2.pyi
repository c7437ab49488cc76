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

class AwaitOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AWAIT_OUTCOME_UNSPECIFIED: _ClassVar[AwaitOutcome]
    AWAIT_OUTCOME_WAITING: _ClassVar[AwaitOutcome]
    AWAIT_OUTCOME_RECEIVED: _ClassVar[AwaitOutcome]

class SignalOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIGNAL_OUTCOME_UNSPECIFIED: _ClassVar[SignalOutcome]
    SIGNAL_OUTCOME_DELIVERED: _ClassVar[SignalOutcome]
    SIGNAL_OUTCOME_STORED: _ClassVar[SignalOutcome]
    SIGNAL_OUTCOME_DUPLICATE: _ClassVar[SignalOutcome]
    SIGNAL_OUTCOME_STARTED: _ClassVar[SignalOutcome]
AWAIT_OUTCOME_UNSPECIFIED: AwaitOutcome
AWAIT_OUTCOME_WAITING: AwaitOutcome
AWAIT_OUTCOME_RECEIVED: AwaitOutcome
SIGNAL_OUTCOME_UNSPECIFIED: SignalOutcome
SIGNAL_OUTCOME_DELIVERED: SignalOutcome
SIGNAL_OUTCOME_STORED: SignalOutcome
SIGNAL_OUTCOME_DUPLICATE: SignalOutcome
SIGNAL_OUTCOME_STARTED: SignalOutcome

class AwaitEventRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "execution_id", "event_name", "deadline", "timeout_seconds")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    execution_id: str
    event_name: str
    deadline: _timestamp_pb2.Timestamp
    timeout_seconds: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., execution_id: _Optional[str] = ..., event_name: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class AwaitEventResponse(_message.Message):
    __slots__ = ("outcome", "instance", "event")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    outcome: AwaitOutcome
    instance: _common_pb2.Instance
    event: _common_pb2.Event
    def __init__(self, outcome: _Optional[_Union[AwaitOutcome, str]] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ...) -> None: ...

class SignalInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "event_name", "payload_json", "dedupe_id", "sender", "start_if_absent", "start_item_json")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    EVENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    DEDUPE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    START_IF_ABSENT_FIELD_NUMBER: _ClassVar[int]
    START_ITEM_JSON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    event_name: str
    payload_json: bytes
    dedupe_id: str
    sender: str
    start_if_absent: bool
    start_item_json: bytes
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., event_name: _Optional[str] = ..., payload_json: _Optional[bytes] = ..., dedupe_id: _Optional[str] = ..., sender: _Optional[str] = ..., start_if_absent: _Optional[bool] = ..., start_item_json: _Optional[bytes] = ...) -> None: ...

class SignalInstanceResponse(_message.Message):
    __slots__ = ("outcome", "event", "instance")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    outcome: SignalOutcome
    event: _common_pb2.Event
    instance: _common_pb2.Instance
    def __init__(self, outcome: _Optional[_Union[SignalOutcome, str]] = ..., event: _Optional[_Union[_common_pb2.Event, _Mapping]] = ..., instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class ListEventsRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "pending_only", "page_size", "page_token")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    PENDING_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    pending_only: bool
    page_size: int
    page_token: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., pending_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListEventsResponse(_message.Message):
    __slots__ = ("events", "next_page_token")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_common_pb2.Event]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[_common_pb2.Event, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RetryInstanceRequest(_message.Message):
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

class RetryInstanceResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class ResumeInstanceRequest(_message.Message):
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

class ResumeInstanceResponse(_message.Message):
    __slots__ = ("instance",)
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ...) -> None: ...

class PurgeInstanceRequest(_message.Message):
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

class ReplayInstanceRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "from_sequence", "to_version", "actor", "reason")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TO_VERSION_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    from_sequence: int
    to_version: int
    actor: str
    reason: str
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., from_sequence: _Optional[int] = ..., to_version: _Optional[int] = ..., actor: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReplayInstanceResponse(_message.Message):
    __slots__ = ("instance", "checkpoints_copied")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_COPIED_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    checkpoints_copied: int
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., checkpoints_copied: _Optional[int] = ...) -> None: ...

class PurgeInstanceResponse(_message.Message):
    __slots__ = ("instance", "checkpoints_erased", "start_item_erased", "event_payloads_erased")
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_ERASED_FIELD_NUMBER: _ClassVar[int]
    START_ITEM_ERASED_FIELD_NUMBER: _ClassVar[int]
    EVENT_PAYLOADS_ERASED_FIELD_NUMBER: _ClassVar[int]
    instance: _common_pb2.Instance
    checkpoints_erased: int
    start_item_erased: bool
    event_payloads_erased: int
    def __init__(self, instance: _Optional[_Union[_common_pb2.Instance, _Mapping]] = ..., checkpoints_erased: _Optional[int] = ..., start_item_erased: _Optional[bool] = ..., event_payloads_erased: _Optional[int] = ...) -> None: ...
