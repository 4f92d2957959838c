-- The queue and tenant of each job among $1 that a heartbeat or settle call answered 'lost',
-- for the totals' lost counter (a job purged meanwhile has no row).
-- $1 ids, $2 tenants (the caller's scope)
SELECT j.id, j.queue, j.tenant
  FROM jobs.job j
 WHERE j.id = ANY ($1::bigint[])
   AND ($2::text[] IS NULL OR (j.tenant IS NULL AND cardinality($2::text[]) = 0) OR j.tenant = ANY ($2::text[]))
