-- jobs.queue_stats, for jobs_metrics(): per queue, jobs by state (ready and scheduled are the
-- queued jobs that are due and not yet due, so the counts add up), the oldest ready job's age
-- in seconds, running jobs past their lease, jobs finished in the last minute, and waiting jobs
-- (for their dependencies or a signal).
SELECT queue, paused, ready, scheduled, running, succeeded, failed, cancelled, running_past_lease,
       coalesce(extract(epoch FROM oldest_ready_age), 0)::float8 AS oldest_ready_seconds,
       finished_last_minute, waiting
  FROM jobs.queue_stats
 ORDER BY queue
