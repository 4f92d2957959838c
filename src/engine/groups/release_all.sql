-- The queue's group_concurrency changed: clears every mark of its waiting jobs, and claims
-- decide again under the new setting (they mark what must still wait). Returns how many it
-- cleared and the first of them in claim order.
-- $1 queue
WITH cleared AS (
    UPDATE jobs.job j
       SET group_wait = false
     WHERE j.queue = $1 AND j.group_key IS NOT NULL AND j.state = 'queued' AND j.group_wait
    RETURNING j.queue, j.priority, j.run_at, j.id
)
SELECT c.queue, c.priority, c.run_at, c.id, count(*) OVER () AS cleared
  FROM cleared c
 ORDER BY c.priority, c.run_at, c.id
 LIMIT 1
