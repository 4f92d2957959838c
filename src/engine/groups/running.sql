-- For each group ($2 keys, $3 tenants, pairwise) of queue $1: how many of its jobs run now.
-- One probe of job_group_idx per group, over its running jobs (place 0); it compares the hash
-- the index is keyed by, then the names.
-- $1 queue, $2 group keys, $3 tenants
SELECT g.group_key, g.tenant,
       (SELECT count(*)
          FROM jobs.job r
         WHERE pg_catalog.hashtextextended(r.group_key, pg_catalog.hashtext(r.queue))
               = pg_catalog.hashtextextended(g.group_key, pg_catalog.hashtext($1))
           AND CASE WHEN r.state = 'running' THEN 0 ELSE r.id END = 0 AND r.state = 'running'
           AND r.queue = $1 AND r.group_key = g.group_key
           AND r.tenant IS NOT DISTINCT FROM g.tenant) AS running
  FROM unnest($2::text[], $3::text[]) AS g(group_key, tenant)
