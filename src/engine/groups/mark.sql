-- Marks the queued jobs $1 as waiting for their groups: a claim found, under each group's lock,
-- an earlier unfinished job of the group (group_concurrency 1) or the group full.
-- The claim indexes leave them out from then on, so no claim walks them again; the settle
-- that moves the group on clears the mark (move_on.sql).
-- A job whose row another transaction holds is left unmarked rather than waited for: that
-- transaction (a late settle of the reclaimed job, a cancel) may be waiting for the group's lock
-- this claim holds. An unmarked job is only walked again by the next claim, which decides it anew.
-- $1 ids
WITH unheld AS (
    SELECT j.id
      FROM jobs.job j
     WHERE j.id = ANY ($1::bigint[]) AND j.state = 'queued' AND NOT j.group_wait
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs.job j
   SET group_wait = true
  FROM unheld
 WHERE j.id = unheld.id
RETURNING j.id
