-- The newest job's id (the first page's window ends there).
SELECT coalesce(max(j.id), 0) AS id FROM jobs.job j
