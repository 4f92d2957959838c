-- Per queue, the finished jobs the table holds (until retention purges them). No index holds
-- finished jobs (each completion would pay for its entry), so this reads the table: the
-- dashboard runs it in the background every --finished-every, while someone watches.
SELECT j.queue,
       count(*) FILTER (WHERE j.state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE j.state = 'failed') AS failed,
       count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled
  FROM jobs.job j
 WHERE j.state IN ('succeeded', 'failed', 'cancelled')
 GROUP BY j.queue
