-- The jobs $1, queued by this transaction, stay queued: their parents ($2, kept in `after`)
-- have all succeeded. Returns each one's queue and claim position, to report it queued.
-- $1 children, $2 all parents
UPDATE jobs.job j
   SET after = $2
 WHERE j.id = ANY ($1::bigint[])
RETURNING j.queue, j.priority, j.run_at, j.id
