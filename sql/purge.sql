-- Deletes up to $1 finished jobs older than their queue's retention, oldest first per queue.
-- $1 batch size
DELETE FROM jobs.job
 WHERE id IN (SELECT old.id
                FROM jobs.queue q
               CROSS JOIN LATERAL (
                      SELECT j.id
                        FROM jobs.job j
                       WHERE j.queue = q.name
                         AND j.state IN ('succeeded', 'failed', 'cancelled')
                         AND j.finished_at < now() - q.retention
                       ORDER BY j.finished_at
                       LIMIT $1
                     ) AS old
               LIMIT $1)
