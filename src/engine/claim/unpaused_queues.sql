-- The queues that hand out jobs, for the worker's wake-up backstop.
SELECT name AS queue FROM jobs.queue WHERE NOT paused
