-- The lowest priority that has queued jobs in queue $1 (as this transaction sees them), or
-- NULL: a claim may move the claim floor to another priority only when no lower one has jobs.
-- $1 queue
SELECT p AS priority FROM jobs.queued_priorities($1) AS p LIMIT 1
