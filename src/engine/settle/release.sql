-- Hands a job held under (id, lease) back without spending its attempt (Rule 3): queued again after
-- $4, under no lease. Returns its queue and run_at; no row: the caller classifies the miss.
-- $1 id, $2 lease, $3 reason, $4 retry_in, $5 now, $6 state (running, or queued after a
-- reclaim)
UPDATE jobs.job
   SET state          = 'queued',
       attempt        = attempt - 1,
       run_at         = $5 + $4,
       lease          = NULL,
       lease_until    = NULL,
       release_reason = $3
 WHERE id = $1 AND lease = $2 AND state = $6::jobs.state
RETURNING queue, priority, run_at, id
