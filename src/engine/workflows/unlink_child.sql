-- Waiting job $1 was cancelled: its dependency rows and its await go.
-- $1 child
WITH dependencies AS (
    DELETE FROM jobs.job_dependency d WHERE d.child = $1
)
DELETE FROM jobs.job_await a WHERE a.job = $1
