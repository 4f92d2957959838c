-- Signal $2 of tenant $1 ('' for none) wakes every job waiting for it: their awaits go and
-- they are queued with the payload $3. Run under the latest snapshot, after the signal's
-- lock. Returns each woken job's queue and claim position.
-- $1 tenant, $2 signal, $3 payload
WITH woken AS (
    DELETE FROM jobs.job_await a
     WHERE a.tenant = $1 AND a.signal = $2
    RETURNING a.job
)
UPDATE jobs.job j
   SET state = 'queued', signal = j.signal || CASE WHEN $3::jsonb IS NULL THEN '{"timed_out": false}'
                                 ELSE jsonb_build_object('payload', $3::jsonb, 'timed_out', false) END
  FROM woken w
 WHERE j.id = w.job AND j.state = 'waiting'
RETURNING j.queue, j.priority, j.run_at, j.id
