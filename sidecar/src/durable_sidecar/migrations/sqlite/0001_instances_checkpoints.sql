-- Instances, their append-only checkpoints and an audit trail of lifecycle events:
-- the embedded (SQLite) twin of postgres/0001_instances_checkpoints.sql, with
-- the same tables, columns, keys and checks.
--
-- SQLite dialect: STRICT tables; every time is INTEGER microseconds since the
-- Unix epoch (UTC), written by the one sidecar process that owns the file
-- (its clock is the database time); bytea is BLOB; bigserial is INTEGER
-- PRIMARY KEY AUTOINCREMENT.

CREATE TABLE durable_instances (
    namespace               TEXT    NOT NULL,
    workflow_id             TEXT    NOT NULL,
    instance_key            TEXT    NOT NULL,
    status                  TEXT    NOT NULL DEFAULT 'running'
                            CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    bound_version           INTEGER NOT NULL DEFAULT 0,
    version_label           TEXT    NOT NULL DEFAULT '',
    lease_owner             TEXT    NOT NULL DEFAULT '',
    lease_expires_at        INTEGER,
    wake_at                 INTEGER,
    last_sequence           INTEGER NOT NULL DEFAULT 0,
    last_step               TEXT    NOT NULL DEFAULT '',
    checkpoint_count        INTEGER NOT NULL DEFAULT 0,
    resume_count            INTEGER NOT NULL DEFAULT 0,
    error_message           TEXT    NOT NULL DEFAULT '',
    result_json             BLOB,
    created_by_execution_id TEXT    NOT NULL,
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL,
    finished_at             INTEGER,
    PRIMARY KEY (namespace, workflow_id, instance_key)
) STRICT;

-- Stalled instances: running, lease lapsed, no wake-up pending.
CREATE INDEX durable_instances_stalled
    ON durable_instances (namespace, lease_expires_at)
    WHERE status = 'running' AND wake_at IS NULL;

-- Due wake-ups.
CREATE INDEX durable_instances_wake
    ON durable_instances (namespace, wake_at)
    WHERE status = 'running' AND wake_at IS NOT NULL;

-- Listing newest first.
CREATE INDEX durable_instances_created
    ON durable_instances (namespace, created_at DESC, workflow_id DESC, instance_key DESC);

CREATE TABLE durable_checkpoints (
    namespace     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    instance_key  TEXT    NOT NULL,
    sequence      INTEGER NOT NULL CHECK (sequence > 0),
    step_name     TEXT    NOT NULL,
    -- 0: stored as sent; 1: zlib-compressed by the sidecar.
    encoding      INTEGER NOT NULL CHECK (encoding IN (0, 1)),
    state         BLOB    NOT NULL,
    sha256        TEXT    NOT NULL,
    size_bytes    INTEGER NOT NULL,
    stored_bytes  INTEGER NOT NULL,
    execution_id  TEXT    NOT NULL,
    node_name     TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id, instance_key, sequence),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
) STRICT;

CREATE TABLE durable_instance_events (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    instance_key  TEXT    NOT NULL,
    kind          TEXT    NOT NULL,
    actor         TEXT    NOT NULL DEFAULT '',
    detail        TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
) STRICT;

-- PostgreSQL's key is (namespace, workflow_id, instance_key, id): one instance's trail in order.
CREATE UNIQUE INDEX durable_instance_events_instance
    ON durable_instance_events (namespace, workflow_id, instance_key, id);
