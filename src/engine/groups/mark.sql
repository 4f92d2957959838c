-- Marks the queued jobs $1 as waiting for their groups: a claim found, under each group's lock,
-- an earlier unfinished job of the group (group_concurrency 1) or the group full.
-- The claim indexes leave them out from then on, so no claim walks them again; the settle
-- that moves the group on clears the mark (move_on.sql).
-- $1 ids
UPDATE jobs.job j
   SET group_wait = true
 WHERE j.id = ANY ($1::bigint[]) AND j.state = 'queued' AND NOT j.group_wait
RETURNING j.id
