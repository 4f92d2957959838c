-- Locks the jobs $1 (the parents of a job being enqueued or retried) shared, in id order, and
-- reads their latest states: a settle of one of them waits for this transaction, and one that
-- settled first is seen settled. Jobs outside the caller's tenant scope are not found.
-- $1 ids, $2 tenants (the caller's scope)
SELECT j.id, j.state::text AS state, j.tenant
  FROM jobs.job j
 WHERE j.id = ANY ($1::bigint[])
   AND ($2::text[] IS NULL OR (j.tenant IS NULL AND cardinality($2::text[]) = 0) OR j.tenant = ANY ($2::text[]))
 ORDER BY j.id
   FOR SHARE OF j
