-- Drops a queue and all its jobs. Answers 'dropped', 'unknown', 'busy' (with the number of
-- queued or running jobs) or 'referenced' (with a queue that uses it as its dead letter).
-- The caller holds the queue's exclusive lock, so no enqueue into it is in flight.
-- $1 queue, $2 force
WITH target AS (
    SELECT q.name,
           (SELECT r.name FROM jobs.queue r WHERE r.dead_letter = q.name ORDER BY r.name LIMIT 1) AS referrer,
           (SELECT count(*) FROM jobs.job j WHERE j.queue = q.name AND j.state IN ('queued', 'running')) AS active
      FROM jobs.queue q
     WHERE q.name = $1
       FOR UPDATE OF q
), dropped_jobs AS (
    DELETE FROM jobs.job j
     USING target t
     WHERE j.queue = t.name AND t.referrer IS NULL AND (t.active = 0 OR $2)
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
       t.referrer AS referrer
  FROM (SELECT 1) AS one
  LEFT JOIN target t ON true
