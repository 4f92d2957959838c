-- Brings a failed or cancelled job back to queued at $2 with fresh attempts, the only way out
-- of a terminal state (Rule 8); its error history stays. The caller locked the row and checked
-- its state.
-- $1 id, $2 run_at
UPDATE jobs.job
   SET state = 'queued', attempt = 0, run_at = $2, lease = NULL, lease_until = NULL,
       -- A unique job takes its key back (the caller checked that no other job holds it).
       unique_hold = unique_key IS NOT NULL,
       -- Claims decide again whether it must wait for its group.
       group_wait = false,
       finished_at = NULL, result = NULL,
       -- It starts over: no signal from an earlier await is handed to its next claim.
       signal = NULL,
       -- Finished jobs were left out when the queue's claims_by_kind was turned on; a job
       -- back in the kinds index costs an entry, one left out would be lost to claims by kind.
       kind_indexed = true
 WHERE id = $1
RETURNING queue, priority, run_at, id
