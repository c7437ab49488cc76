-- Issue 15: waiting for named events, a durable mailbox of signals, retry
-- policies and suspension (dead letters). The embedded twin of
-- postgres/0008_waits_signals_retries.sql.
--
-- A SUSPENDED instance keeps status 'running' with suspended_at set (the
-- sidecar reports it as SUSPENDED): SQLite cannot change the status CHECK of
-- an existing table. Times are INTEGER microseconds, as everywhere here.

ALTER TABLE durable_instances ADD COLUMN awaited_event TEXT NOT NULL DEFAULT '';
ALTER TABLE durable_instances ADD COLUMN wake_reason TEXT NOT NULL DEFAULT ''
    CHECK (wake_reason IN ('', 'timeout', 'event', 'retry', 'redrive'));
ALTER TABLE durable_instances ADD COLUMN wait_outcome TEXT NOT NULL DEFAULT ''
    CHECK (wait_outcome IN ('', 'event', 'timeout'));
ALTER TABLE durable_instances ADD COLUMN wait_sequence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE durable_instances ADD COLUMN wait_event_id INTEGER;
ALTER TABLE durable_instances ADD COLUMN retry_max_resumes INTEGER CHECK (retry_max_resumes BETWEEN 0 AND 1000);
ALTER TABLE durable_instances ADD COLUMN retry_initial_ms INTEGER CHECK (retry_initial_ms BETWEEN 0 AND 86400000);
ALTER TABLE durable_instances ADD COLUMN retry_max_ms INTEGER CHECK (retry_max_ms BETWEEN 0 AND 86400000);
ALTER TABLE durable_instances ADD COLUMN retry_multiplier REAL CHECK (retry_multiplier BETWEEN 1 AND 10);
ALTER TABLE durable_instances ADD COLUMN retry_jitter REAL CHECK (retry_jitter BETWEEN 0 AND 1);
ALTER TABLE durable_instances ADD COLUMN attempt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE durable_instances ADD COLUMN attempt_sequence INTEGER NOT NULL DEFAULT 0;
ALTER TABLE durable_instances ADD COLUMN last_error TEXT NOT NULL DEFAULT '';
ALTER TABLE durable_instances ADD COLUMN suspended_at INTEGER;

CREATE TABLE durable_instance_mailbox (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace         TEXT    NOT NULL,
    workflow_id       TEXT    NOT NULL,
    instance_key      TEXT    NOT NULL,
    event_name        TEXT    NOT NULL,
    dedupe_id         TEXT    NOT NULL,
    payload_json      BLOB,
    sender            TEXT    NOT NULL DEFAULT '',
    received_at       INTEGER NOT NULL,
    consumed_at       INTEGER,
    consumed_sequence INTEGER,
    consumed_by       TEXT    NOT NULL DEFAULT '',
    UNIQUE (namespace, workflow_id, instance_key, dedupe_id),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
) STRICT;

-- PostgreSQL's key is (namespace, workflow_id, instance_key, id).
CREATE UNIQUE INDEX durable_instance_mailbox_instance
    ON durable_instance_mailbox (namespace, workflow_id, instance_key, id);

CREATE INDEX durable_instance_mailbox_pending
    ON durable_instance_mailbox (namespace, workflow_id, instance_key, event_name, id)
    WHERE consumed_at IS NULL;

CREATE INDEX durable_instances_waiting
    ON durable_instances (namespace)
    WHERE status = 'running' AND awaited_event <> '';
CREATE INDEX durable_instances_suspended
    ON durable_instances (namespace, suspended_at)
    WHERE status = 'running' AND suspended_at IS NOT NULL;
