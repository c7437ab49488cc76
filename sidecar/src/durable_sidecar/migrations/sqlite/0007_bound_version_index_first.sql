-- Store layer v2: the same index as PostgreSQL's 0007 (led by bound_version,
-- so that no key lookup can use it); see that file for the reason.
DROP INDEX durable_instances_bound_version;
CREATE INDEX durable_instances_bound_version
    ON durable_instances (bound_version, namespace, workflow_id);
