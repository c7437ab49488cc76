-- Issue 15: waiting for named events, a durable mailbox of signals, retry
-- policies and suspension (dead letters).
--
-- A SUSPENDED instance keeps status 'running' here with suspended_at set (the
-- sidecar reports it as SUSPENDED): the embedded twin cannot change the
-- status CHECK of an existing table, and both dialects keep one schema.

ALTER TABLE durable_instances
    -- The event name AwaitEvent parked the instance for ('' when not waiting).
    ADD COLUMN awaited_event     text        NOT NULL DEFAULT '',
    -- Why wake_at was set: '' (ScheduleWakeUp), 'timeout' (the wait's deadline),
    -- 'event' (a signal ended the wait), 'retry' (a retry backoff), 'redrive' (an operator).
    ADD COLUMN wake_reason       text        NOT NULL DEFAULT ''
                                 CHECK (wake_reason IN ('', 'timeout', 'event', 'retry', 'redrive')),
    -- How the last wait ended ('', 'event', 'timeout'), the newest sequence then,
    -- and the consumed event: handed out again until a newer checkpoint exists.
    ADD COLUMN wait_outcome      text        NOT NULL DEFAULT '' CHECK (wait_outcome IN ('', 'event', 'timeout')),
    ADD COLUMN wait_sequence     bigint      NOT NULL DEFAULT 0,
    ADD COLUMN wait_event_id     bigint,
    -- The retry policy; NULL columns take the sidecar's DURABLE_RETRY_* defaults.
    ADD COLUMN retry_max_resumes integer     CHECK (retry_max_resumes BETWEEN 0 AND 1000),
    ADD COLUMN retry_initial_ms  bigint      CHECK (retry_initial_ms BETWEEN 0 AND 86400000),
    ADD COLUMN retry_max_ms      bigint      CHECK (retry_max_ms BETWEEN 0 AND 86400000),
    ADD COLUMN retry_multiplier  double precision CHECK (retry_multiplier BETWEEN 1 AND 10),
    ADD COLUMN retry_jitter      double precision CHECK (retry_jitter BETWEEN 0 AND 1),
    -- Automatic resumes counted while the newest sequence was attempt_sequence
    -- (a newer checkpoint means progress: the count starts again).
    ADD COLUMN attempt           integer     NOT NULL DEFAULT 0,
    ADD COLUMN attempt_sequence  bigint      NOT NULL DEFAULT 0,
    ADD COLUMN last_error        text        NOT NULL DEFAULT '',
    ADD COLUMN suspended_at      timestamptz;

-- The mailbox: every signal an instance was sent, consumed at most once.
CREATE TABLE durable_instance_mailbox (
    id                bigserial,
    namespace         text        NOT NULL,
    workflow_id       text        NOT NULL,
    instance_key      text        NOT NULL,
    event_name        text        NOT NULL,
    -- The sender's deduplication id: one event per id and instance.
    dedupe_id         text        NOT NULL,
    payload_json      bytea,
    sender            text        NOT NULL DEFAULT '',
    received_at       timestamptz NOT NULL DEFAULT now(),
    consumed_at       timestamptz,
    -- The instance's newest sequence when a wait consumed it, and that wait's execution (or '' for a signal).
    consumed_sequence bigint,
    consumed_by       text        NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, workflow_id, instance_key, id),
    UNIQUE (namespace, workflow_id, instance_key, dedupe_id),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);

-- The oldest unconsumed event of a name, for a wait.
CREATE INDEX durable_instance_mailbox_pending
    ON durable_instance_mailbox (namespace, workflow_id, instance_key, event_name, id)
    WHERE consumed_at IS NULL;

-- Gauges: waiting and suspended instances.
CREATE INDEX durable_instances_waiting
    ON durable_instances (namespace)
    WHERE status = 'running' AND awaited_event <> '';
CREATE INDEX durable_instances_suspended
    ON durable_instances (namespace, suspended_at)
    WHERE status = 'running' AND suspended_at IS NOT NULL;
