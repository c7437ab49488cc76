-- Issue 43: flow control across every n8n process and worker.
--
-- durable_limits: one row per (kind, limit name, key) in a namespace, locked
-- first by every call on that key, so replicas racing on one key run one
-- after another. capacity is a concurrency limit's most holders, as the
-- last Acquire gave it (the sweep hands freed places out by it); next_at is the rate limit's theoretical arrival time
-- (GCRA), or when a debounce key's open burst ends; burst_started_at its
-- first item's arrival.
--
-- durable_limit_entries: one row per instance at a key: a holder or waiter of
-- a concurrency limit (waiters served oldest id first), a rate limit's slot
-- reserved for a parked instance, or a debounce item (the open burst's
-- candidate, or its decision: run or debounced). `sequence` is the
-- instance's last checkpoint when the entry was made (a decision holds until
-- the instance saves a newer one). Every time is database time.

CREATE TABLE durable_limits (
    namespace        text        NOT NULL,
    kind             text        NOT NULL CHECK (kind IN ('concurrency', 'rate', 'debounce')),
    limit_name       text        NOT NULL,
    limit_key        text        NOT NULL,
    capacity         integer     CHECK (capacity BETWEEN 1 AND 10000),
    next_at          timestamptz,
    burst_started_at timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, kind, limit_name, limit_key)
);

CREATE TABLE durable_limit_entries (
    id           bigserial   PRIMARY KEY,
    namespace    text        NOT NULL,
    kind         text        NOT NULL,
    limit_name   text        NOT NULL,
    limit_key    text        NOT NULL,
    workflow_id  text        NOT NULL,
    instance_key text        NOT NULL,
    state        text        NOT NULL
                 CHECK (state IN ('holding', 'waiting', 'reserved', 'candidate', 'run', 'debounced')),
    owner        text        NOT NULL DEFAULT '',
    sequence     bigint      NOT NULL DEFAULT 0,
    at           timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (namespace, kind, limit_name, limit_key, workflow_id, instance_key)
);

-- A key's entries in arrival order (holders counted, the oldest waiter served).
CREATE INDEX durable_limit_entries_key ON durable_limit_entries (namespace, kind, limit_name, limit_key, id);
-- The sweep: keys with waiters.
CREATE INDEX durable_limit_entries_waiting ON durable_limit_entries (namespace, kind, limit_name, limit_key)
    WHERE state = 'waiting';
-- An instance's entries (released when it finishes, shown with it).
CREATE INDEX durable_limit_entries_instance ON durable_limit_entries (namespace, workflow_id, instance_key);
