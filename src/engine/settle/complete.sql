-- Marks a job succeeded when (id, lease) is its current lease (Rule 4) and it is in state $5: running,
-- or queued by a reclaim that no newer claim has followed ("done wins"). No row: the caller
-- classifies the miss.
-- $1 id, $2 lease, $3 result, $4 now, $5 state
UPDATE jobs.job
   SET state = 'succeeded', result = $3, finished_at = $4, lease_until = NULL
 WHERE id = $1 AND lease = $2 AND state = $5::jobs.state
RETURNING true AS settled
