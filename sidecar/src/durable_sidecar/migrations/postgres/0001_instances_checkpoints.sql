-- Instances, their append-only checkpoints and an audit trail of lifecycle events.
-- The namespace and instance key lead every key so the schema can be
-- distributed by them.

CREATE TABLE durable_instances (
    namespace               text        NOT NULL,
    workflow_id             text        NOT NULL,
    instance_key            text        NOT NULL,
    status                  text        NOT NULL DEFAULT 'running'
                            CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    bound_version           bigint      NOT NULL DEFAULT 0,
    version_label           text        NOT NULL DEFAULT '',
    lease_owner             text        NOT NULL DEFAULT '',
    lease_expires_at        timestamptz,
    wake_at                 timestamptz,
    last_sequence           bigint      NOT NULL DEFAULT 0,
    last_step               text        NOT NULL DEFAULT '',
    checkpoint_count        bigint      NOT NULL DEFAULT 0,
    resume_count            bigint      NOT NULL DEFAULT 0,
    error_message           text        NOT NULL DEFAULT '',
    result_json             bytea,
    created_by_execution_id text        NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now(),
    finished_at             timestamptz,
    PRIMARY KEY (namespace, workflow_id, instance_key)
);

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
    namespace     text        NOT NULL,
    workflow_id   text        NOT NULL,
    instance_key  text        NOT NULL,
    sequence      bigint      NOT NULL CHECK (sequence > 0),
    step_name     text        NOT NULL,
    -- 0: stored as sent; 1: zlib-compressed by the sidecar.
    encoding      smallint    NOT NULL CHECK (encoding IN (0, 1)),
    state         bytea       NOT NULL,
    sha256        text        NOT NULL,
    size_bytes    bigint      NOT NULL,
    stored_bytes  bigint      NOT NULL,
    execution_id  text        NOT NULL,
    node_name     text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id, instance_key, sequence),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);

-- The sidecar compresses large states itself; do not spend CPU compressing again.
ALTER TABLE durable_checkpoints ALTER COLUMN state SET STORAGE EXTERNAL;

CREATE TABLE durable_instance_events (
    id            bigserial,
    namespace     text        NOT NULL,
    workflow_id   text        NOT NULL,
    instance_key  text        NOT NULL,
    kind          text        NOT NULL,
    actor         text        NOT NULL DEFAULT '',
    detail        text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id, instance_key, id),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);
