-- The jobs $1, just enqueued as queued by this transaction, are cancelled at once: one of
-- their parents ($4, kept in `after`) already ended failed or cancelled ($2 says which).
-- $1 children, $2 error, $3 now, $4 all parents
UPDATE jobs.job j
   SET state = 'cancelled', finished_at = $3, after = $4,
       errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', $3, 'error', $2)),
       -- A cancelled unique job frees its key; a finished job waits for no group.
       unique_hold = false, group_wait = false
 WHERE j.id = ANY ($1::bigint[])
RETURNING j.id
