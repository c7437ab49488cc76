-- Round 2: each instance keeps its own lease length, and the item that
-- started it.
--
-- lease_seconds is chosen by StartOrResume and used by every renewal that
-- does not name a length (saves, resumes). 0 marks an instance made before
-- this migration: it renews with DURABLE_LEASE_SECONDS until a StartOrResume
-- takes its lease and records a length.
ALTER TABLE durable_instances
    ADD COLUMN lease_seconds integer NOT NULL DEFAULT 0 CHECK (lease_seconds BETWEEN 0 AND 86400);

-- The start item, written with the instance (in the transaction of its
-- STARTED event) and never changed. A table of its own so that the frequent
-- updates of durable_instances (every checkpoint renews the lease) never
-- carry a large item along.
CREATE TABLE durable_instance_start_items (
    namespace     text        NOT NULL,
    workflow_id   text        NOT NULL,
    instance_key  text        NOT NULL,
    -- 0: stored as sent; 1: zlib-compressed by the sidecar (as checkpoint states).
    encoding      smallint    NOT NULL CHECK (encoding IN (0, 1)),
    item          bytea       NOT NULL,
    size_bytes    bigint      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, workflow_id, instance_key),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);

ALTER TABLE durable_instance_start_items ALTER COLUMN item SET STORAGE EXTERNAL;
