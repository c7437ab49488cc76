-- Issue 20: the nodes' Save that also claims the next Idempotency Guard's key
-- (SaveCheckpointItem.claim_next) in the same round trip and transaction.
--
-- durable_save_step() (0010) is called as it is; when it wrote and a key is
-- named, the key is inserted in progress with attempt 1 for the claim's holder
-- (a key never seen: the Guard's usual case). A key that exists already is left
-- alone and c_status comes back NULL: the sidecar then claims it by the Claim
-- path, which decides every other case (a retry by the same holder, a replay,
-- an expired key, a take-over, a mismatch). So the claim is made only together
-- with the save it follows: a fenced or refused save claims nothing.
--
-- A new function beside 0010's, not a replacement: a sidecar of the previous
-- release keeps calling durable_save_step() during a rolling upgrade.
CREATE FUNCTION durable_save_step_claim(
    p_namespace text, p_workflow_id text, p_instance_key text, p_step_name text, p_encoding smallint,
    p_state bytea, p_sha256 text, p_size_bytes bigint, p_execution_id text, p_node_name text,
    p_expected_sequence bigint, p_lease_seconds integer, p_default_lease_seconds integer,
    p_base_sequence bigint, p_base_digest text,
    p_key_scope text, p_key text, p_key_attempt bigint, p_key_result bytea,
    p_claim_scope text, p_claim_key text, p_claim_fingerprint text, p_claim_holder text,
    p_claim_lease_seconds integer, p_claim_ttl_seconds integer)
RETURNS TABLE (outcome text, sequence bigint, created_at timestamptz,
               k_status text, k_fingerprint text, k_attempt bigint, k_holder text,
               k_lease_expires_at timestamptz, k_result_json bytea, k_error_message text,
               k_expires_at timestamptz, k_created_at timestamptz, k_updated_at timestamptz,
               c_status text, c_fingerprint text, c_attempt bigint, c_holder text,
               c_lease_expires_at timestamptz, c_expires_at timestamptz, c_created_at timestamptz,
               c_updated_at timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    s record;
    c durable_idempotency_keys%ROWTYPE;  -- all NULL unless the claim inserted the key
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
    RETURN QUERY SELECT s.outcome, s.sequence, s.created_at, s.k_status, s.k_fingerprint, s.k_attempt, s.k_holder,
                        s.k_lease_expires_at, s.k_result_json, s.k_error_message, s.k_expires_at, s.k_created_at,
                        s.k_updated_at, c.status, c.fingerprint, c.attempt, c.holder, c.lease_expires_at,
                        c.expires_at, c.created_at, c.updated_at;
END
$$;
