-- Records a failed attempt of a job held under (id, lease) (Rule 6). While attempts remain and $5
-- allows it, the job is queued again after $4 or the queue's backoff, under no lease; else it
-- ends failed. Returns the new state, run_at and queue; no row: the caller classifies the miss.
-- $1 id, $2 lease, $3 error, $4 retry_in, $5 retry, $6 now, $7 tenants (the caller's scope),
-- $8 state (running, or queued after a reclaim)
UPDATE jobs.job j
   SET state       = CASE WHEN $5 AND j.attempt < j.max_attempts
                          THEN 'queued' ELSE 'failed' END::jobs.state,
       run_at      = CASE WHEN $5 AND j.attempt < j.max_attempts
                          THEN $6 + coalesce($4, jobs.backoff_delay(q.backoff_base, q.backoff_max, q.jitter, j.attempt))
                          ELSE j.run_at END,
       lease       = CASE WHEN $5 AND j.attempt < j.max_attempts THEN NULL ELSE j.lease END,
       lease_until = NULL,
       finished_at = CASE WHEN $5 AND j.attempt < j.max_attempts THEN NULL ELSE $6 END,
       errors      = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', $6, 'error', $3)),
       -- A unique job that ends failed frees its key; one retried keeps it.
       unique_hold = j.unique_hold AND $5 AND j.attempt < j.max_attempts
  FROM jobs.queue q
 WHERE j.id = $1 AND j.lease = $2 AND j.state = $8::jobs.state AND q.name = j.queue
   AND ($7::text[] IS NULL OR (j.tenant IS NULL AND cardinality($7::text[]) = 0) OR j.tenant = ANY ($7::text[]))
RETURNING j.state::text AS state, j.queue, j.priority, j.run_at, j.id, j.group_key, j.tenant, j.dependents
