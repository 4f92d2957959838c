-- Up to $2 enabled schedules whose first unhandled slot is at or before $1, oldest first,
-- locked for this run, with what their jobs are made of. They are found by the index on
-- due_floor (a lower bound of next_slot that moves rarely, so most progress writes are HOT),
-- then next_slot says which are due. Schedules another run holds are skipped, not waited for
-- (that run handles them); one whose progress another run committed meanwhile is read in its
-- new version, so no slot is handled twice. The row's ctid (stable while it is locked) lets
-- the run's other statements reach it without an index.
-- $1 now, $2 limit
SELECT s.ctid::text AS tid, s.name, s.cron, s.timezone, s.catch_up, s.next_slot, s.due_floor,
       s.queue, s.kind, s.payload, s.headers, s.priority, s.max_attempts
  FROM jobs.schedule s
 WHERE s.enabled AND s.due_floor <= $1 AND s.next_slot <= $1
 ORDER BY s.next_slot
 LIMIT $2
   FOR UPDATE OF s SKIP LOCKED
