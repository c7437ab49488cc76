-- Issue 18: a save updates its instance's row in place (a HOT update: no index
-- entries), instead of writing a new row version into every index of the table.
--
-- Every save advances its instance (last_sequence, last_step, checkpoint_count,
-- lease_owner, lease_expires_at, updated_at). PostgreSQL updates a row without
-- touching its indexes (heap-only) only when no index holds a column the update
-- changes and the row's page has room for the new version. The stalled-instances
-- index held lease_expires_at, so every save inserted into the primary key and the
-- stalled, created and bound-version indexes: four index entries per checkpoint,
-- and bloat that grew with every lease renewal.
--
-- 1. The stalled index is replaced by one on the key, for the same rows (running,
--    no wake-up pending). The resume scanner and the gauges find the namespace's
--    running instances without a wake-up through it (or a sequential scan, when
--    they are most of the table) and compare their lease expiry in the row: a
--    scan proportional to those instances, where the old index went straight to
--    the lapsed leases (EXPLAIN ANALYZE, 36,000 such instances of 60,000: the
--    scanner's candidate query 0.3 ms before, 15-22 ms after; the gauges' query
--    scans the table either way). That is the price of saves that write no index.
-- 2. fillfactor 50: half of each page stays free, so when a batch advances every
--    instance of a page (instances started together sit together) each new version
--    fits on its page. At 100 or 70 the bench's 64 concurrent 100-item batches
--    found full pages, nearly every update moved its row, and PostgreSQL spent
--    ~90 ms of CPU per batch; at 50, 4 ms. Applies to pages written from now on;
--    an existing table gets it when rewritten (VACUUM FULL, pg_repack).
DROP INDEX durable_instances_stalled;
CREATE INDEX durable_instances_unscheduled
    ON durable_instances (namespace, workflow_id, instance_key)
    WHERE status = 'running' AND wake_at IS NULL;
ALTER TABLE durable_instances SET (fillfactor = 50);
