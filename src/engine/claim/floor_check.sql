-- The first due queued jobs of queue $1 before position ($2, $3, $4) in claim order: the
-- worker's check that no path it does not know about (a restore, a row written behind the
-- functions' back, a commit whose effects were lost) left a claimable job below the queue's
-- claim floor. A claim in flight raised the floor past the jobs it is taking, which this
-- snapshot still sees queued; the worker tells them apart by their job locks. One probe of
-- job_claim_idx when the floor is sound. Only the jobs from position ($6, $7, $8) on are looked
-- at: while an old snapshot holds vacuum back, the index keeps an entry below the floor for
-- every job claimed since, and the worker walks them a window at a time
-- (storage::index_walk), passing the window's end as the floor when it comes first.
-- $1 queue, $2 floor priority, $3 floor run_at, $4 floor id, $5 now,
-- $6 from priority, $7 from run_at, $8 from id
SELECT j.id
  FROM jobs.job j
 WHERE pg_catalog.hashtext(j.queue) = pg_catalog.hashtext($1) AND j.queue = $1
   AND j.state = 'queued' AND NOT j.group_wait
   AND (j.priority, j.run_at, j.id) >= ($6, $7, $8)
   AND (j.priority, j.run_at, j.id) < ($2, $3, $4)
   AND j.run_at <= $5
 ORDER BY j.priority, j.run_at, j.id
 LIMIT 32
