-- durable_save_step(): the save the nodes send per side effect (a step result
-- added to the instance's state, completing the key its claim took) in one
-- round trip (issue 20; first created by migration 0010).
--
-- The sidecar merges the step result into the state it remembers for the
-- instance (the one it last saved or started it with) and calls this function
-- in autocommit with the merged state and what that state was based on:
-- p_base_sequence (the instance's newest sequence then) and p_base_digest (the
-- SHA-256 of that checkpoint's state; at sequence 0 the SHA-256 of the stored
-- start item's bytes, '' for none). The function writes only the ordinary
-- case, in the same order as the transaction of services/checkpoints.py:
--
-- 1. lock the instance; it must be running, at p_base_sequence, its newest step
--    not this one (a repeated step may be a retry to deduplicate), and at the
--    caller's expected sequence when one was sent;
-- 2. the base must be what is stored (the newest checkpoint's SHA-256, or the
--    start item's): the merged state was built on the instance's real state;
-- 3. with a key named, its holder's attempt completes it (in progress, same
--    attempt): the key's row is locked after the instance's, as in the
--    transaction (no deadlock between the two paths);
-- 4. insert the checkpoint and advance the instance.
--
-- Anything else returns one row with outcome 'fallback' and writes nothing:
-- the sidecar then runs its transaction, which decides every other case
-- (stale, finished, deduplicated, a retried completion, another attempt).
-- 'written' carries the checkpoint's columns and, with a key, the key's (k_*).
CREATE OR REPLACE FUNCTION durable_save_step(
    p_namespace text, p_workflow_id text, p_instance_key text, p_step_name text, p_encoding smallint,
    p_state bytea, p_sha256 text, p_size_bytes bigint, p_execution_id text, p_node_name text,
    p_expected_sequence bigint, p_lease_seconds integer, p_default_lease_seconds integer,
    p_base_sequence bigint, p_base_digest text,
    p_key_scope text, p_key text, p_key_attempt bigint, p_key_result bytea)
RETURNS TABLE (outcome text, sequence bigint, created_at timestamptz,
               k_status text, k_fingerprint text, k_attempt bigint, k_holder text,
               k_lease_expires_at timestamptz, k_result_json bytea, k_error_message text,
               k_expires_at timestamptz, k_created_at timestamptz, k_updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    inst record;
    k durable_idempotency_keys%ROWTYPE;  -- all NULL unless a key is completed
    written record;
BEGIN
    <<ordinary>>
    BEGIN
        SELECT i.status, i.last_sequence, i.last_step, i.lease_seconds INTO inst
        FROM durable_instances i
        WHERE i.namespace = p_namespace AND i.workflow_id = p_workflow_id AND i.instance_key = p_instance_key
        FOR UPDATE;
        IF NOT FOUND OR inst.status <> 'running' OR inst.last_sequence <> p_base_sequence
           OR (inst.last_sequence > 0 AND inst.last_step = p_step_name)
           OR (p_expected_sequence IS NOT NULL AND p_expected_sequence <> inst.last_sequence) THEN
            EXIT ordinary;
        END IF;
        IF p_base_sequence > 0 THEN
            PERFORM 1 FROM durable_checkpoints c
            WHERE c.namespace = p_namespace AND c.workflow_id = p_workflow_id AND c.instance_key = p_instance_key
              AND c.sequence = p_base_sequence AND c.sha256 = p_base_digest;
        ELSIF p_base_digest = '' THEN
            PERFORM 1 WHERE NOT EXISTS (
                SELECT 1 FROM durable_instance_start_items s
                WHERE s.namespace = p_namespace AND s.workflow_id = p_workflow_id
                  AND s.instance_key = p_instance_key);
        ELSE
            PERFORM 1 FROM durable_instance_start_items s
            WHERE s.namespace = p_namespace AND s.workflow_id = p_workflow_id AND s.instance_key = p_instance_key
              AND encode(sha256(s.item), 'hex') = p_base_digest;
        END IF;
        IF NOT FOUND THEN
            EXIT ordinary;
        END IF;
        IF p_key IS NOT NULL THEN
            UPDATE durable_idempotency_keys AS d
            SET status = 'completed', result_json = p_key_result, lease_expires_at = NULL, updated_at = now()
            WHERE d.namespace = p_namespace AND d.scope = p_key_scope AND d.key = p_key
              AND d.attempt = p_key_attempt AND d.status = 'in_progress'
            RETURNING d.* INTO k;
            IF NOT FOUND THEN
                EXIT ordinary;  -- nothing was written yet
            END IF;
        END IF;
        INSERT INTO durable_checkpoints AS c
            (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256, size_bytes,
             stored_bytes, execution_id, node_name)
        VALUES (p_namespace, p_workflow_id, p_instance_key, inst.last_sequence + 1, p_step_name, p_encoding,
                p_state, p_sha256, p_size_bytes, octet_length(p_state), p_execution_id, p_node_name)
        RETURNING c.sequence, c.created_at INTO written;
        UPDATE durable_instances i
        SET last_sequence = written.sequence, last_step = p_step_name, checkpoint_count = i.checkpoint_count + 1,
            lease_owner = p_execution_id,
            lease_expires_at = now() + make_interval(secs => coalesce(nullif(p_lease_seconds, 0),
                                                                       nullif(inst.lease_seconds, 0),
                                                                       p_default_lease_seconds)),
            updated_at = now()
        WHERE i.namespace = p_namespace AND i.workflow_id = p_workflow_id AND i.instance_key = p_instance_key;
        RETURN QUERY SELECT 'written'::text, written.sequence, written.created_at, k.status, k.fingerprint,
                            k.attempt, k.holder, k.lease_expires_at, k.result_json, k.error_message,
                            k.expires_at, k.created_at, k.updated_at;
        RETURN;
    END ordinary;
    RETURN QUERY SELECT 'fallback'::text, NULL::bigint, NULL::timestamptz, NULL::text, NULL::text,
                        NULL::bigint, NULL::text, NULL::timestamptz, NULL::bytea, NULL::text,
                        NULL::timestamptz, NULL::timestamptz, NULL::timestamptz;
END
$$;
