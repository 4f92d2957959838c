-- Inserts one job holding unique key $10 in queue $1 (for the tenant $8), unless another job
-- holds it: then no row (also when the queue does not exist). A holder still being inserted by
-- another transaction is waited for, so when that transaction rolls back this insert goes
-- ahead. The caller holds the queue's shared lock.
-- $1 queue, $2 payload, $3 kind, $4 run_at, $5 priority, $6 max_attempts, $7 headers,
-- $8 tenant, $9 group_key, $10 unique_key, $11 unique_for
-- kind_indexed: the queue's claims_by_kind, read after the caller took the queue's lock, or
-- true when this transaction's snapshot may be older than the setting
-- (engine::queues::create_or_update).
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant,
                      group_key, unique_key, unique_hold, unique_for, kind_indexed)
SELECT q.name, $3, $2, $7, $5, $4, coalesce($6, q.max_attempts), $8, $9, $10, true, $11,
       q.claims_by_kind OR current_setting('transaction_isolation') <> 'read committed'
  FROM jobs.queue q
 WHERE q.name = $1
ON CONFLICT (queue, (COALESCE(tenant, '')), unique_key) WHERE unique_hold DO NOTHING
RETURNING id
