-- The outcome of each job among $1 the caller may see, in the order given (each once): its
-- state, result, errors and when it finished. Jobs that do not exist (or were purged) have no
-- row.
-- $1 ids, $2 tenants (the caller's scope)
SELECT j.id, j.state::text AS state, j.result, j.errors, j.finished_at
  FROM (SELECT DISTINCT ON (u.id) u.id, u.ord
          FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)
         ORDER BY u.id, u.ord) AS u
  JOIN jobs.job j ON j.id = u.id
 WHERE ($2::text[] IS NULL OR (j.tenant IS NULL AND cardinality($2::text[]) = 0) OR j.tenant = ANY ($2::text[]))
 ORDER BY u.ord
