-- The settings of queue $1 a claim needs: its rate limit and burst, how many jobs of one group
-- may run at once, the lease length of claims that name none, and whether it is paused.
-- $1 queue
SELECT rate_limit, rate_burst, group_concurrency, lease, paused FROM jobs.queue WHERE name = $1
