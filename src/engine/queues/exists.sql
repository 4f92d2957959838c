-- Whether queue $1 exists.
-- $1 queue
SELECT true AS found FROM jobs.queue WHERE name = $1
