-- durable_save_checkpoints(): a batched save of checkpoints in one round trip
-- (issue 18; first created by migration 0009).
--
-- durable_save_checkpoints() is the batch path of services/checkpoints.py (the
-- items that neither add a step result nor complete a key) as one function call
-- in autocommit, instead of BEGIN, a locking SELECT, an INSERT, an UPDATE and
-- COMMIT with every row mapped in the sidecar. The same decisions, in the same
-- order:
--
-- 1. lock the batch's instances in (workflow_id, instance_key) order, as the
--    transaction does (concurrent batches cannot deadlock);
-- 2. walk the items in order: a repeated save of an instance's newest step with
--    the same SHA-256 is that checkpoint (the one this batch is about to write,
--    or the stored one); otherwise a finished instance, or an expected sequence
--    that is not the newest, refuses the whole batch (nothing is written);
--    otherwise the item is the instance's next sequence;
-- 3. insert the new checkpoints and advance the instances (sequence, step,
--    count, lease owner and expiry), one statement each.
--
-- p_instances: a JSON array of [workflow_id, instance_key], each instance once;
-- p_items: a JSON array of objects, one an item in request order:
--   n (0-based index), u (1-based index into p_instances), step, enc, sha, size,
--   len and o (the encoded state is p_states' bytes o .. o+len-1, 1-based),
--   exec, node, expected (null: none), lease (0: the instance's own length).
-- One row an item (o_item): o_outcome 'written' (o_sequence), 'pending' (the
-- same as item o_src, written by this batch) or 'deduplicated' (the stored
-- checkpoint's columns); or a refusal row, 'not_found', 'finished' or 'stale'
-- (o_last_sequence says where the instance stands): the sidecar raises it and
-- nothing was written.
CREATE OR REPLACE FUNCTION durable_save_checkpoints(
    p_namespace text, p_instances json, p_items json, p_states bytea, p_default_lease_seconds integer)
RETURNS TABLE (o_outcome text, o_item integer, o_last_sequence bigint, o_sequence bigint, o_src integer,
               o_step_name text, o_sha256 text, o_size_bytes bigint, o_stored_bytes bigint, o_execution_id text,
               o_node_name text, o_created_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    inst record;
    it record;
    stored record;
    k integer;
    n_inst integer := json_array_length(p_instances);
    s_found boolean[] := array_fill(false, ARRAY[n_inst]);
    s_final boolean[] := array_fill(false, ARRAY[n_inst]);
    s_last bigint[] := array_fill(0::bigint, ARRAY[n_inst]);
    s_step text[] := array_fill(''::text, ARRAY[n_inst]);
    s_lease integer[] := array_fill(0, ARRAY[n_inst]);
    s_pending integer[] := array_fill(NULL::integer, ARRAY[n_inst]);
    s_sha text[] := array_fill(''::text, ARRAY[n_inst]);
    s_added integer[] := array_fill(0, ARRAY[n_inst]);
    s_owner text[] := array_fill(''::text, ARRAY[n_inst]);
    s_lease_out integer[] := array_fill(0, ARRAY[n_inst]);
    s_wf text[];
    s_key text[];
    s_tid tid[] := array_fill(NULL::tid, ARRAY[n_inst]);
    r_item integer[] := '{}';
    r_seq bigint[] := '{}';
BEGIN
    SELECT array_agg(u.v->>0 ORDER BY u.idx), array_agg(u.v->>1 ORDER BY u.idx) INTO s_wf, s_key
    FROM json_array_elements(p_instances) WITH ORDINALITY AS u(v, idx);
    -- The keys in order, each looked up (and locked) by the primary key: a subquery that locks rows is
    -- never flattened, so no plan can scan the namespace's instances instead (the generic plan of a join
    -- did, before PostgreSQL had statistics of the table).
    FOR inst IN
        SELECT u.idx::integer AS idx, l.*
        FROM (SELECT t.wf, t.key, t.idx FROM unnest(s_wf, s_key) WITH ORDINALITY AS t(wf, key, idx)
              ORDER BY t.wf, t.key) AS u
        CROSS JOIN LATERAL (
            SELECT i.ctid AS tid, i.status, i.last_sequence, i.last_step, i.lease_seconds
            FROM durable_instances i
            WHERE i.namespace = p_namespace AND i.workflow_id = u.wf AND i.instance_key = u.key
            FOR UPDATE) AS l
    LOOP
        s_tid[inst.idx] := inst.tid;
        s_found[inst.idx] := true;
        s_final[inst.idx] := inst.status <> 'running';
        s_last[inst.idx] := inst.last_sequence;
        s_step[inst.idx] := inst.last_step;
        s_lease[inst.idx] := coalesce(nullif(inst.lease_seconds, 0), p_default_lease_seconds);
    END LOOP;
    o_created_at := now();
    FOR it IN
        SELECT * FROM json_to_recordset(p_items)
            AS x(n integer, u integer, step text, sha text, exec text, expected bigint, lease integer)
    LOOP
        k := it.u;
        o_item := it.n;
        IF NOT s_found[k] THEN
            o_outcome := 'not_found';
            RETURN NEXT;
            RETURN;
        END IF;
        IF s_last[k] > 0 AND s_step[k] = it.step THEN
            -- The same step saved again with the same state (a retry) is the checkpoint already there.
            IF s_pending[k] IS NOT NULL THEN
                IF s_sha[k] = it.sha THEN
                    o_outcome := 'pending';
                    o_sequence := s_last[k];
                    o_src := s_pending[k];
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            ELSE
                SELECT c.sequence, c.step_name, c.sha256, c.size_bytes, c.stored_bytes, c.execution_id, c.node_name,
                       c.created_at
                INTO stored
                FROM durable_checkpoints c
                WHERE c.namespace = p_namespace AND c.workflow_id = s_wf[k] AND c.instance_key = s_key[k] AND c.sequence = s_last[k] AND c.sha256 = it.sha;
                IF FOUND THEN
                    RETURN QUERY SELECT 'deduplicated'::text, it.n, s_last[k], stored.sequence, NULL::integer,
                                        stored.step_name, stored.sha256, stored.size_bytes, stored.stored_bytes,
                                        stored.execution_id, stored.node_name, stored.created_at;
                    CONTINUE;
                END IF;
            END IF;
        END IF;
        IF s_final[k] THEN
            o_outcome := 'finished';
            o_last_sequence := s_last[k];
            RETURN NEXT;
            RETURN;
        END IF;
        IF it.expected IS NOT NULL AND it.expected <> s_last[k] THEN
            o_outcome := 'stale';
            o_last_sequence := s_last[k];
            RETURN NEXT;
            RETURN;
        END IF;
        s_last[k] := s_last[k] + 1;
        s_step[k] := it.step;
        s_pending[k] := it.n;
        s_sha[k] := it.sha;
        s_added[k] := s_added[k] + 1;
        s_owner[k] := it.exec;
        s_lease_out[k] := coalesce(nullif(it.lease, 0), s_lease[k]);
        r_item := r_item || it.n;
        r_seq := r_seq || s_last[k];
        o_outcome := 'written';
        o_sequence := s_last[k];
        o_src := it.n;
        RETURN NEXT;
    END LOOP;
    IF cardinality(r_item) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO durable_checkpoints
        (namespace, workflow_id, instance_key, sequence, step_name, encoding, state, sha256, size_bytes,
         stored_bytes, execution_id, node_name)
    SELECT p_namespace, s_wf[x.u], s_key[x.u], r.seq, x.step, x.enc,
           substring(p_states FROM x.o FOR x.len), x.sha, x.size, x.len, x.exec, x.node
    FROM unnest(r_item, r_seq) AS r(n, seq)
    JOIN json_to_recordset(p_items)
        AS x(n integer, u integer, step text, enc smallint, sha text, size bigint, len integer, o integer,
             exec text, node text)
      ON x.n = r.n;
    UPDATE durable_instances AS i
    SET last_sequence = a.seq, last_step = a.step, checkpoint_count = i.checkpoint_count + a.added,
        lease_owner = a.owner, lease_expires_at = now() + make_interval(secs => a.lease), updated_at = now()
    FROM unnest(s_tid, s_last, s_step, s_added, s_owner, s_lease_out) AS a(tid, seq, step, added, owner, lease)
    -- The rows locked above, by their physical address (a locked row cannot move): one TID probe each.
    WHERE a.added > 0 AND i.ctid = a.tid;
END
$$;
