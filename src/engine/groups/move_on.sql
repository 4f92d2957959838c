-- After jobs of groups finished or went back to the queue: clears the mark of the waiting jobs
-- that are now among their group's first group_concurrency unfinished jobs in enqueue order, so
-- claims find them again. For each group ($1 queues, $2 group keys, $3 tenants, pairwise). Runs
-- under the groups' locks and the latest snapshot: the claims that marked jobs of these groups
-- held those locks until they committed, so every mark is seen. One probe of job_group_idx
-- per group, however many jobs it holds.
-- $1 queues, $2 group keys, $3 tenants
UPDATE jobs.job j
   SET group_wait = false
  FROM (SELECT w.id
          FROM (SELECT DISTINCT g.queue, g.group_key, g.tenant
                  FROM unnest($1::text[], $2::text[], $3::text[]) AS g(queue, group_key, tenant)
               ) AS g
          JOIN jobs.queue q ON q.name = g.queue
         CROSS JOIN LATERAL (
                SELECT h.id, h.group_wait
                  FROM jobs.job h
                 WHERE h.queue = g.queue AND h.group_key = g.group_key
                   AND (h.state = 'queued' OR h.state = 'running')
                   AND h.tenant IS NOT DISTINCT FROM g.tenant
                 ORDER BY h.id
                 LIMIT q.group_concurrency
               ) AS w
         WHERE w.group_wait
       ) AS next
 WHERE j.id = next.id AND j.group_wait AND j.state = 'queued'
RETURNING j.queue, j.priority, j.run_at, j.id
