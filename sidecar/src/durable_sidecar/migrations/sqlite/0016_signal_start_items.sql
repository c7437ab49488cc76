-- Issue 44: a start item written by a signal-with-start. The embedded twin of
-- postgres/0016_signal_start_items.sql.
ALTER TABLE durable_instance_start_items
    ADD COLUMN from_signal INTEGER NOT NULL DEFAULT 0 CHECK (from_signal IN (0, 1));
