-- Marks many jobs succeeded in one statement when each (id, lease) is the job's current lease
-- and the job is in state $5; returns the ids it settled. Rows are updated in id order so two
-- overlapping batches cannot deadlock.
-- $1 ids, $2 leases, $3 now, $4 tenants (the caller's scope), $5 state
UPDATE jobs.job j
   SET state = 'succeeded', finished_at = $3, lease_until = NULL,
       -- A unique job keeps its key for unique_for after it succeeded.
       unique_hold = j.unique_hold AND j.unique_for IS NOT NULL
  FROM (SELECT s.id, s.lease FROM unnest($1::bigint[], $2::uuid[]) AS s(id, lease) ORDER BY s.id) AS s
 WHERE j.id = s.id AND j.lease = s.lease AND j.state = $5::jobs.state
   AND ($4::text[] IS NULL OR (j.tenant IS NULL AND cardinality($4::text[]) = 0) OR j.tenant = ANY ($4::text[]))
RETURNING j.id, j.lease, j.queue, j.group_key, j.tenant, j.dependents
