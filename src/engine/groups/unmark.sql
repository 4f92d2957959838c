-- Clears the marks of the waiting jobs $1, each the head of its group of concurrency 1 with
-- nothing of the group running: what move_on.sql decides, read by the settle without the
-- executor under the groups' locks and the latest snapshot (storage::group_reader). The locks
-- keep every claim of those groups out until this transaction ends, so the heads stay heads.
-- A job whose row another transaction holds is skipped, never waited for, as in move_on.sql.
-- $1 ids
WITH free AS (
    SELECT j.id
      FROM jobs.job j
     WHERE j.id = ANY ($1::bigint[]) AND j.group_wait AND j.state = 'queued'
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs.job j
   SET group_wait = false
  FROM free
 WHERE j.id = free.id
RETURNING j.queue, j.priority, j.run_at, j.id
