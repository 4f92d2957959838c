-- The settings of queue $1 a claim needs: its rate limit and burst, how many jobs of one group
-- may run at once, the lease length of claims that name none, whether it is paused, and
-- whether its jobs are in the kinds index (claims_by_kind).
-- $1 queue
SELECT rate_limit, rate_burst, group_concurrency, lease, paused, claims_by_kind
  FROM jobs.queue WHERE name = $1
