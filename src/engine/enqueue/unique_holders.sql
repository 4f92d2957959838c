-- The jobs that hold unique keys $3 in queue $1 for tenant $2, and whether each one's hold has
-- run out (a succeeded job whose unique_for window has passed by $4).
-- $1 queue, $2 tenant, $3 unique keys, $4 now
SELECT j.unique_key, j.id, j.state::text AS state,
       (j.state = 'succeeded' AND j.finished_at + j.unique_for <= $4) AS expired
  FROM jobs.job j
 WHERE j.queue = $1
   AND COALESCE(j.tenant, '') = COALESCE($2, '')
   AND j.unique_key = ANY ($3)
   AND j.unique_hold
