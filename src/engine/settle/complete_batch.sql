-- Marks many jobs succeeded in one statement when each (id, lease) is the job's current lease
-- and the job is in state $4; returns the ids it settled. Rows are updated in id order so two
-- overlapping batches cannot deadlock.
-- $1 ids, $2 leases, $3 now, $4 state
UPDATE jobs.job j
   SET state = 'succeeded', finished_at = $3, lease_until = NULL
  FROM (SELECT s.id, s.lease FROM unnest($1::bigint[], $2::uuid[]) AS s(id, lease) ORDER BY s.id) AS s
 WHERE j.id = s.id AND j.lease = s.lease AND j.state = $4::jobs.state
RETURNING j.id, j.lease
