-- Issue 44: search fields. An author names a few fields per instance
-- (customerId, country, amount) that operators filter and sort by. One row per
-- instance and field; a number sorts before a text, each by its own column (the
-- other holds its default: '' for a number, 0 for a text), so one index,
-- (kind, text, number) after the name, seeks a text by equality and a number
-- by range, and walks either in order.

CREATE TABLE durable_search_fields (
    namespace     text             NOT NULL,
    workflow_id   text             NOT NULL,
    instance_key  text             NOT NULL,
    name          text             NOT NULL,
    -- 'n': a number (num_value); 's': a text (text_value).
    kind          text             NOT NULL CHECK (kind IN ('n', 's')),
    num_value     double precision NOT NULL DEFAULT 0,
    text_value    text             NOT NULL DEFAULT '',
    PRIMARY KEY (namespace, workflow_id, instance_key, name),
    FOREIGN KEY (namespace, workflow_id, instance_key)
        REFERENCES durable_instances (namespace, workflow_id, instance_key) ON DELETE CASCADE
);

CREATE INDEX durable_search_fields_value
    ON durable_search_fields (namespace, name, kind, text_value, num_value, workflow_id, instance_key);
