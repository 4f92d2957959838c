-- For each job ($2 ids, $3 group keys, $4 tenants, pairwise) of queue $1, in a group of
-- concurrency 1: whether it must wait, because a job of its group runs or an unfinished one
-- comes before it in enqueue order. One probe of job_group_idx per job, over the places below
-- the job's id (the group's running jobs, then its queued ones up to the job): a few entries,
-- however many jobs the group holds. It compares the hash the index is keyed by, then the names.
-- $1 queue, $2 ids, $3 group keys, $4 tenants
SELECT c.id,
       EXISTS (
           SELECT FROM jobs.job h
            WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue))
                  = pg_catalog.hashtextextended(c.group_key, pg_catalog.hashtext($1))
              AND CASE WHEN h.state = 'running' THEN 0 ELSE h.id END < c.id
              AND (h.state = 'queued' OR h.state = 'running')
              AND h.queue = $1 AND h.group_key = c.group_key
              AND h.tenant IS NOT DISTINCT FROM c.tenant) AS blocked
  FROM unnest($2::bigint[], $3::text[], $4::text[]) AS c(id, group_key, tenant)
