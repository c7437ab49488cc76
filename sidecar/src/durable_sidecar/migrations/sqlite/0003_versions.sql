-- Version binding: content-addressed workflow snapshots, one head row per
-- workflow, and the change log of registrations and instance moves. The
-- embedded (SQLite) twin of postgres/0003_versions.sql; times are INTEGER
-- microseconds since the Unix epoch (UTC), text[] is a JSON array in TEXT.

-- One row per workflow that has versions (or was checked against n8n). In the
-- embedded database transactions run one at a time, so the head row (read
-- and written inside one) keeps version numbers 1, 2, 3, ... without duplicates.
CREATE TABLE durable_workflows (
    namespace        TEXT    NOT NULL,
    workflow_id      TEXT    NOT NULL,
    -- Highest version number handed out; 0 before the first registration.
    latest_version   INTEGER NOT NULL DEFAULT 0 CHECK (latest_version >= 0),
    -- The version new instances bind to: the most recently registered content
    -- (re-registering an older snapshot's content makes it current again).
    current_version  INTEGER NOT NULL DEFAULT 0 CHECK (current_version BETWEEN 0 AND latest_version),
    -- Last time a StartOrResume or SyncVersionFromN8n asked n8n for the
    -- definition (success or not): start-ups ask at most once an interval.
    n8n_checked_at   INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id)
) STRICT;

CREATE TABLE durable_versions (
    namespace        TEXT    NOT NULL,
    workflow_id      TEXT    NOT NULL,
    version          INTEGER NOT NULL CHECK (version > 0),
    -- Lower-case hex SHA-256 of the canonical JSON of nodes and connections.
    content_hash     TEXT    NOT NULL
                     CHECK (length(content_hash) = 64 AND content_hash NOT GLOB '*[^0-9a-f]*'),
    n8n_version_id   TEXT    NOT NULL DEFAULT '',
    label            TEXT    NOT NULL DEFAULT '',
    note             TEXT    NOT NULL DEFAULT '',
    -- The definition exactly as registered.
    definition_json  BLOB    NOT NULL,
    -- Executable node (step) names, sorted: a JSON array of strings.
    node_names       TEXT    NOT NULL CHECK (json_type(node_names) = 'array'),
    created_by       TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id, version),
    -- Content addressing: the same nodes and connections are one version.
    UNIQUE (namespace, workflow_id, content_hash),
    FOREIGN KEY (namespace, workflow_id) REFERENCES durable_workflows (namespace, workflow_id)
) STRICT;

CREATE TABLE durable_version_changes (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace        TEXT    NOT NULL,
    workflow_id      TEXT    NOT NULL,
    kind             TEXT    NOT NULL CHECK (kind IN ('version_registered', 'instance_moved')),
    -- Set for instance_moved.
    instance_key     TEXT    NOT NULL DEFAULT '',
    from_version     INTEGER NOT NULL DEFAULT 0,
    to_version       INTEGER NOT NULL,
    actor            TEXT    NOT NULL DEFAULT '',
    reason           TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    CHECK ((kind = 'instance_moved') = (instance_key <> ''))
) STRICT;

-- PostgreSQL's key is (namespace, workflow_id, id).
CREATE UNIQUE INDEX durable_version_changes_workflow
    ON durable_version_changes (namespace, workflow_id, id);

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
