-- Issue 45: files (n8n binary data) checkpointed with the state. The embedded
-- twin of postgres/0018_files.sql.
CREATE TABLE durable_files (
    namespace    TEXT    NOT NULL,
    sha256       TEXT    NOT NULL CHECK (length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'),
    size_bytes   INTEGER NOT NULL CHECK (size_bytes >= 0),
    chunk_count  INTEGER NOT NULL CHECK (chunk_count >= 0),
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (namespace, sha256)
) STRICT;

CREATE TABLE durable_file_chunks (
    namespace    TEXT    NOT NULL,
    sha256       TEXT    NOT NULL,
    chunk_index  INTEGER NOT NULL CHECK (chunk_index >= 0),
    data         BLOB    NOT NULL,
    PRIMARY KEY (namespace, sha256, chunk_index),
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256) ON DELETE CASCADE
) STRICT;

CREATE TABLE durable_checkpoint_files (
    namespace     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    instance_key  TEXT    NOT NULL,
    sequence      INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    property      TEXT    NOT NULL,
    file_name     TEXT    NOT NULL,
    mime_type     TEXT    NOT NULL,
    sha256        TEXT    NOT NULL,
    size_bytes    INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id, instance_key, sequence, position),
    FOREIGN KEY (namespace, workflow_id, instance_key, sequence)
        REFERENCES durable_checkpoints (namespace, workflow_id, instance_key, sequence) ON DELETE CASCADE,
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256)
) STRICT;

CREATE INDEX durable_checkpoint_files_content ON durable_checkpoint_files (namespace, sha256);

CREATE TABLE durable_key_files (
    namespace     TEXT    NOT NULL,
    scope         TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    position      INTEGER NOT NULL,
    property      TEXT    NOT NULL,
    file_name     TEXT    NOT NULL,
    mime_type     TEXT    NOT NULL,
    sha256        TEXT    NOT NULL,
    size_bytes    INTEGER NOT NULL,
    PRIMARY KEY (namespace, scope, key, position),
    FOREIGN KEY (namespace, scope, key)
        REFERENCES durable_idempotency_keys (namespace, scope, key) ON DELETE CASCADE,
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256)
) STRICT;

CREATE INDEX durable_key_files_content ON durable_key_files (namespace, sha256);

ALTER TABLE durable_checkpoints ADD COLUMN file_count INTEGER NOT NULL DEFAULT 0;
