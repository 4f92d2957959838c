-- Picks up to $2 due jobs of queue $1 in claim order (priority, then run_at, then id) and
-- takes each one's job lock, skipping jobs whose lock another claim holds. It locks no rows:
-- the update that claims them runs next, with a fresh snapshot. Nothing for a paused or
-- unknown queue.
--
-- ($5, $6, $7) is the queue's claim floor, when known: no job before it in claim order is
-- claimable, so the scan of the floor's priority starts at it, past the dead index entries
-- of jobs already claimed, and lower priorities are not looked at.
-- $1 queue, $2 n, $3 kinds (NULL: any), $4 now, $5 floor priority, $6 floor run_at,
-- $7 floor id
SELECT due.id
  FROM (SELECT $5, $6, $7 WHERE $5 IS NOT NULL
        UNION ALL
        SELECT p, '-infinity'::timestamptz, -9223372036854775808 FROM jobs.queued_priorities($1, $5) AS p
       ) AS p(priority, after_run_at, after_id)  -- "after" includes the position itself
 CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at
          FROM jobs.job j
         WHERE j.queue = $1
           AND j.state = 'queued'
           AND j.priority = p.priority
           AND (j.run_at, j.id) >= (p.after_run_at, p.after_id)
           AND j.run_at <= $4
           AND ($3::text[] IS NULL OR j.kind = ANY ($3::text[]))
         ORDER BY j.run_at, j.id
        OFFSET 0  -- keeps the subquery (and its order) intact: locks are tried in claim order
       ) AS due
 WHERE EXISTS (SELECT FROM jobs.queue q WHERE q.name = $1 AND NOT q.paused)
   AND jobs.try_lock_job(due.id, due.priority, due.run_at)
 LIMIT $2
