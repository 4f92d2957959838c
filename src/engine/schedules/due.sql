-- Up to $2 enabled schedules whose first unhandled slot is at or before $1, locked for this
-- run. Schedules another run holds are skipped, not waited for (that run handles them); one
-- whose progress another run committed meanwhile is read in its new version, so no slot is
-- handled twice. The row's ctid (stable while it is locked) lets the run's other statements
-- reach it without an index.
-- $1 now, $2 limit
SELECT s.ctid::text AS tid, s.name, s.cron, s.timezone, s.catch_up, s.next_slot, s.queue
  FROM jobs.schedule s
 WHERE s.enabled AND s.next_slot <= $1
 ORDER BY s.next_slot
 LIMIT $2
   FOR UPDATE OF s SKIP LOCKED
