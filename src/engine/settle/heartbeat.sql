-- Extends the lease of a job held under (id, lease) (Rule 4) in state $6, by $3 or the claim's lease
-- length, and stores progress when given. A job reclaimed but not claimed again (queued under
-- this lease) is still this holder's: it becomes running again rather than being run twice.
-- $1 id, $2 lease, $3 extend, $4 progress, $5 now, $6 state
UPDATE jobs.job
   SET state        = 'running',
       lease_until  = $5 + coalesce($3, lease_duration),
       heartbeat_at = $5,
       progress     = coalesce($4, progress)
 WHERE id = $1 AND lease = $2 AND state = $6::jobs.state
RETURNING true AS renewed
