-- Cancels a queued, running or waiting job (Rule 7). The lease stays so its holder learns 'cancelled' at its
-- next heartbeat or settle call. The caller locked the row and checked its state.
-- $1 id, $2 now
UPDATE jobs.job
   SET state = 'cancelled', finished_at = $2, lease_until = NULL,
       -- A cancelled unique job frees its key.
       unique_hold = false,
       -- A finished job waits for nothing.
       group_wait = false
 WHERE id = $1
