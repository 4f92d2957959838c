-- After a claim that got nothing: whether the queue is paused (no row: it does not exist),
-- and the earliest run_at of its queued jobs (NULL when it has none), which tells a waiting
-- claim when to look again.
-- $1 queue
WITH RECURSIVE priorities (priority) AS (
    -- The priorities with queued jobs, lowest first: a loose index scan, one probe of
    -- job_claim_idx per priority, however many jobs each holds.
    (SELECT j.priority
       FROM jobs.job j
      WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
        AND j.state = 'queued' AND NOT j.group_wait
      ORDER BY j.priority
      LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority
              FROM jobs.job j
             WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
               AND j.state = 'queued' AND NOT j.group_wait AND j.priority > p.priority
             ORDER BY j.priority
             LIMIT 1)
      FROM priorities p
     WHERE p.priority IS NOT NULL
)
SELECT q.paused AS paused,
       (SELECT min(first.run_at)
          FROM priorities p
         CROSS JOIN LATERAL (
                SELECT j.run_at
                  FROM jobs.job j
                 WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
                   AND j.state = 'queued' AND NOT j.group_wait AND j.priority = p.priority
                 ORDER BY j.run_at
                 LIMIT 1
               ) AS first
         WHERE p.priority IS NOT NULL) AS earliest_run_at
  FROM jobs.queue q
 WHERE q.name = $1
