-- The throughput history since $1 seconds ago, per queue and minute (epoch seconds).
-- $1 seconds
SELECT t.queue, extract(epoch FROM t.minute)::bigint AS minute,
       t.enqueued, t.completed, t.failed, t.retried
  FROM jobs.throughput t
 WHERE t.minute >= now() - make_interval(secs => $1::float8)
