-- The lowest priority that has queued jobs in queue $1 (as this transaction sees them), or
-- no row: a claim may move the claim floor to another priority only when no lower one has
-- jobs.
-- $1 queue
SELECT j.priority
  FROM jobs.job j
 WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
   AND j.state = 'queued' AND NOT j.group_wait
 ORDER BY j.priority
 LIMIT 1
