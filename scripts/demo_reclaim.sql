-- The second half of the demo: a worker died holding a job; another one finishes it.
\pset footer off
SELECT id, kind, state, attempt, worker, lease_until > now() AS lease_live
  FROM jobs.job WHERE queue = 'demo' AND kind = 'report';
\echo '-- rescuer waits for the job; the background worker reclaims it when the lease expires'
CREATE TEMP TABLE rescued AS
SELECT * FROM jobs_claim('demo', worker => 'rescuer', kinds => ARRAY['report'], wait => '30 seconds');
SELECT id, kind, attempt AS attempt_now FROM rescued;
SELECT id, jobs_complete(id, lease) AS outcome FROM rescued;
SELECT id, state, attempt, worker, errors -> 0 ->> 'error' AS first_attempt
  FROM jobs.job WHERE queue = 'demo' AND kind = 'report';
SELECT database, pid, serving, reclaimed, last_error FROM jobs_worker_status();
