-- probe.sql for a queue whose claim floor is known: only the queued jobs at or past the floor
-- ($2, $3, $4: its priority, run_at and id) are read. Below the floor lie no queued jobs but
-- those claims in flight hold (the floor never rises past a job a claim skipped, nor to a
-- priority above one that still has queued jobs), and while an old snapshot holds vacuum back
-- the claim index keeps an entry there for every job claimed since: starting at the head made
-- every empty attempt of a waiting claim walk them all.
-- $1 queue, $2 floor priority, $3 floor run_at, $4 floor id
WITH RECURSIVE priorities (priority) AS (
    (SELECT j.priority
       FROM jobs.job j
      WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
        AND j.state = 'queued' AND NOT j.group_wait
        AND (j.priority, j.run_at, j.id) >= ($2, $3, $4)
      ORDER BY j.priority, j.run_at, j.id
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
                   -- From the floor in its own priority. Not (priority, run_at, id) >= the
                   -- floor: next to the equality on priority, the btree starts that scan at
                   -- the priority's head and checks the row comparison on every entry from
                   -- there, the dead ones an old snapshot keeps included.
                   AND (j.run_at, j.id) >= (CASE WHEN p.priority = $2 THEN $3 ELSE '-infinity'::timestamptz END,
                                            CASE WHEN p.priority = $2 THEN $4 ELSE -9223372036854775808 END)
                 ORDER BY j.run_at, j.id
                 LIMIT 1
               ) AS first
         WHERE p.priority IS NOT NULL) AS earliest_run_at
  FROM jobs.queue q
 WHERE q.name = $1
