-- Running jobs whose lease ends within $1 seconds (or has ended), soonest first.
-- $1 seconds
SELECT j.id, j.queue, j.kind, j.worker, extract(epoch FROM j.lease_until - now())::float8 AS lease_left
  FROM jobs.job j
 WHERE j.state = 'running' AND j.lease_until IS NOT NULL
   AND j.lease_until < now() + make_interval(secs => $1::float8)
 ORDER BY j.lease_until
 LIMIT 50
