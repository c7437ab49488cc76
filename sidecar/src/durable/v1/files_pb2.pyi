from durable.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StatFilesRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sha256: _Optional[_Iterable[str]] = ...) -> None: ...

class StatFilesResponse(_message.Message):
    __slots__ = ("present",)
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    present: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, present: _Optional[_Iterable[str]] = ...) -> None: ...

class UploadFileHeader(_message.Message):
    __slots__ = ("sha256", "size_bytes")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class UploadFileRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadFileHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadFileHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadFileResponse(_message.Message):
    __slots__ = ("sha256", "size_bytes", "stored")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    size_bytes: int
    stored: bool
    def __init__(self, sha256: _Optional[str] = ..., size_bytes: _Optional[int] = ..., stored: _Optional[bool] = ...) -> None: ...

class DownloadFileRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class DownloadFileResponse(_message.Message):
    __slots__ = ("chunk", "size_bytes")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    size_bytes: int
    def __init__(self, chunk: _Optional[bytes] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ListCheckpointFilesRequest(_message.Message):
    __slots__ = ("workflow_id", "instance_key", "sequence")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_KEY_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    instance_key: str
    sequence: int
    def __init__(self, workflow_id: _Optional[str] = ..., instance_key: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class ListCheckpointFilesResponse(_message.Message):
    __slots__ = ("sequence", "files")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.FileRef]
    def __init__(self, sequence: _Optional[int] = ..., files: _Optional[_Iterable[_Union[_common_pb2.FileRef, _Mapping]]] = ...) -> None: ...

class KeyName(_message.Message):
    __slots__ = ("scope", "key")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class ListKeyFilesRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyName]
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyName, _Mapping]]] = ...) -> None: ...

class KeyFiles(_message.Message):
    __slots__ = ("scope", "key", "files")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    scope: str
    key: str
    files: _containers.RepeatedCompositeFieldContainer[_common_pb2.FileRef]
    def __init__(self, scope: _Optional[str] = ..., key: _Optional[str] = ..., files: _Optional[_Iterable[_Union[_common_pb2.FileRef, _Mapping]]] = ...) -> None: ...

class ListKeyFilesResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[KeyFiles]
    def __init__(self, keys: _Optional[_Iterable[_Union[KeyFiles, _Mapping]]] = ...) -> None: ...
