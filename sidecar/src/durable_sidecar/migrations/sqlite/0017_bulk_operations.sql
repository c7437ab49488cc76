-- Issue 44: bulk actions by filter. The embedded twin of
-- postgres/0017_bulk_operations.sql.
CREATE TABLE durable_operations (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace         TEXT    NOT NULL,
    action            TEXT    NOT NULL CHECK (action IN ('retry', 'resume', 'cancel', 'move', 'replay')),
    status            TEXT    NOT NULL CHECK (status IN ('running', 'paused', 'cancelled', 'completed')),
    selector_json     TEXT    NOT NULL,
    actor             TEXT    NOT NULL,
    reason            TEXT    NOT NULL,
    to_version        INTEGER NOT NULL DEFAULT 0,
    replay_from_step  TEXT    NOT NULL DEFAULT '',
    matched_at_start  INTEGER NOT NULL,
    acted             INTEGER NOT NULL DEFAULT 0,
    skipped           INTEGER NOT NULL DEFAULT 0,
    last_workflow_id  TEXT    NOT NULL DEFAULT '',
    last_instance_key TEXT    NOT NULL DEFAULT '',
    last_skip         TEXT    NOT NULL DEFAULT '',
    owner             TEXT    NOT NULL DEFAULT '',
    lease_expires_at  INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    finished_at       INTEGER
);

CREATE INDEX durable_operations_namespace ON durable_operations (namespace, id);
