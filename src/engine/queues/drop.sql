-- Drops a queue and all its jobs. Answers 'dropped', 'unknown', 'busy' (with the number of
-- queued, running or waiting jobs) or 'referenced' (with a queue that uses it as its dead letter),
-- and the dropped jobs that jobs of other queues may wait for.
-- The caller holds the queue's exclusive lock, so no enqueue into it is in flight.
-- $1 queue, $2 force
WITH target AS (
    SELECT q.name,
           (SELECT r.name FROM jobs.queue r WHERE r.dead_letter = q.name ORDER BY r.name LIMIT 1) AS referrer,
           (SELECT count(*) FROM jobs.job j WHERE j.queue = q.name AND j.state IN ('queued', 'running', 'waiting')) AS active
      FROM jobs.queue q
     WHERE q.name = $1
       FOR UPDATE OF q
), dropped_jobs AS (
    DELETE FROM jobs.job j
     USING target t
     WHERE j.queue = t.name AND t.referrer IS NULL AND (t.active = 0 OR $2)
    RETURNING j.id, j.state, j.dependents
), unlinked AS (
    -- The dropped jobs wait for nothing any more (engine::workflows).
    DELETE FROM jobs.job_dependency d
     USING dropped_jobs x
     WHERE d.child = x.id
), unawaited AS (
    DELETE FROM jobs.job_await a
     USING dropped_jobs x
     WHERE a.job = x.id
), dropped_queue AS (
    DELETE FROM jobs.queue q
     USING target t
     WHERE q.name = t.name AND t.referrer IS NULL AND (t.active = 0 OR $2)
)
SELECT CASE
         WHEN t.name IS NULL THEN 'unknown'
         WHEN t.referrer IS NOT NULL THEN 'referenced'
         WHEN t.active > 0 AND NOT $2 THEN 'busy'
         ELSE 'dropped'
       END AS outcome,
       t.active AS active,
       t.referrer AS referrer,
       -- Dropped jobs that other jobs may still wait for: the caller cancels those.
       (SELECT array_agg(x.id) FROM dropped_jobs x
         WHERE x.dependents AND x.state <> 'succeeded') AS ended_parents
  FROM (SELECT 1) AS one
  LEFT JOIN target t ON true
