-- Job $1, which this transaction just made wait for a signal that is already recorded, is
-- queued again at once with the signal's payload $2. Returns its queue and claim position.
-- $1 id, $2 payload
UPDATE jobs.job j
   SET state = 'queued', signal_payload = $2, signal_timed_out = false
 WHERE j.id = $1 AND j.state = 'waiting'
RETURNING j.queue, j.priority, j.run_at, j.id
