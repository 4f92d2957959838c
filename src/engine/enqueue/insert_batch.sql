-- Inserts one job per element of $2 into queue $1 and returns their ids in payload order (ids
-- are drawn as rows are inserted, in ordinality order); no rows when the queue does not exist.
-- $1 queue, $2 payloads, $3 kind, $4 run_at, $5 priority, $6 max_attempts (NULL: the queue's),
-- $7 headers, $8 tenant, $9 group_key (for every job), $10 group_keys (one per payload,
-- NULL: $9), $11 group_waits (one per payload, NULL: none): the jobs that wait for the
-- batch's own jobs of their group go in marked (engine::groups::waits_in_batch)
-- kind_indexed: the queue's claims_by_kind, read after the caller took the queue's lock, or
-- true when this transaction's snapshot may be older than the setting
-- (engine::queues::create_or_update).
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant, group_key,
                      group_wait, kind_indexed)
SELECT q.name, $3, u.payload, $7, $5, $4, coalesce($6, q.max_attempts), $8, coalesce(u.group_key, $9),
       coalesce(u.group_wait, false),
       q.claims_by_kind OR current_setting('transaction_isolation') <> 'read committed'
  FROM jobs.queue q
 CROSS JOIN unnest($2::jsonb[], $10::text[], $11::boolean[]) WITH ORDINALITY
            AS u(payload, group_key, group_wait, ord)
 WHERE q.name = $1
 ORDER BY u.ord
RETURNING id
