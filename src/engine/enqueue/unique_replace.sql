-- on_conflict => 'replace': gives the still-queued job $1 the payload, headers, run_at and
-- priority of the duplicate enqueued now; a job that is running (or finished) is left alone
-- (no row). Returns the job's new position, and its group when it waits for it (the caller then
-- moves the group on: a settle freeing a slot skips this row while it is held, see
-- groups/move_on.sql).
-- $1 id, $2 payload, $3 headers, $4 run_at, $5 priority
UPDATE jobs.job j
   SET payload = $2, headers = $3, run_at = $4, priority = $5
 WHERE j.id = $1 AND j.state = 'queued'
RETURNING j.queue, j.priority, j.run_at, j.id,
          CASE WHEN j.group_wait THEN j.group_key END AS group_key, j.tenant
