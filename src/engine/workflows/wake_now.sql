-- Job $1, which this transaction just made wait for a signal that is already recorded, is
-- queued again at once with the signal's payload $2. Returns its queue and claim position.
-- $1 id, $2 payload
UPDATE jobs.job j
   SET state = 'queued', signal = j.signal || CASE WHEN $2::jsonb IS NULL THEN '{"timed_out": false}'
                                 ELSE jsonb_build_object('payload', $2::jsonb, 'timed_out', false) END
 WHERE j.id = $1 AND j.state = 'waiting'
RETURNING j.queue, j.priority, j.run_at, j.id
