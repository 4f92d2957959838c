-- After a claim that got nothing: whether the queue is paused (no row: it does not exist),
-- and the earliest run_at of its queued jobs (NULL when it has none), which tells a waiting
-- claim when to look again.
-- $1 queue
SELECT q.paused AS paused,
       (SELECT min(first.run_at)
          FROM jobs.queued_priorities($1) AS p(priority)
         CROSS JOIN LATERAL (
                SELECT j.run_at
                  FROM jobs.job j
                 WHERE j.queue = $1 AND j.state = 'queued' AND j.priority = p.priority
                 ORDER BY j.run_at
                 LIMIT 1
               ) AS first) AS earliest_run_at
  FROM jobs.queue q
 WHERE q.name = $1
