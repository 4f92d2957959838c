-- The backoff settings of queue $1, for the message that refuses a backoff_max below
-- backoff_base.
-- $1 queue
SELECT backoff_base, backoff_max FROM jobs.queue WHERE name = $1
