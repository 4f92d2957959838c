-- Classifies settle calls that changed nothing: the ids among (id, lease) pairs whose job is
-- cancelled under that very lease answer 'cancelled'; every other one answers 'lost'.
-- $1 ids, $2 leases
SELECT j.id
  FROM unnest($1::bigint[], $2::uuid[]) AS s(id, lease)
  JOIN jobs.job j ON j.id = s.id AND j.lease = s.lease
 WHERE j.state = 'cancelled'
