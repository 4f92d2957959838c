-- For each job ($2 ids, $3 group keys, $4 tenants, pairwise) of queue $1, in a group of
-- concurrency 1: whether it must wait, because a job of its group runs or an unfinished one
-- comes before it in enqueue order. Two short probes of job_group_idx per job, each over a
-- range with an end (the group's running entries, which sort first; its queued entries before
-- the job), so each reads a few entries however many jobs the group holds. (One probe with a
-- row comparison read on past the job: PostgreSQL ends a scan only at its first column.) Each
-- compares the hash the index is keyed by, then the names.
-- $1 queue, $2 ids, $3 group keys, $4 tenants
SELECT c.id,
       EXISTS (
           SELECT FROM jobs.job r
            WHERE pg_catalog.hashtextextended(r.group_key, pg_catalog.hashtext(r.queue))
                  = pg_catalog.hashtextextended(c.group_key, pg_catalog.hashtext($1))
              -- The index's running entries (the state said as the index says it), and the
              -- state as its predicate says it.
              AND (r.state = 'queued') < true AND r.state = 'running'
              AND r.queue = $1 AND r.group_key = c.group_key
              AND r.tenant IS NOT DISTINCT FROM c.tenant)
       OR EXISTS (
           SELECT FROM jobs.job h
            WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue))
                  = pg_catalog.hashtextextended(c.group_key, pg_catalog.hashtext($1))
              AND h.state = 'queued' AND h.id < c.id
              AND h.queue = $1 AND h.group_key = c.group_key
              AND h.tenant IS NOT DISTINCT FROM c.tenant) AS blocked
  FROM unnest($2::bigint[], $3::text[], $4::text[]) AS c(id, group_key, tenant)
