-- Due jobs of queue $1 in claim order within one priority, $5, from position ($5, $6, $7) on
-- (the claim floor, the reach, or where the previous batch of candidates ended), at most $2:
-- one ordered walk of job_claim_idx. The claim reads this first, as a claim almost always finds
-- what it needs in its floor's priority; when it returns fewer than $2 rows the priority holds
-- no more due jobs there, and the claim goes on with candidates.sql from the end of $5. Both
-- give the same rows in the same order (Rule 2); this one has no loose scan of the priorities
-- for the executor to set up (70,000 fewer instructions a call). It locks nothing, and does not
-- look at the queue row (see candidates.sql).
-- $1 queue, $2 limit, $3 kinds (NULL: any), $4 now, $5 priority, $6 start run_at,
-- $7 start id, $8 tenants (the caller's scope: NULL for every job)
SELECT j.id, j.priority, j.run_at, j.group_key, j.tenant
  FROM jobs.job j
 WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
   AND j.state = 'queued' AND NOT j.group_wait
   AND j.priority = $5
   AND (j.run_at, j.id) >= ($6, $7)
   AND j.run_at <= $4
   AND ($3::text[] IS NULL OR j.kind = ANY ($3::text[]))
   AND ($8::text[] IS NULL OR (j.tenant IS NULL AND cardinality($8::text[]) = 0) OR j.tenant = ANY ($8::text[]))
 ORDER BY j.run_at, j.id
 LIMIT $2
