-- Issue 44: search fields. The embedded twin of postgres/0015_search_fields.sql.

CREATE TABLE durable_search_fields (
    namespace     TEXT NOT NULL,
    workflow_id   TEXT NOT NULL,
    instance_key  TEXT NOT NULL,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('n', 's')),
    num_value     REAL NOT NULL DEFAULT 0,
    text_value    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, workflow_id, instance_key, name),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);

CREATE INDEX durable_search_fields_value
    ON durable_search_fields (namespace, name, kind, text_value, num_value, workflow_id, instance_key);
