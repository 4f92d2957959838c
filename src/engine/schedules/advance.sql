-- Records what a run did with the schedules it locked (by ctid): the first slot not handled
-- yet and its lower bound (the indexed due_floor, kept when it need not move, so the update
-- stays on the page without index entries), and the last slot enqueued with its job (kept as
-- they were where nothing was enqueued).
-- $1 schedule row ctids, $2 next slots, $3 due floors, $4 last slots, $5 last jobs
UPDATE jobs.schedule s
   SET next_slot = u.next_slot,
       due_floor = u.due_floor,
       last_slot = coalesce(u.last_slot, s.last_slot),
       last_job  = coalesce(u.last_job, s.last_job)
  FROM unnest($1::text[]::tid[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[],
              $5::int8[])
       AS u(tid, next_slot, due_floor, last_slot, last_job)
 WHERE s.ctid = u.tid
