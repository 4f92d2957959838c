-- The job with id $1, as a row of jobs.job.
-- $1 id
SELECT j AS job FROM jobs.job j WHERE j.id = $1
