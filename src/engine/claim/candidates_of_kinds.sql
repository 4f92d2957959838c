-- Due jobs of queue $1 of the kinds in $3 in claim order (priority, then run_at, then id:
-- Rule 2), at most $2, from position ($5, $6, $7) on when given, as candidates.sql gives them
-- for every kind. Read through job_kind_claim_idx, so the jobs of other kinds ahead in claim
-- order are never walked, however many there are: one probe per (kind, priority) finds that
-- pair's first due job, and the pairs' runs merge in claim order. It locks nothing, and does
-- not look at the queue row (see candidates.sql). Only for queues with claims_by_kind, whose
-- unfinished jobs are all in that index (kind_indexed); claims of other queues' kinds read
-- candidates.sql with the kinds.
-- $1 queue, $2 limit, $3 kinds (not NULL), $4 now, $5 start priority, $6 start run_at,
-- $7 start id, $8 tenants (the caller's scope: NULL for every job)
WITH RECURSIVE kind_priorities (kind, priority) AS (
    -- Per kind, its priorities with queued jobs from $5 on (every one when $5 is NULL),
    -- lowest first: a loose index scan, one probe per priority. DISTINCT: a kind named twice
    -- must not give its jobs twice.
    SELECT k.kind,
           (SELECT j.priority
              FROM jobs.job j
             WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
               AND pg_catalog.hashtext(j.kind) = pg_catalog.hashtext(k.kind) AND j.kind = k.kind
               AND j.state = 'queued' AND NOT j.group_wait AND j.kind_indexed
               AND j.priority >= coalesce($5::integer, -32768)
             ORDER BY j.priority
             LIMIT 1)
      FROM (SELECT DISTINCT u.kind COLLATE pg_catalog."C" AS kind
              FROM unnest($3::text[]) AS u(kind)) AS k
    UNION ALL
    SELECT kp.kind,
           (SELECT j.priority
              FROM jobs.job j
             WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
               AND pg_catalog.hashtext(j.kind) = pg_catalog.hashtext(kp.kind) AND j.kind = kp.kind
               AND j.state = 'queued' AND NOT j.group_wait AND j.kind_indexed
               AND j.priority > kp.priority
             ORDER BY j.priority
             LIMIT 1)
      FROM kind_priorities kp
     WHERE kp.priority IS NOT NULL
)
SELECT due.id, due.priority, due.run_at, due.group_key, due.tenant
  FROM kind_priorities kp
 CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.group_key, j.tenant
          FROM jobs.job j
         WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
           AND pg_catalog.hashtext(j.kind) = pg_catalog.hashtext(kp.kind) AND j.kind = kp.kind
           AND j.state = 'queued' AND NOT j.group_wait AND j.kind_indexed
           AND j.priority = kp.priority
           -- In the start priority, from the start position; in later ones, from their first.
           AND (j.run_at, j.id) >= (CASE WHEN kp.priority = $5 THEN $6 ELSE '-infinity'::timestamptz END,
                                    CASE WHEN kp.priority = $5 THEN $7 ELSE -9223372036854775808 END)
           AND j.run_at <= $4
           AND ($8::text[] IS NULL OR (j.tenant IS NULL AND cardinality($8::text[]) = 0) OR j.tenant = ANY ($8::text[]))
         ORDER BY j.run_at, j.id
         LIMIT $2
       ) AS due
 WHERE kp.priority IS NOT NULL
 ORDER BY due.priority, due.run_at, due.id
 LIMIT $2
