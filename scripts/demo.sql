-- The demo scripts/up runs: one job lifecycle, told in SQL.
\pset footer off
\echo
\echo '-- a queue named demo, with a 1-second backoff so the retry comes quickly'
SELECT jobs_drop_queue('demo', force => true) FROM jobs.queue WHERE name = 'demo' \g /dev/null
SELECT name AS queue, lease, max_attempts, backoff_base, backoff_max
  FROM jobs_create_queue('demo', backoff_base => '1 second', jitter => 0);

\echo '-- enqueue two jobs (in the same transaction as your own writes, if you like)'
SELECT jobs_enqueue('demo', '{"to": "ada@example.com"}', kind => 'email') AS email_job,
       jobs_enqueue('demo', '{"invoice": 1001}', kind => 'invoice') AS invoice_job;

\echo '-- a worker claims both: each comes with a fresh lease token, attempt 1'
CREATE TEMP TABLE claimed AS SELECT * FROM jobs_claim('demo', worker => 'demo-worker', n => 2);
SELECT id, kind, payload, attempt, lease FROM claimed ORDER BY id;

\echo '-- the invoice succeeds; sending the email fails and is retried after the backoff'
SELECT id, kind, CASE kind WHEN 'invoice' THEN jobs_complete(id, lease, '{"pdf": "1001.pdf"}')
                           ELSE jobs_fail(id, lease, 'smtp timeout') END AS outcome
  FROM claimed ORDER BY id;
SELECT id, state, attempt, round(extract(epoch FROM run_at - now())::numeric, 1) AS retry_in_seconds,
       errors -> -1 ->> 'error' AS last_error
  FROM jobs.job WHERE queue = 'demo' AND kind = 'email';

\echo '-- the worker waits for work (no polling): the retry comes due after about a second'
TRUNCATE claimed;
INSERT INTO claimed SELECT * FROM jobs_claim('demo', worker => 'demo-worker', wait => '10 seconds');
SELECT id, kind, attempt FROM claimed;
SELECT id, jobs_complete(id, lease) AS outcome FROM claimed;
DROP TABLE claimed;

\echo '-- queue stats (also as Prometheus text: SELECT jobs_metrics())'
SELECT queue, ready, scheduled, running, succeeded, failed, cancelled FROM jobs.queue_stats WHERE queue = 'demo';
