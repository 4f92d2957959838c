-- After jobs of groups finished or went back to the queue: clears the mark of the waiting jobs
-- that may run now, so claims find them again. For each group ($1 queues, $2 group keys,
-- $3 tenants, pairwise): with group_concurrency 1, its head (its first unfinished job) when
-- nothing of it runs; with more, its first waiting jobs in enqueue order, as many as it has
-- free slots. Runs under the groups' locks and the latest snapshot: the claims that marked jobs
-- of these groups held those locks until they committed, so every mark is seen. One probe of
-- job_group_wait_idx per group, and of job_group_idx only for a group with waiting jobs,
-- however many jobs it holds (each compares the hash the indexes are keyed by, then the names).
-- A job whose row another transaction holds is skipped, never waited for: that transaction
-- (a late settle of a reclaimed job, a cancel) may itself be waiting for these groups' locks,
-- and every path that changes a queued job of a group moves the group on after it, under the
-- locks and the latest snapshot, so the skipped job is looked at again once it commits.
-- $1 queues, $2 group keys, $3 tenants
WITH groups AS (
    SELECT g.queue, g.group_key, g.tenant, g.hash, q.group_concurrency AS concurrency
      FROM (SELECT DISTINCT u.queue, u.group_key, u.tenant,
                   pg_catalog.hashtextextended(u.group_key, pg_catalog.hashtext(u.queue)) AS hash
              FROM unnest($1::text[], $2::text[], $3::text[]) AS u(queue, group_key, tenant)
           ) AS g
      JOIN jobs.queue q ON q.name = g.queue
), waiting AS (
    -- The groups that have waiting jobs, with the first of them: one probe of the small
    -- job_group_wait_idx per group. A group with none has nothing to clear.
    SELECT g.queue, g.group_key, g.tenant, g.hash, g.concurrency, w.id AS first_waiting
      FROM groups g
     CROSS JOIN LATERAL (
            SELECT h.id
              FROM jobs.job h
             WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue)) = g.hash
               AND h.group_wait AND h.state = 'queued'
               AND h.queue = g.queue AND h.group_key = g.group_key
               AND h.tenant IS NOT DISTINCT FROM g.tenant
             ORDER BY h.id
             LIMIT 1
           ) AS w
), may_run AS (
    -- Concurrency 1: the first waiting job, if it is the group's first entry in job_group_idx
    -- (running jobs first): then nothing of the group runs and it is the head.
    SELECT w.first_waiting AS id
      FROM waiting w
     CROSS JOIN LATERAL (
            SELECT h.id
              FROM jobs.job h
             WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue)) = w.hash
               AND h.queue = w.queue AND h.group_key = w.group_key
               AND (h.state = 'queued' OR h.state = 'running')
               AND h.tenant IS NOT DISTINCT FROM w.tenant
             ORDER BY CASE WHEN h.state = 'running' THEN 0 ELSE h.id END
             LIMIT 1
           ) AS head
     WHERE w.concurrency = 1 AND head.id = w.first_waiting
    UNION ALL
    -- More: the first waiting jobs, one per free slot.
    SELECT next.id
      FROM waiting w
     CROSS JOIN LATERAL (
            SELECT h.id
              FROM jobs.job h
             WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue)) = w.hash
               AND h.group_wait AND h.state = 'queued'
               AND h.queue = w.queue AND h.group_key = w.group_key
               AND h.tenant IS NOT DISTINCT FROM w.tenant
             ORDER BY h.id
             LIMIT greatest(w.concurrency - (
                    SELECT count(*)
                      FROM jobs.job r
                     WHERE pg_catalog.hashtextextended(r.group_key, pg_catalog.hashtext(r.queue)) = w.hash
                       AND CASE WHEN r.state = 'running' THEN 0 ELSE r.id END = 0
                       AND r.state = 'running'
                       AND r.queue = w.queue AND r.group_key = w.group_key
                       AND r.tenant IS NOT DISTINCT FROM w.tenant), 0)
           ) AS next
     WHERE w.concurrency > 1
), free AS (
    SELECT j.id
      FROM jobs.job j
      JOIN may_run ON j.id = may_run.id
     WHERE j.group_wait AND j.state = 'queued'
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs.job j
   SET group_wait = false
  FROM free
 WHERE j.id = free.id
RETURNING j.queue, j.priority, j.run_at, j.id
