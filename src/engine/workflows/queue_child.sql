-- Queues waiting job $1 when no dependency row of it is left, under the latest snapshot (the
-- caller holds its row, or deleted every one of its rows itself). Returns its queue and claim
-- position, to report it queued; no row when it still waits or no longer waits.
-- $1 child
UPDATE jobs.job j
   SET state = 'queued'
 WHERE j.id = $1
   AND j.state = 'waiting'
   AND NOT EXISTS (SELECT FROM jobs.job_dependency d WHERE d.child = $1)
RETURNING j.queue, j.priority, j.run_at, j.id
