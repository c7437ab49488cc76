"""FileService servicer: files by content hash, streamed both ways (services/files.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from durable.v1 import files_pb2, files_pb2_grpc

from ..domain import InstanceRef
from ..errors import InvalidArgument
from ..services.files import FileService
from . import convert
from .auth import Authenticator
from .rpc import client_stream, server_stream, unary


async def _chunks(requests: AsyncIterator[files_pb2.UploadFileRequest]) -> AsyncIterator[bytes]:
    async for request in requests:
        if request.WhichOneof("part") != "chunk":
            raise InvalidArgument("only the first message of an upload is its header; the others carry chunks")
        yield request.chunk


class FileServicer(files_pb2_grpc.FileServiceServicer):
    def __init__(self, service: FileService, auth: Authenticator, *, max_batch_items: int) -> None:
        self.service = service
        self.auth = auth
        self.max_batch_items = max_batch_items

    @unary("StatFiles")
    async def StatFiles(self, request: files_pb2.StatFilesRequest, ns: str) -> files_pb2.StatFilesResponse:  # noqa: N802
        return files_pb2.StatFilesResponse(present=await self.service.stat(ns, list(request.sha256)))

    @client_stream("UploadFile")
    async def UploadFile(self, requests: AsyncIterator[files_pb2.UploadFileRequest], ns: str) -> files_pb2.UploadFileResponse:  # noqa: N802
        first = None
        async for request in requests:
            first = request
            break
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidArgument("the first message of an upload is its header (sha256, size_bytes)")
        header = first.header
        stored = await self.service.upload(ns, header.sha256, header.size_bytes, _chunks(requests))
        return files_pb2.UploadFileResponse(sha256=header.sha256, size_bytes=header.size_bytes, stored=stored)

    @server_stream("DownloadFile", watch=False)
    async def DownloadFile(self, request: files_pb2.DownloadFileRequest, ns: str) -> AsyncIterator[files_pb2.DownloadFileResponse]:  # noqa: N802
        first = True
        async for chunk, size in self.service.download(ns, request.sha256):
            yield files_pb2.DownloadFileResponse(chunk=chunk, size_bytes=size if first else 0)
            first = False

    @unary("ListCheckpointFiles")
    async def ListCheckpointFiles(self, request: files_pb2.ListCheckpointFilesRequest, ns: str) -> files_pb2.ListCheckpointFilesResponse:  # noqa: N802
        sequence, files = await self.service.checkpoint_files(
            InstanceRef(ns, request.workflow_id, request.instance_key), request.sequence)
        return files_pb2.ListCheckpointFilesResponse(sequence=sequence, files=convert.file_refs_pb(files))

    @unary("ListKeyFiles")
    async def ListKeyFiles(self, request: files_pb2.ListKeyFilesRequest, ns: str) -> files_pb2.ListKeyFilesResponse:  # noqa: N802
        keys = [(k.scope, k.key) for k in request.keys]
        found = await self.service.key_files(ns, keys, self.max_batch_items)
        return files_pb2.ListKeyFilesResponse(keys=[
            files_pb2.KeyFiles(scope=scope, key=key, files=convert.file_refs_pb(files))
            for (scope, key), files in zip(keys, found, strict=True)])
