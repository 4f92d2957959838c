-- Ends the hold of succeeded jobs $1 on their unique keys once their unique_for window has
-- passed by $2, so a new job may take the key.
-- $1 ids, $2 now
UPDATE jobs.job
   SET unique_hold = false
 WHERE id = ANY ($1)
   AND unique_hold
   AND state = 'succeeded'
   AND finished_at + unique_for <= $2
