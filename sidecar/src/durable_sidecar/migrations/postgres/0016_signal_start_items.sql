-- Issue 44: a start item written by a signal-with-start (SignalInstance with
-- start_if_absent) stands in for the delivery that has not arrived yet. When
-- that delivery (the order's webhook) comes, it is not "another delivery under
-- the same key" (StartOrResume check_delivery answers DIFFERENT for those): it
-- becomes the start item, and later re-deliveries are compared with it.
-- 1: written by a signal, not yet replaced by a delivery; 0: a delivery's.
ALTER TABLE durable_instance_start_items
    ADD COLUMN from_signal smallint NOT NULL DEFAULT 0 CHECK (from_signal IN (0, 1));
