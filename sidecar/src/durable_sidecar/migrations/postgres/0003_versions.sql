-- Version binding: content-addressed workflow snapshots, one head row per
-- workflow, and the change log of registrations and instance moves. The
-- namespace and workflow id lead every key so the tables distribute with the
-- instances they describe.

-- One row per workflow that has versions (or was checked against n8n). Its row
-- lock serialises registrations of the workflow, so version numbers are
-- 1, 2, 3, ... without duplicates whatever the number of sidecar replicas.
CREATE TABLE durable_workflows (
    namespace        text        NOT NULL,
    workflow_id      text        NOT NULL,
    -- Highest version number handed out; 0 before the first registration.
    latest_version   bigint      NOT NULL DEFAULT 0 CHECK (latest_version >= 0),
    -- The version new instances bind to: the most recently registered content
    -- (re-registering an older snapshot's content makes it current again).
    current_version  bigint      NOT NULL DEFAULT 0 CHECK (current_version BETWEEN 0 AND latest_version),
    -- Last time a StartOrResume or SyncVersionFromN8n asked n8n for the
    -- definition (success or not): start-ups ask at most once an interval.
    n8n_checked_at   timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id)
);

CREATE TABLE durable_versions (
    namespace        text        NOT NULL,
    workflow_id      text        NOT NULL,
    version          bigint      NOT NULL CHECK (version > 0),
    -- Lower-case hex SHA-256 of the canonical JSON of nodes and connections.
    content_hash     text        NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
    n8n_version_id   text        NOT NULL DEFAULT '',
    label            text        NOT NULL DEFAULT '',
    note             text        NOT NULL DEFAULT '',
    -- The definition exactly as registered.
    definition_json  bytea       NOT NULL,
    -- Executable node (step) names, sorted.
    node_names       text[]      NOT NULL,
    created_by       text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id, version),
    -- Content addressing: the same nodes and connections are one version.
    UNIQUE (namespace, workflow_id, content_hash),
    FOREIGN KEY (namespace, workflow_id) REFERENCES durable_workflows (namespace, workflow_id)
);

-- Definitions are compressed well by TOAST (unlike checkpoint states, which the
-- sidecar compresses itself): keep the default EXTENDED storage.

CREATE TABLE durable_version_changes (
    id               bigserial,
    namespace        text        NOT NULL,
    workflow_id      text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('version_registered', 'instance_moved')),
    -- Set for instance_moved.
    instance_key     text        NOT NULL DEFAULT '',
    from_version     bigint      NOT NULL DEFAULT 0,
    to_version       bigint      NOT NULL,
    actor            text        NOT NULL DEFAULT '',
    reason           text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id, id),
    CHECK ((kind = 'instance_moved') = (instance_key <> ''))
);

-- One instance's moves, newest first.
CREATE INDEX durable_version_changes_instance
    ON durable_version_changes (namespace, workflow_id, instance_key, id)
    WHERE instance_key <> '';

-- The whole namespace's log, newest first.
CREATE INDEX durable_version_changes_namespace
    ON durable_version_changes (namespace, id);

-- Selecting instances to move by bound version.
CREATE INDEX durable_instances_bound_version
    ON durable_instances (namespace, workflow_id, bound_version);
