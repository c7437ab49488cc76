from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CallRequest(_message.Message):
    __slots__ = ("id", "method", "request", "session", "timeout_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    method: str
    request: bytes
    session: str
    timeout_ms: int
    def __init__(self, id: _Optional[int] = ..., method: _Optional[str] = ..., request: _Optional[bytes] = ..., session: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("id", "code", "response", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: int
    code: int
    response: bytes
    message: str
    def __init__(self, id: _Optional[int] = ..., code: _Optional[int] = ..., response: _Optional[bytes] = ..., message: _Optional[str] = ...) -> None: ...
