-- For each group ($2 keys, $3 tenants, pairwise) of queue $1: how many of its jobs run now,
-- and its head, the first of its unfinished jobs in enqueue order (a group of concurrency 1
-- runs only its head, and only when nothing of it runs). Two index probes per group, however
-- many jobs the group holds; each compares the hash job_group_idx and job_group_running_idx
-- are keyed by, then the names.
-- $1 queue, $2 group keys, $3 tenants
SELECT g.group_key, g.tenant,
       (SELECT count(*)
          FROM jobs.job r
         WHERE pg_catalog.hashtextextended(r.group_key, pg_catalog.hashtext(r.queue))
               = pg_catalog.hashtextextended(g.group_key, pg_catalog.hashtext($1))
           AND r.queue = $1 AND r.group_key = g.group_key AND r.state = 'running'
           AND r.tenant IS NOT DISTINCT FROM g.tenant) AS running,
       (SELECT h.id
          FROM jobs.job h
         WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue))
               = pg_catalog.hashtextextended(g.group_key, pg_catalog.hashtext($1))
           AND h.queue = $1 AND h.group_key = g.group_key
           AND (h.state = 'queued' OR h.state = 'running')
           AND h.tenant IS NOT DISTINCT FROM g.tenant
         ORDER BY h.id
         LIMIT 1) AS head
  FROM unnest($2::text[], $3::text[]) AS g(group_key, tenant)
