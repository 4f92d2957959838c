-- For each job ($2 ids, $3 group keys, $4 tenants, pairwise) of queue $1, in a group of
-- concurrency 1: what stands before it in job_group_idx, the place of the last entry of its
-- group below the job's id: none (NULL: it may run), 0 (nothing of the group is queued before
-- it, but a job of it runs) or an earlier queued job's id. One backward probe per job, from
-- the job: a few entries, however many jobs the group holds. It compares the hash the index
-- is keyed by, then the names.
-- $1 queue, $2 ids, $3 group keys, $4 tenants
SELECT c.id,
       (SELECT CASE WHEN h.state = 'running' THEN 0 ELSE h.id END
          FROM jobs.job h
         WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue))
               = pg_catalog.hashtextextended(c.group_key, pg_catalog.hashtext($1))
           AND CASE WHEN h.state = 'running' THEN 0 ELSE h.id END < c.id
           AND (h.state = 'queued' OR h.state = 'running')
           AND h.queue = $1 AND h.group_key = c.group_key
           AND h.tenant IS NOT DISTINCT FROM c.tenant
         ORDER BY CASE WHEN h.state = 'running' THEN 0 ELSE h.id END DESC
         LIMIT 1) AS blocker
  FROM unnest($2::bigint[], $3::text[], $4::text[]) AS c(id, group_key, tenant)
