-- Jobs newest first, filtered by the arguments given, after keyset position $5.
-- $1 queue, $2 state, $3 kind, $4 limit, $5 before_id
SELECT j
  FROM jobs.job j
 WHERE ($1::text IS NULL OR j.queue = $1)
   AND ($2::text IS NULL OR j.state = $2::jobs.state)
   AND ($3::text IS NULL OR j.kind = $3)
   AND ($5::bigint IS NULL OR j.id < $5)
 ORDER BY j.id DESC
 LIMIT $4
