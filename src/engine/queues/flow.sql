-- The flow-control settings of queue $1 a claim needs: its rate limit and burst, and how many
-- jobs of one group may run at once.
-- $1 queue
SELECT rate_limit, rate_burst, group_concurrency FROM jobs.queue WHERE name = $1
