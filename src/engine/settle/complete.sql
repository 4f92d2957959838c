-- Marks a job succeeded when (id, lease) is its current lease (Rule 4) and it is in state $6: running,
-- or queued by a reclaim that no newer claim has followed ("done wins"). No row: the caller
-- classifies the miss.
-- $1 id, $2 lease, $3 result, $4 now, $5 tenants (the caller's scope: NULL for every job, '{}'
-- for jobs without a tenant), $6 state
UPDATE jobs.job j
   SET state = 'succeeded', result = $3, finished_at = $4, lease_until = NULL,
       -- A unique job keeps its key for unique_for after it succeeded.
       unique_hold = j.unique_hold AND j.unique_for IS NOT NULL
 WHERE j.id = $1 AND j.lease = $2 AND j.state = $6::jobs.state
   AND ($5::text[] IS NULL OR (j.tenant IS NULL AND cardinality($5::text[]) = 0) OR j.tenant = ANY ($5::text[]))
RETURNING j.queue, j.group_key, j.tenant, j.dependents
