-- jobs.workers, for jobs_metrics(): per client worker, its running jobs, waiting claims, the
-- leases of its jobs about to run out, and how long ago it was last seen (claim or heartbeat;
-- 0 while a claim of it waits).
SELECT worker, running, waiting, leases_expiring,
       coalesce(extract(epoch FROM now() - last_seen), 0)::float8 AS last_seen_age_seconds
  FROM jobs.workers
 ORDER BY worker
