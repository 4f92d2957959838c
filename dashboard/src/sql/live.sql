-- Per queue, what changes from second to second: queued jobs due (ready) and not yet due
-- (scheduled), those of them waiting for their group, running jobs, and the oldest ready
-- job's age in seconds. Each set is read through the partial index that holds it (the claim
-- index, the group-wait index, the lease index), so a table full of finished jobs costs
-- nothing here. Row-level security limits it to the role's tenants.
WITH queued AS (
    SELECT j.queue,
           count(*) FILTER (WHERE j.run_at <= now()) AS ready,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest_ready
      FROM jobs.job j
     WHERE j.state = 'queued' AND NOT j.group_wait
     GROUP BY j.queue
), grouped AS (
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
       (coalesce(qd.ready, 0) + coalesce(g.ready, 0))::bigint AS ready,
       (coalesce(qd.scheduled, 0) + coalesce(g.scheduled, 0))::bigint AS scheduled,
       coalesce(r.running, 0)::bigint AS running,
       coalesce(extract(epoch FROM now() - least(qd.oldest_ready, g.oldest_ready)), 0)::float8
           AS oldest_ready_seconds
  FROM jobs.queue q
  LEFT JOIN queued qd ON qd.queue = q.name
  LEFT JOIN grouped g ON g.queue = q.name
  LEFT JOIN running r ON r.queue = q.name
 ORDER BY q.name
