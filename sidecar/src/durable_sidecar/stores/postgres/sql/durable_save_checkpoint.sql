-- durable_save_checkpoint(): a checkpoint save of one item in one round trip
-- (store layer v2; first created by migration 0006).
--
-- The save of one item (replace mode, no key to complete) as one function
-- call in autocommit: lock the instance, find a repeated save of its newest
-- step (deduplicated), refuse a finished instance or a stale expected
-- sequence, insert the checkpoint and advance the instance. Each statement of
-- a PL/pgSQL function takes a fresh snapshot (READ COMMITTED), so after
-- waiting for the instance's row lock the newest checkpoint another save just
-- committed is seen: the same decisions, in the same order, as the
-- transaction the sidecar runs for batches (services/checkpoints.py; the
-- rules are services/save_rules.py, and tests/sidecar/test_save_rules_conformance.py
-- holds both to the same outcomes).
--
-- outcome: 'written' or 'deduplicated' (with the checkpoint's columns),
-- 'not_found', 'finished' or 'stale' (last_sequence says where the instance
-- stands); the sidecar turns the last three into its domain errors.
CREATE OR REPLACE FUNCTION durable_save_checkpoint(
    p_namespace text, p_workflow_id text, p_instance_key text, p_step_name text, p_encoding smallint,
    p_state bytea, p_sha256 text, p_size_bytes bigint, p_execution_id text, p_node_name text,
    p_expected_sequence bigint, p_lease_seconds integer, p_default_lease_seconds integer)
RETURNS TABLE (outcome text, last_sequence bigint, workflow_id text, instance_key text, sequence bigint,
               step_name text, sha256 text, size_bytes bigint, stored_bytes bigint, execution_id text,
               node_name text, created_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inst record;
BEGIN
    SELECT i.status, i.last_sequence, i.last_step, i.lease_seconds INTO inst
    FROM durable_instances i
    WHERE i.namespace = p_namespace AND i.workflow_id = p_workflow_id AND i.instance_key = p_instance_key
    FOR UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'not_found'::text, 0::bigint, NULL::text, NULL::text, NULL::bigint, NULL::text,
                            NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF inst.last_sequence > 0 AND inst.last_step = p_step_name THEN
        -- The same step saved again with the same state (a retry) is the checkpoint already there.
        RETURN QUERY
            SELECT 'deduplicated'::text, inst.last_sequence, c.workflow_id, c.instance_key, c.sequence, c.step_name,
                   c.sha256, c.size_bytes, c.stored_bytes, c.execution_id, c.node_name, c.created_at
            FROM durable_checkpoints c
            WHERE c.namespace = p_namespace AND c.workflow_id = p_workflow_id AND c.instance_key = p_instance_key
              AND c.sequence = inst.last_sequence AND c.sha256 = p_sha256;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF inst.status <> 'running' THEN
        RETURN QUERY SELECT 'finished'::text, inst.last_sequence, NULL::text, NULL::text, NULL::bigint, NULL::text,
                            NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    IF p_expected_sequence IS NOT NULL AND p_expected_sequence <> inst.last_sequence THEN
        RETURN QUERY SELECT 'stale'::text, inst.last_sequence, NULL::text, NULL::text, NULL::bigint, NULL::text,
                            NULL::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::timestamptz;
        RETURN;
    END IF;
    RETURN QUERY
        INSERT INTO durable_checkpoints AS c
            (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256, size_bytes,
             stored_bytes, execution_id, node_name)
        VALUES (p_namespace, p_workflow_id, p_instance_key, inst.last_sequence + 1, p_step_name, p_encoding, p_state,
                p_sha256, p_size_bytes, octet_length(p_state), p_execution_id, p_node_name)
        RETURNING 'written'::text, c.sequence, c.workflow_id, c.instance_key, c.sequence, c.step_name, c.sha256,
                  c.size_bytes, c.stored_bytes, c.execution_id, c.node_name, c.created_at;
    UPDATE durable_instances i
    SET last_sequence = inst.last_sequence + 1, last_step = p_step_name, checkpoint_count = i.checkpoint_count + 1,
        lease_owner = p_execution_id,
        lease_expires_at = now() + make_interval(secs => coalesce(nullif(p_lease_seconds, 0),
                                                                   nullif(inst.lease_seconds, 0),
                                                                   p_default_lease_seconds)),
        updated_at = now()
    WHERE i.namespace = p_namespace AND i.workflow_id = p_workflow_id AND i.instance_key = p_instance_key;
END
$$;
