-- Deletes the finished jobs older than their queue's retention among the first $2 jobs with
-- ids in ($1, $1 + $3], and returns the last id it looked at, how many jobs it looked at, how
-- many it deleted, and the newest id given out (where the sweep starts over). The worker sweeps
-- the whole table this way, window by window.
--
-- The window is bounded by ids as well as by jobs: an index scan in id order walks the dead
-- versions of deleted and updated jobs as well as the live ones, and only the live ones count
-- against the LIMIT. After a queue of a million jobs was dropped, or while an old snapshot
-- holds vacuum back, a window bounded by jobs alone walked every dead entry up to the next
-- 2,000 live jobs, in one statement and one snapshot. A span of ids holds an index entry for
-- each version of its jobs (a few each at most), however many of them are dead.
-- $1 last id of the previous window, $2 most jobs to look at, $3 most ids to span
WITH sweep AS (
    SELECT j.id, j.queue, j.state, j.finished_at
      FROM jobs.job j
     WHERE j.id > $1 AND j.id <= $1 + $3
     ORDER BY j.id
     LIMIT $2
), purged AS (
    DELETE FROM jobs.job j
     USING sweep s, jobs.queue q
     WHERE j.id = s.id
       AND q.name = s.queue
       AND s.state IN ('succeeded', 'failed', 'cancelled')
       AND s.finished_at < now() - q.retention
    RETURNING 1
)
SELECT (SELECT max(id) FROM sweep) AS last_id,
       (SELECT count(*) FROM sweep) AS looked,
       (SELECT count(*) FROM purged) AS purged,
       pg_catalog.pg_sequence_last_value(
           pg_catalog.pg_get_serial_sequence('jobs.job', 'id')::pg_catalog.regclass) AS newest
