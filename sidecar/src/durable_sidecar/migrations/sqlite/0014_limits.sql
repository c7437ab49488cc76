-- Issue 43: flow control across every n8n process and worker. The embedded
-- twin of postgres/0014_limits.sql. Times are INTEGER microseconds, as
-- everywhere here.

CREATE TABLE durable_limits (
    namespace        TEXT    NOT NULL,
    kind             TEXT    NOT NULL CHECK (kind IN ('concurrency', 'rate', 'debounce')),
    limit_name       TEXT    NOT NULL,
    limit_key        TEXT    NOT NULL,
    capacity         INTEGER     CHECK (capacity BETWEEN 1 AND 10000),
    next_at          INTEGER,
    burst_started_at INTEGER,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (namespace, kind, limit_name, limit_key)
);

CREATE TABLE durable_limit_entries (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace    TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    limit_name   TEXT    NOT NULL,
    limit_key    TEXT    NOT NULL,
    workflow_id  TEXT    NOT NULL,
    instance_key TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('holding', 'waiting', 'reserved', 'candidate', 'run', 'debounced')),
    owner        TEXT    NOT NULL DEFAULT '',
    sequence     INTEGER NOT NULL DEFAULT 0,
    at           INTEGER,
    created_at   INTEGER NOT NULL,
    UNIQUE (namespace, kind, limit_name, limit_key, workflow_id, instance_key)
);

CREATE INDEX durable_limit_entries_key ON durable_limit_entries (namespace, kind, limit_name, limit_key, id);
CREATE INDEX durable_limit_entries_waiting ON durable_limit_entries (namespace, kind, limit_name, limit_key)
    WHERE state = 'waiting';
CREATE INDEX durable_limit_entries_instance ON durable_limit_entries (namespace, workflow_id, instance_key);
