-- A schedule that enqueues into queue $1, if any: such a queue cannot be dropped.
SELECT s.name FROM jobs.schedule s WHERE s.queue = $1 ORDER BY s.name LIMIT 1
