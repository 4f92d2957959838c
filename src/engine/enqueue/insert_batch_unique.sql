-- Inserts one job per element of $2 into queue $1, in payload order, skipping each whose
-- unique key another job holds (one inserted earlier in this statement included: the first of
-- duplicates in a batch wins). Returns the id and unique key of each job inserted, in payload
-- order. A holder still being inserted by another transaction is waited for.
-- $1 queue, $2 payloads, $3 kind, $4 run_at, $5 priority, $6 max_attempts, $7 headers,
-- $8 tenant, $9 group_key, $10 group_keys, $11 unique_key (for every job), $12 unique_keys
-- (one per payload, NULL: $11), $13 unique_for
-- kind_indexed: the queue's claims_by_kind, read after the caller took the queue's lock, or
-- true when this transaction's snapshot may be older than the setting
-- (engine::queues::create_or_update).
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant,
                      group_key, unique_key, unique_hold, unique_for, kind_indexed)
SELECT q.name, $3, u.payload, $7, $5, $4, coalesce($6, q.max_attempts), $8,
       coalesce(u.group_key, $9), coalesce(u.unique_key, $11),
       coalesce(u.unique_key, $11) IS NOT NULL, $13,
       q.claims_by_kind OR current_setting('transaction_isolation') <> 'read committed'
  FROM jobs.queue q
 CROSS JOIN unnest($2::jsonb[], $10::text[], $12::text[]) WITH ORDINALITY
            AS u(payload, group_key, unique_key, ord)
 WHERE q.name = $1
 ORDER BY u.ord
ON CONFLICT (queue, (COALESCE(tenant, '')), unique_key) WHERE unique_hold DO NOTHING
RETURNING id, unique_key
