-- Jobs newest first, filtered by the arguments given, after keyset position $5. A state of
-- 'ready' or 'scheduled' selects the queued jobs that are due or not yet due.
-- $1 queue, $2 state, $3 kind, $4 limit, $5 before_id, $6 tenants (the caller's scope)
SELECT j AS job
  FROM jobs.job j
 WHERE ($1::text IS NULL OR j.queue = $1)
   AND ($2::text IS NULL
        OR CASE $2::text
             WHEN 'ready' THEN j.state = 'queued' AND j.run_at <= now()
             WHEN 'scheduled' THEN j.state = 'queued' AND j.run_at > now()
             ELSE j.state::text = $2::text
           END)
   AND ($3::text IS NULL OR j.kind = $3)
   AND ($5::bigint IS NULL OR j.id < $5)
   AND ($6::text[] IS NULL OR (j.tenant IS NULL AND cardinality($6::text[]) = 0) OR j.tenant = ANY ($6::text[]))
 ORDER BY j.id DESC
 LIMIT $4
