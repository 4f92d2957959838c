-- Picks up to $2 due jobs of queue $1 in claim order (priority, then run_at, then id) and
-- takes each one's job lock, skipping jobs whose lock another claim holds. It locks no rows:
-- the update that claims them runs next, with a fresh snapshot. Nothing for a paused or
-- unknown queue.
-- $1 queue, $2 n, $3 kinds (NULL: any), $4 now
SELECT due.id
  FROM jobs.queued_priorities($1) AS p(priority)
 CROSS JOIN LATERAL (
        SELECT j.id
          FROM jobs.job j
         WHERE j.queue = $1
           AND j.state = 'queued'
           AND j.priority = p.priority
           AND j.run_at <= $4
           AND ($3::text[] IS NULL OR j.kind = ANY ($3::text[]))
         ORDER BY j.run_at, j.id
        OFFSET 0  -- keeps the subquery (and its order) intact: locks are tried in claim order
       ) AS due
 WHERE EXISTS (SELECT FROM jobs.queue q WHERE q.name = $1 AND NOT q.paused)
   AND jobs.try_lock_job(due.id)
 LIMIT $2
