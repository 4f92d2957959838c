-- The ids of a queue's jobs a bulk action acts on: as jobs.sql selects them, at most $9.
-- (NULL parameters: no filter.)
-- $1 queue, $2 state, $3 kind, $4 tenant, $5 group, $6 created from, $7 created before,
-- $8 before id, $9 limit
SELECT j.id
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
 ORDER BY j.id DESC
 LIMIT $9::int
