-- The state of each job among (id, lease) pairs whose current lease is that lease: a settle
-- call that changed nothing answers 'cancelled' for a cancelled one, tries again for one a
-- reclaim put back in the queue, and answers 'lost' for the rest.
-- $1 ids, $2 leases, $3 tenants (the caller's scope: another tenant's job is 'lost')
SELECT j.id, j.state::text AS state, j.lease, j.queue, j.group_key, j.tenant
  FROM unnest($1::bigint[], $2::uuid[]) AS s(id, lease)
  JOIN jobs.job j ON j.id = s.id AND j.lease = s.lease
 WHERE ($3::text[] IS NULL OR (j.tenant IS NULL AND cardinality($3::text[]) = 0) OR j.tenant = ANY ($3::text[]))
