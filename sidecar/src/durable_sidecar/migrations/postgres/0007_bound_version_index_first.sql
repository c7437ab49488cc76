-- Store layer v2: every lookup of an instance by its key uses the primary key.
--
-- durable_instances_bound_version began with (namespace, workflow_id), the
-- primary key's own prefix. Before PostgreSQL has statistics of the table (a
-- new database, or one that grew faster than autovacuum analyses it) the
-- planner takes an equality on (namespace, workflow_id) for a handful of
-- rows, and a generic plan may probe by key through this smaller index and
-- filter instance_key: every item of a batched save, and every foreign-key
-- check of a checkpoint insert, then reads all of the workflow's instances.
-- Measured in `make bench`: 100-item batches took several times longer as
-- one workflow grew to 8,000 instances (every backend on the CPU) until an
-- ANALYZE. (namespace, bound_version, workflow_id) was not enough: a generic
-- plan still probed it with workflow_id as a second index condition, reading
-- the whole namespace. Led by bound_version, the index still serves moves by
-- version (three equalities) and no key lookup can use it: EXPLAIN of the
-- generic plans on 20,000 unanalysed instances shows the primary key for the
-- batch's lock and update.
DROP INDEX durable_instances_bound_version;
CREATE INDEX durable_instances_bound_version
    ON durable_instances (bound_version, namespace, workflow_id);
