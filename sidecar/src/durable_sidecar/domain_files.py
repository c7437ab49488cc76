"""Files (n8n binary data) as the services and stores trade them: a content by its hash, and the references
checkpoints and completed keys hold to it (proto/durable/v1/files.proto)."""

from __future__ import annotations

from dataclasses import dataclass

# The size of a stored chunk, and the largest chunk an upload may send.
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileRef:
    """One binary property of an item: which content (sha256, size_bytes) under which name and type."""

    property: str
    file_name: str
    mime_type: str
    sha256: str
    size_bytes: int


@dataclass(frozen=True)
class FileLimits:
    """What the sidecar accepts (settings DURABLE_MAX_FILE_BYTES and the rest; docs/configuration.md)."""

    max_file_bytes: int
    max_checkpoint_file_bytes: int
    max_checkpoint_files: int
    max_namespace_file_bytes: int
