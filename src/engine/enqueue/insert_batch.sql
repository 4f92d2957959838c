-- Inserts one job per element of $2 into queue $1 and returns their ids in payload order (ids
-- are drawn as rows are inserted, in ordinality order); no rows when the queue does not exist.
-- $1 queue, $2 payloads, $3 kind, $4 run_at, $5 priority, $6 max_attempts (NULL: the queue's),
-- $7 headers, $8 tenant
INSERT INTO jobs.job (queue, kind, payload, headers, priority, run_at, max_attempts, tenant)
SELECT q.name, $3, u.payload, $7, $5, $4, coalesce($6, q.max_attempts), $8
  FROM jobs.queue q
 CROSS JOIN unnest($2::jsonb[]) WITH ORDINALITY AS u(payload, ord)
 WHERE q.name = $1
 ORDER BY u.ord
RETURNING id
