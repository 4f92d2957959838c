-- One job as JSON (every column of jobs.job), if the role may see it.
-- $1 id
SELECT to_jsonb(j) AS job, j.run_at > now() AS later FROM jobs.job j WHERE j.id = $1
