-- Per queue, what changes from second to second: queued jobs due (ready) and not yet due
-- (scheduled), those waiting for their group included, running jobs, and the oldest ready
-- job's age in seconds. Each set is read through the partial index that holds it: the claim
-- index, one range per queue (its leading column is the queue's hash); the group-wait index;
-- the lease index. So a table full of finished jobs costs nothing here, and the claim index
-- is read at most $1 entries deep per queue (in claim order, so due jobs first): a backlog
-- larger than that shows as "at least" (capped) instead of costing a count of all of it each
-- refresh. Row-level security limits it to the role's tenants.
-- $1 most queued jobs counted per queue
WITH grouped AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS ready,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest_ready
      FROM jobs.job j
     WHERE j.group_key IS NOT NULL AND j.group_wait AND j.state = 'queued'
     GROUP BY j.queue
), running AS (
    SELECT j.queue, count(*) AS running
      FROM jobs.job j
     WHERE j.state = 'running' AND j.lease_until IS NOT NULL
     GROUP BY j.queue
)
SELECT q.name AS queue,
       q.paused,
       q.dead_letter,
       (qd.ready + coalesce(g.ready, 0))::bigint AS ready,
       (qd.scheduled + coalesce(g.scheduled, 0))::bigint AS scheduled,
       coalesce(r.running, 0)::bigint AS running,
       coalesce(extract(epoch FROM now() - least(qd.oldest_ready, g.oldest_ready)), 0)::float8
           AS oldest_ready_seconds,
       qd.ready + qd.scheduled >= $1::int AS capped
  FROM jobs.queue q
 CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE j.run_at <= now()) AS ready,
               count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
               min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest_ready
          FROM (SELECT j.run_at
                  FROM jobs.job j
                 WHERE hashtext(j.queue) = hashtext(q.name) AND j.queue = q.name
                   AND j.state = 'queued' AND NOT j.group_wait
                 ORDER BY hashtext(j.queue), j.priority, j.run_at, j.id
                 LIMIT $1::int) j
       ) qd
  LEFT JOIN grouped g ON g.queue = q.name
  LEFT JOIN running r ON r.queue = q.name
 ORDER BY q.name
