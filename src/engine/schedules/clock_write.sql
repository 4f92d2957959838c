-- A background worker was up at $1 (and, with $2, stopped cleanly then); written only while
-- there are enabled schedules, so an idle database writes nothing.
-- $1 at, $2 stopped
UPDATE jobs.schedule_clock
   SET seen_at = $1, stopped = $2
 WHERE EXISTS (SELECT FROM jobs.schedule s WHERE s.enabled AND s.due_floor IS NOT NULL)
