-- Flags the jobs among $1 that have not succeeded as having dependents (their settles look
-- them up), locking each row it flags in id order. One already flagged is left alone, and
-- so not locked here: lock_parents.sql locks it shared. A row another transaction changes
-- meanwhile is waited for and decided again on its new version.
-- $1 ids
UPDATE jobs.job j
   SET dependents = true
 WHERE j.id IN (SELECT p.id
                  FROM jobs.job p
                 WHERE p.id = ANY ($1::bigint[])
                   AND NOT p.dependents AND p.state <> 'succeeded'
                 ORDER BY p.id
                   FOR NO KEY UPDATE OF p)
   AND NOT j.dependents AND j.state <> 'succeeded'
