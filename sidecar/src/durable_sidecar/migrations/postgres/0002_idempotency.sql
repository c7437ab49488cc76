-- Idempotency keys: at most one completed execution of a side effect per key.
-- The namespace leads the key so the table can be distributed by it. Every
-- time is database time (now()); the sidecars' clocks are never compared.

CREATE TABLE durable_idempotency_keys (
    namespace         text        NOT NULL,
    scope             text        NOT NULL,
    key               text        NOT NULL,
    status            text        NOT NULL
                      CHECK (status IN ('in_progress', 'completed', 'failed')),
    -- Lower-case hex SHA-256 of the canonical payload, a caller's own hex
    -- SHA-256, or '' when the caller sent neither.
    fingerprint       text        NOT NULL,
    -- Fencing token: only the holder of the current attempt may complete or
    -- release. It grows by one at each acquisition and never goes back while
    -- the row exists.
    attempt           bigint      NOT NULL CHECK (attempt > 0),
    holder            text        NOT NULL DEFAULT '',
    -- Set while in progress; NULL once completed or released.
    lease_expires_at  timestamptz,
    result_json       bytea,
    error_message     text        NOT NULL DEFAULT '',
    expires_at        timestamptz NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, scope, key),
    CHECK ((status = 'in_progress') = (lease_expires_at IS NOT NULL))
);

-- The reaper: expired keys that are not in progress, oldest first. In-progress
-- keys are never reaped, so they are not in the index.
CREATE INDEX durable_idempotency_keys_reap
    ON durable_idempotency_keys (expires_at)
    WHERE status <> 'in_progress';

-- Listing newest first.
CREATE INDEX durable_idempotency_keys_created
    ON durable_idempotency_keys (namespace, created_at DESC, scope DESC, key DESC);
