-- Inserts one job into queue $1 and returns its id; no row when the queue does not exist.
-- The caller holds the queue's shared lock, so a concurrent jobs_drop_queue cannot orphan it.
-- $1 queue, $2 payload, $3 kind, $4 run_at, $5 priority, $6 max_attempts (NULL: the queue's),
-- $7 headers, $8 tenant, $9 group_key
-- kind_indexed: the queue's claims_by_kind, read after the caller took the queue's lock, or
-- true when this transaction's snapshot may be older than the setting
-- (engine::queues::create_or_update).
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant, group_key,
                      kind_indexed)
SELECT q.name, $3, $2, $7, $5, $4, coalesce($6, q.max_attempts), $8, $9,
       q.claims_by_kind OR current_setting('transaction_isolation') <> 'read committed'
  FROM jobs.queue q
 WHERE q.name = $1
RETURNING id
