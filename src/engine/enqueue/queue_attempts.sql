-- The attempts of queue $1's jobs (insert_slot_routed.sql's default).
-- $1 queue
SELECT q.max_attempts FROM jobs.queue q WHERE q.name = $1
