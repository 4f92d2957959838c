-- Deletes the finished jobs older than their queue's retention among the $2 jobs that follow
-- id $1, and returns the last id it looked at, how many jobs it looked at (fewer than $2: the
-- window reached the newest job, and the sweep starts over) and how many it deleted. The worker
-- sweeps the whole table this way, window by window.
-- $1 last id of the previous window, $2 window size
WITH sweep AS (
    SELECT j.id, j.queue, j.state, j.finished_at
      FROM jobs.job j
     WHERE j.id > $1
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
       (SELECT count(*) FROM purged) AS purged
