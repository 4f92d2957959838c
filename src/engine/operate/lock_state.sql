-- Locks a job and reads its latest committed state, for operations that decide by state.
-- Another tenant's job is no job at all to the caller.
-- $1 id, $2 tenants (the caller's scope)
SELECT j.state::text AS state, j.queue, j.group_key, j.tenant, j.unique_key, j.dependents, j.after
  FROM jobs.job j
 WHERE j.id = $1
   AND ($2::text[] IS NULL OR (j.tenant IS NULL AND cardinality($2::text[]) = 0) OR j.tenant = ANY ($2::text[]))
   FOR UPDATE
