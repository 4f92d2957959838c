-- Inserts one job per element of $2 into queue $1 and returns their ids in payload order (ids
-- are drawn as rows are inserted, in ordinality order); no rows when the queue does not exist.
-- $1 queue, $2 payloads, $3 kind, $4 run_at, $5 priority, $6 max_attempts (NULL: the queue's),
-- $7 headers, $8 tenant, $9 group_key (for every job), $10 group_keys (one per payload,
-- NULL: $9)
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant, group_key)
SELECT q.name, $3, u.payload, $7, $5, $4, coalesce($6, q.max_attempts), $8, coalesce(u.group_key, $9)
  FROM jobs.queue q
 CROSS JOIN unnest($2::jsonb[], $10::text[]) WITH ORDINALITY AS u(payload, group_key, ord)
 WHERE q.name = $1
 ORDER BY u.ord
RETURNING id
