-- A page of a queue's jobs, newest first, after keyset position $8 and not below id $10 (the
-- window a page searches, so a filter that matches few jobs never reads the whole history for
-- one page), filtered by the bound parameters (NULL: no filter). State 'ready' and
-- 'scheduled' are the queued jobs due and not yet due. Row-level security limits it to the
-- role's tenants.
-- $1 queue, $2 state, $3 kind, $4 tenant, $5 group, $6 created from, $7 created before,
-- $8 before id, $9 limit, $10 lowest id
SELECT j.id, j.kind, j.state::text AS state, j.attempt, j.max_attempts, j.priority, j.tenant,
       j.group_key, to_char(j.created_at, 'YYYY-MM-DD HH24:MI:SS') AS created,
       to_char(j.run_at, 'YYYY-MM-DD HH24:MI:SS') AS run_at, j.run_at > now() AS later,
       j.worker, left(j.payload::text, 100) AS payload
  FROM jobs.job j
 WHERE j.queue = $1
   AND ($2::text IS NULL
        OR CASE $2::text
             WHEN 'ready' THEN j.state = 'queued' AND j.run_at <= now()
             WHEN 'scheduled' THEN j.state = 'queued' AND j.run_at > now()
             ELSE j.state::text = $2::text
           END)
   AND ($3::text IS NULL OR j.kind = $3::text)
   AND ($4::text IS NULL OR j.tenant = $4::text)
   AND ($5::text IS NULL OR j.group_key = $5::text)
   AND ($6::text IS NULL OR j.created_at >= $6::text::timestamptz)
   AND ($7::text IS NULL OR j.created_at < $7::text::timestamptz)
   AND ($8::bigint IS NULL OR j.id < $8::bigint)
   AND j.id >= $10::bigint
 ORDER BY j.id DESC
 LIMIT $9::int
