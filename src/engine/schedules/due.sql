-- Up to $2 enabled schedules whose first unhandled slot is at or before $1, locked for this
-- run. Schedules another run holds are skipped, not waited for (that run handles them); one
-- whose progress another run committed meanwhile is read in its new version, so no slot is
-- handled twice.
-- $1 now, $2 limit
SELECT s.name, s.cron, s.timezone, s.catch_up, s.next_slot, s.queue, s.payload, s.kind,
       s.headers, s.priority, s.max_attempts
  FROM jobs.schedule s
 WHERE s.enabled AND s.next_slot <= $1
 ORDER BY s.next_slot
 LIMIT $2
   FOR UPDATE OF s SKIP LOCKED
