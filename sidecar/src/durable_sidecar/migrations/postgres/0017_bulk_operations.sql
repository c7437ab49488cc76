-- Issue 44: bulk actions by filter. One row per operation: what (action),
-- over which instances (selector_json, as given), who and why, and where it
-- stands. The operation loop of any sidecar takes a RUNNING operation by its
-- lease (owner, lease_expires_at), and each batch acts on the next instances
-- after (last_workflow_id, last_instance_key) in that order and moves that
-- cursor and the counts in the same transaction: a kill -9 mid-batch rolls the
-- whole batch back, and the next sidecar takes the operation over once its
-- lease lapsed and redoes that batch. No instance is acted on twice.
CREATE TABLE durable_operations (
    id                bigserial   PRIMARY KEY,
    namespace         text        NOT NULL,
    action            text        NOT NULL CHECK (action IN ('retry', 'resume', 'cancel', 'move', 'replay')),
    status            text        NOT NULL CHECK (status IN ('running', 'paused', 'cancelled', 'completed')),
    selector_json     text        NOT NULL,
    actor             text        NOT NULL,
    reason            text        NOT NULL,
    -- move: the version to bind to; replay: the fork's version (0: each original's).
    to_version        bigint      NOT NULL DEFAULT 0,
    -- replay: each instance runs again from its newest checkpoint of this step ('': from its start item).
    replay_from_step  text        NOT NULL DEFAULT '',
    matched_at_start  bigint      NOT NULL,
    acted             bigint      NOT NULL DEFAULT 0,
    skipped           bigint      NOT NULL DEFAULT 0,
    last_workflow_id  text        NOT NULL DEFAULT '',
    last_instance_key text        NOT NULL DEFAULT '',
    last_skip         text        NOT NULL DEFAULT '',
    owner             text        NOT NULL DEFAULT '',
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);

CREATE INDEX durable_operations_namespace ON durable_operations (namespace, id);
CREATE INDEX durable_operations_running ON durable_operations (id) WHERE status = 'running';
