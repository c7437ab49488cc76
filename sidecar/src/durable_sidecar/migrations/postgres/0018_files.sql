-- Issue 45: files (n8n binary data) checkpointed with the state.
--
-- durable_files holds each content once per namespace, by its SHA-256; its
-- bytes are durable_file_chunks in order (1 MiB each but the last). A file is
-- written in one transaction once its whole content arrived and matched its
-- hash, so an interrupted upload leaves nothing. durable_checkpoint_files and
-- durable_key_files say which files a checkpoint (a Save's binary properties)
-- and a completed idempotency key (the Claim's Done Before) carry; they go
-- with their checkpoint or key (ON DELETE CASCADE), and a file no row refers
-- to is pruned after a grace period (it may have been uploaded for a save not
-- yet made). A file that is referred to cannot be deleted (the foreign keys).
CREATE TABLE durable_files (
    namespace    text        NOT NULL,
    sha256       text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes   bigint      NOT NULL CHECK (size_bytes >= 0),
    chunk_count  integer     NOT NULL CHECK (chunk_count >= 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, sha256)
);

CREATE TABLE durable_file_chunks (
    namespace    text    NOT NULL,
    sha256       text    NOT NULL,
    chunk_index  integer NOT NULL CHECK (chunk_index >= 0),
    data         bytea   NOT NULL,
    PRIMARY KEY (namespace, sha256, chunk_index),
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256) ON DELETE CASCADE
);

-- Files are mostly compressed already (PDF, images): PostgreSQL does not try again.
ALTER TABLE durable_file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

CREATE TABLE durable_checkpoint_files (
    namespace     text    NOT NULL,
    workflow_id   text    NOT NULL,
    instance_key  text    NOT NULL,
    sequence      bigint  NOT NULL,
    position      integer NOT NULL,
    property      text    NOT NULL,
    file_name     text    NOT NULL,
    mime_type     text    NOT NULL,
    sha256        text    NOT NULL,
    size_bytes    bigint  NOT NULL,
    PRIMARY KEY (namespace, workflow_id, instance_key, sequence, position),
    FOREIGN KEY (namespace, workflow_id, instance_key, sequence)
        REFERENCES durable_checkpoints (namespace, workflow_id, instance_key, sequence) ON DELETE CASCADE,
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256)
);

CREATE INDEX durable_checkpoint_files_content ON durable_checkpoint_files (namespace, sha256);

CREATE TABLE durable_key_files (
    namespace     text    NOT NULL,
    scope         text    NOT NULL,
    key           text    NOT NULL,
    position      integer NOT NULL,
    property      text    NOT NULL,
    file_name     text    NOT NULL,
    mime_type     text    NOT NULL,
    sha256        text    NOT NULL,
    size_bytes    bigint  NOT NULL,
    PRIMARY KEY (namespace, scope, key, position),
    FOREIGN KEY (namespace, scope, key)
        REFERENCES durable_idempotency_keys (namespace, scope, key) ON DELETE CASCADE,
    FOREIGN KEY (namespace, sha256) REFERENCES durable_files (namespace, sha256)
);

CREATE INDEX durable_key_files_content ON durable_key_files (namespace, sha256);

-- How many files a checkpoint carries (0 for all others): a resume asks for them only then.
ALTER TABLE durable_checkpoints ADD COLUMN file_count integer NOT NULL DEFAULT 0;
