-- Marks a job succeeded when (id, lease) is its current lease: running, or queued by a reclaim
-- that no newer claim has followed ("done wins"). No row: the caller must classify the miss.
-- $1 id, $2 lease, $3 result, $4 now
UPDATE jobs.job
   SET state = 'succeeded', result = $3, finished_at = $4, lease_until = NULL
 WHERE id = $1 AND lease = $2 AND state IN ('running', 'queued')
RETURNING true
