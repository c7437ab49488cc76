-- Idempotency keys: at most one completed execution of a side effect per key.
-- The embedded (SQLite) twin of postgres/0002_idempotency.sql. Every time is
-- database time: INTEGER microseconds since the Unix epoch (UTC) from the
-- clock of the one sidecar process that owns the file.

CREATE TABLE durable_idempotency_keys (
    namespace         TEXT    NOT NULL,
    scope             TEXT    NOT NULL,
    key               TEXT    NOT NULL,
    status            TEXT    NOT NULL
                      CHECK (status IN ('in_progress', 'completed', 'failed')),
    -- Lower-case hex SHA-256 of the canonical payload, a caller's own hex
    -- SHA-256, or '' when the caller sent neither.
    fingerprint       TEXT    NOT NULL,
    -- Fencing token: only the holder of the current attempt may complete or
    -- release. It grows by one at each acquisition and never goes back while
    -- the row exists.
    attempt           INTEGER NOT NULL CHECK (attempt > 0),
    holder            TEXT    NOT NULL DEFAULT '',
    -- Set while in progress; NULL once completed or released.
    lease_expires_at  INTEGER,
    result_json       BLOB,
    error_message     TEXT    NOT NULL DEFAULT '',
    expires_at        INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (namespace, scope, key),
    CHECK ((status = 'in_progress') = (lease_expires_at IS NOT NULL))
) STRICT;

-- The reaper: expired keys that are not in progress, oldest first. In-progress
-- keys are never reaped, so they are not in the index.
CREATE INDEX durable_idempotency_keys_reap
    ON durable_idempotency_keys (expires_at)
    WHERE status <> 'in_progress';

-- Listing newest first.
CREATE INDEX durable_idempotency_keys_created
    ON durable_idempotency_keys (namespace, created_at DESC, scope DESC, key DESC);
