-- The job with id $1, as a row of jobs.job.
-- $1 id, $2 tenants (the caller's scope)
SELECT j AS job FROM jobs.job j WHERE j.id = $1 AND ($2::text[] IS NULL OR (j.tenant IS NULL AND cardinality($2::text[]) = 0) OR j.tenant = ANY ($2::text[]))
