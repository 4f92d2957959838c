-- Clears the marks of the waiting jobs with nothing of their group before them (nothing
-- running, no earlier unfinished job): each is its group's head and may run, and only a freed
-- head in shared memory would have handed it to a claim (runtime::freed_heads). Runs once per
-- database after shared memory was made, before any settle there offers a freed head, so no
-- head offered before a restart waits for ever. Probes job_group_idx below each waiting job's
-- place (comparing the hash the index is keyed by, then the names); a job whose row another
-- transaction holds is skipped, never waited for, as in move_on.sql: every such transaction
-- moves the group on after it.
WITH heads AS (
    SELECT w.id
      FROM jobs.job w
     WHERE w.group_key IS NOT NULL AND w.group_wait AND w.state = 'queued'
       AND NOT EXISTS (
            SELECT FROM jobs.job h
             WHERE pg_catalog.hashtextextended(h.group_key, pg_catalog.hashtext(h.queue))
                   = pg_catalog.hashtextextended(w.group_key, pg_catalog.hashtext(w.queue))
               AND CASE WHEN h.state = 'running' THEN 0 ELSE h.id END < w.id
               AND (h.state = 'queued' OR h.state = 'running')
               AND h.queue = w.queue AND h.group_key = w.group_key
               AND h.tenant IS NOT DISTINCT FROM w.tenant)
       FOR UPDATE OF w SKIP LOCKED
)
UPDATE jobs.job j
   SET group_wait = false
  FROM heads
 WHERE j.id = heads.id
RETURNING j.queue, j.priority, j.run_at, j.id
