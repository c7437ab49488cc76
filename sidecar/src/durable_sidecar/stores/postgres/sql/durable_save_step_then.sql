-- durable_save_step_then() (issue 20; first created by migration 0012): the
-- nodes' Save that also claims the next Idempotency Guard's key
-- (SaveCheckpointItem.claim_next) or completes its instance (complete_instance)
-- in the same round trip and transaction.
--
-- durable_save_step() is called as it is. When it wrote:
-- * with a key to claim named, the key is inserted in progress with attempt 1 for
--   the claim's holder (a key never seen: the Guard's usual case). A key that
--   exists already is left alone and c_status comes back NULL: the sidecar then
--   claims it by the Claim path, which decides every other case (a retry by the
--   same holder, a replay, an expired key, a take-over, a mismatch);
-- * with p_complete_instance, the instance is completed as
--   InstanceStore.finish_running_txn completes it (the lease the save just renewed
--   is dropped, a COMPLETED event by the saving execution), and comes back in i_*.
-- So the claim and the completion happen only together with the save they follow:
-- a fenced or refused save (outcome 'fallback') claims and completes nothing, and
-- the sidecar's transaction decides as before.
--
-- A function beside durable_save_step(), not a replacement: its arguments and
-- result columns differ, and a sidecar of an earlier release may still call
-- durable_save_step() during a rolling upgrade.
CREATE OR REPLACE FUNCTION durable_save_step_then(
    p_namespace text, p_workflow_id text, p_instance_key text, p_step_name text, p_encoding smallint,
    p_state bytea, p_sha256 text, p_size_bytes bigint, p_execution_id text, p_node_name text,
    p_expected_sequence bigint, p_lease_seconds integer, p_default_lease_seconds integer,
    p_base_sequence bigint, p_base_digest text,
    p_key_scope text, p_key text, p_key_attempt bigint, p_key_result bytea,
    p_claim_scope text, p_claim_key text, p_claim_fingerprint text, p_claim_holder text,
    p_claim_lease_seconds integer, p_claim_ttl_seconds integer, p_complete_instance boolean)
RETURNS TABLE (outcome text, sequence bigint, created_at timestamptz,
               k_status text, k_fingerprint text, k_attempt bigint, k_holder text,
               k_lease_expires_at timestamptz, k_result_json bytea, k_error_message text,
               k_expires_at timestamptz, k_created_at timestamptz, k_updated_at timestamptz,
               c_status text, c_fingerprint text, c_attempt bigint, c_holder text,
               c_lease_expires_at timestamptz, c_expires_at timestamptz, c_created_at timestamptz,
               c_updated_at timestamptz,
               i_namespace text, i_workflow_id text, i_instance_key text, i_status text, i_bound_version int8,
               i_version_label text, i_lease_owner text, i_lease_expires_at timestamptz, i_wake_at timestamptz,
               i_last_sequence int8, i_last_step text, i_checkpoint_count int8, i_resume_count int8,
               i_error_message text, i_result_json bytea, i_created_by_execution_id text,
               i_created_at timestamptz, i_updated_at timestamptz, i_finished_at timestamptz,
               i_lease_seconds int4, i_awaited_event text, i_wake_reason text, i_wait_outcome text,
               i_wait_sequence int8, i_wait_event_id int8, i_retry_max_resumes int4, i_retry_initial_ms int8,
               i_retry_max_ms int8, i_retry_multiplier float8, i_retry_jitter float8, i_attempt int4,
               i_attempt_sequence int8, i_last_error text, i_suspended_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s record;
    c durable_idempotency_keys%ROWTYPE;  -- all NULL unless the claim inserted the key
    i durable_instances%ROWTYPE;  -- all NULL unless the instance was completed
BEGIN
    SELECT * INTO s FROM durable_save_step(
        p_namespace, p_workflow_id, p_instance_key, p_step_name, p_encoding, p_state, p_sha256, p_size_bytes,
        p_execution_id, p_node_name, p_expected_sequence, p_lease_seconds, p_default_lease_seconds,
        p_base_sequence, p_base_digest, p_key_scope, p_key, p_key_attempt, p_key_result);
    IF s.outcome = 'written' AND p_claim_key IS NOT NULL THEN
        -- As IdempotencyStore.insert_txn: a key lives its ttl, and never ends before its lease.
        INSERT INTO durable_idempotency_keys AS d
            (namespace, scope, key, status, fingerprint, attempt, holder, lease_expires_at, expires_at)
        VALUES (p_namespace, p_claim_scope, p_claim_key, 'in_progress', p_claim_fingerprint, 1, p_claim_holder,
                now() + make_interval(secs => p_claim_lease_seconds),
                greatest(now() + make_interval(secs => p_claim_ttl_seconds),
                         now() + make_interval(secs => p_claim_lease_seconds)))
        ON CONFLICT DO NOTHING
        RETURNING d.* INTO c;
    END IF;
    IF s.outcome = 'written' AND p_complete_instance THEN
        -- The row is locked and running (durable_save_step checked both); 'running' is also the
        -- stored status of a suspended instance, which completes like a running one.
        UPDATE durable_instances AS d
        SET status = 'completed', error_message = '', result_json = NULL, lease_owner = '',
            lease_expires_at = NULL, wake_at = NULL, finished_at = now(), updated_at = now()
        WHERE d.namespace = p_namespace AND d.workflow_id = p_workflow_id AND d.instance_key = p_instance_key
          AND d.status = 'running'
        RETURNING d.* INTO i;
        INSERT INTO durable_instance_events (namespace, workflow_id, instance_key, kind, actor, detail)
        VALUES (p_namespace, p_workflow_id, p_instance_key, 'completed', p_execution_id, '');
    END IF;
    RETURN QUERY SELECT s.outcome, s.sequence, s.created_at, s.k_status, s.k_fingerprint, s.k_attempt, s.k_holder,
                        s.k_lease_expires_at, s.k_result_json, s.k_error_message, s.k_expires_at, s.k_created_at,
                        s.k_updated_at, c.status, c.fingerprint, c.attempt, c.holder, c.lease_expires_at,
                        c.expires_at, c.created_at, c.updated_at,
                        i.namespace, i.workflow_id, i.instance_key, i.status, i.bound_version, i.version_label,
                        i.lease_owner, i.lease_expires_at, i.wake_at, i.last_sequence, i.last_step,
                        i.checkpoint_count, i.resume_count, i.error_message, i.result_json,
                        i.created_by_execution_id, i.created_at, i.updated_at, i.finished_at, i.lease_seconds,
                        i.awaited_event, i.wake_reason, i.wait_outcome, i.wait_sequence, i.wait_event_id,
                        i.retry_max_resumes, i.retry_initial_ms, i.retry_max_ms, i.retry_multiplier,
                        i.retry_jitter, i.attempt, i.attempt_sequence, i.last_error, i.suspended_at;
END
$$;
