-- Takes back up to $2 jobs whose lease expired before $1 (Rule 5): queued again while attempts remain,
-- else failed with 'lease expired on the final attempt'. The expiry is recorded as the
-- attempt's error. The lease token stays, so a late holder can still finish ("done wins")
-- until the job is claimed again. Rows other sessions hold are skipped. Only leases that ran out
-- within [$4, $5) are looked at: the worker walks job_lease_idx a window at a time
-- (storage::index_walk), as it keeps a dead entry for every job that ran since vacuum last
-- could clean up; jobs_reclaim() passes -infinity and infinity.
-- $1 now, $2 batch size, $3 tenants (the caller's scope; the worker's is every job),
-- $4 and $5 the window of lease_until
WITH expired AS (
    SELECT j.id
      FROM jobs.job j
     WHERE j.state = 'running' AND j.lease_until < $1
       AND j.lease_until >= $4 AND j.lease_until < $5
       AND ($3::text[] IS NULL OR (j.tenant IS NULL AND cardinality($3::text[]) = 0) OR j.tenant = ANY ($3::text[]))
     ORDER BY j.lease_until
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs.job j
   SET state       = CASE WHEN j.attempt < j.max_attempts THEN 'queued' ELSE 'failed' END::jobs.state,
       lease_until = NULL,
       finished_at = CASE WHEN j.attempt < j.max_attempts THEN NULL ELSE $1 END,
       errors      = j.errors || jsonb_build_array(jsonb_build_object(
                         'attempt', j.attempt,
                         'at', $1,
                         'error', CASE WHEN j.attempt < j.max_attempts THEN 'lease expired'
                                       ELSE 'lease expired on the final attempt' END)),
       -- A unique job that ends failed frees its key; one queued again keeps it.
       unique_hold = j.unique_hold AND j.attempt < j.max_attempts
WHERE j.id = ANY (ARRAY(SELECT id FROM expired))
RETURNING j.id, j.queue, j.state::text AS state, j.priority, j.run_at, j.group_key, j.tenant, j.dependents
