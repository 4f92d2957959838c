-- Hands a job held under (id, lease) back without spending its attempt (Rule 3): queued again after
-- $4, under no lease. Returns its queue and run_at; no row: the caller classifies the miss.
-- $1 id, $2 lease, $3 reason, $4 retry_in, $5 now, $6 tenants (the caller's scope), $7 state
-- (running, or queued after a reclaim)
UPDATE jobs.job j
   SET state          = 'queued',
       attempt        = greatest(attempt - 1, 0),
       run_at         = $5 + $4,
       lease          = NULL,
       lease_until    = NULL,
       release_reason = $3
 WHERE j.id = $1 AND j.lease = $2 AND j.state = $7::jobs.state
   AND ($6::text[] IS NULL OR (j.tenant IS NULL AND cardinality($6::text[]) = 0) OR j.tenant = ANY ($6::text[]))
RETURNING j.queue, j.priority, j.run_at, j.id, j.group_key, j.tenant
