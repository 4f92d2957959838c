-- Due jobs of queue $1 in claim order (priority, then run_at, then id: Rule 2), at most $2, from
-- position ($5, $6, $7) on when given (the queue's claim floor, or where the previous batch of
-- candidates ended): no job before it in claim order is claimable, so the scan of its priority
-- starts there, past the dead index entries of jobs already claimed, and lower priorities are
-- not looked at. It locks nothing; the claim takes each candidate's job lock itself and
-- updates the ones it got next. It does not look at the queue row: the claim asks it only of
-- a queue its session knows to exist and not to be paused (`queues::flow_settings`).
-- $1 queue, $2 limit, $3 kinds (NULL: any), $4 now, $5 start priority, $6 start run_at,
-- $7 start id, $8 tenants (the caller's scope: NULL for every job)
WITH RECURSIVE priorities (priority) AS (
    -- The priorities with queued jobs above $5 (every one when $5 is NULL), lowest first: a
    -- loose index scan, one probe of job_claim_idx per priority, however many jobs each holds.
    (SELECT j.priority
       FROM jobs.job j
      WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
        AND j.state = 'queued' AND NOT j.group_wait
        AND j.priority >= coalesce($5::integer + 1, -32768)
      ORDER BY j.priority
      LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority
              FROM jobs.job j
             WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
               AND j.state = 'queued' AND NOT j.group_wait AND j.priority > p.priority
             ORDER BY j.priority
             LIMIT 1)
      FROM priorities p
     WHERE p.priority IS NOT NULL
)
SELECT due.id, due.priority, due.run_at, due.group_key, due.tenant
  FROM (SELECT $5, $6, $7 WHERE $5 IS NOT NULL
        UNION ALL
        SELECT p.priority, '-infinity'::timestamptz, -9223372036854775808
          FROM priorities p
         WHERE p.priority IS NOT NULL
       ) AS p(priority, from_run_at, from_id)
 CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at, j.group_key, j.tenant
          FROM jobs.job j
         WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
           AND j.state = 'queued' AND NOT j.group_wait
           AND j.priority = p.priority
           AND (j.run_at, j.id) >= (p.from_run_at, p.from_id)
           AND j.run_at <= $4
           AND ($3::text[] IS NULL OR j.kind = ANY ($3::text[]))
           AND ($8::text[] IS NULL OR (j.tenant IS NULL AND cardinality($8::text[]) = 0) OR j.tenant = ANY ($8::text[]))
         ORDER BY j.run_at, j.id
         LIMIT $2
       ) AS due
 LIMIT $2
