-- Round 2: each instance keeps its own lease length, and the item that
-- started it. The embedded twin of postgres/0005_lease_length_start_items.sql.
--
-- lease_seconds 0 marks an instance made before this migration: it renews
-- with DURABLE_LEASE_SECONDS until a StartOrResume records a length.
ALTER TABLE durable_instances
    ADD COLUMN lease_seconds INTEGER NOT NULL DEFAULT 0 CHECK (lease_seconds BETWEEN 0 AND 86400);

-- The start item, written with the instance and never changed; a table of its
-- own so that updates of durable_instances never rewrite a large item.
CREATE TABLE durable_instance_start_items (
    namespace     TEXT    NOT NULL,
    workflow_id   TEXT    NOT NULL,
    instance_key  TEXT    NOT NULL,
    -- 0: stored as sent; 1: zlib-compressed by the sidecar (as checkpoint states).
    encoding      INTEGER NOT NULL CHECK (encoding IN (0, 1)),
    item          BLOB    NOT NULL,
    size_bytes    INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (namespace, workflow_id, instance_key),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
) STRICT;
