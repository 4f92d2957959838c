-- Clears the marks of the waiting jobs with nothing of their group before them (nothing
-- running, no earlier unfinished job): each is its group's head and may run, and only a freed
-- head in shared memory would have handed it to a claim (runtime::freed_heads). Runs once per
-- database after shared memory was made, before any settle there offers a freed head, so no
-- head offered before a restart waits for ever. Probes job_group_idx below each waiting job's
-- place (comparing the hash the index is keyed by, then the names); a job whose row another
-- transaction holds is skipped, never waited for, as in move_on.sql, and counted: one that
-- does not move the group on when it ends (a unique replace of the job, say) leaves it marked,
-- so the caller does not record the sweep, and the next claim or tick sweeps again.
WITH heads AS MATERIALIZED (
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
), locked AS (
    SELECT j.id
      FROM jobs.job j
      JOIN heads ON heads.id = j.id
     WHERE j.group_wait AND j.state = 'queued'
       FOR UPDATE OF j SKIP LOCKED
), cleared AS (
    UPDATE jobs.job j
       SET group_wait = false
      FROM locked
     WHERE j.id = locked.id
    RETURNING j.queue, j.priority, j.run_at, j.id
)
-- One row at least: the heads it passed over (their rows held, or changed meanwhile), which
-- make the caller sweep again later, beside the cleared jobs (none: NULLs).
SELECT c.queue, c.priority, c.run_at, c.id, s.passed_over
  FROM (SELECT (SELECT pg_catalog.count(*) FROM heads)
               OPERATOR(pg_catalog.-) (SELECT pg_catalog.count(*) FROM locked) AS passed_over) s
  LEFT JOIN cleared c ON true
