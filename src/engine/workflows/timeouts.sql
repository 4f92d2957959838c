-- Ends up to $2 awaits whose deadline passed by $1 (within the tenants $3): their jobs are
-- queued again, timed out (no payload). An await a signal is deleting is skipped: the signal
-- wakes that job. Returns each job's queue and claim position.
-- $1 now, $2 batch size, $3 tenants (the caller's scope; the worker's is every tenant)
WITH expired AS (
    SELECT a.job
      FROM jobs.job_await a
     WHERE a.deadline <= $1
       AND ($3::text[] IS NULL OR (a.tenant = '' AND cardinality($3::text[]) = 0) OR a.tenant = ANY ($3::text[]))
     ORDER BY a.deadline
     LIMIT $2
       FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM jobs.job_await a
     USING expired e
     WHERE a.job = e.job
    RETURNING a.job
)
UPDATE jobs.job j
   SET state = 'queued', signal = j.signal || '{"timed_out": true}'
  FROM gone g
 WHERE j.id = g.job AND j.state = 'waiting'
RETURNING j.queue, j.priority, j.run_at, j.id
