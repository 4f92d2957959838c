-- The jobs $1, queued by this transaction (an enqueue, or jobs_retry), wait for the jobs $2
-- (their parents that have not succeeded): waiting, with one dependency row per pair, each
-- saying how many its child got. $3: every parent, kept in the job's `after`. A mark for its
-- group is cleared: claims decide the job's group once it is queued.
-- $1 children, $2 pending parents, $3 all parents
WITH waiting AS (
    UPDATE jobs.job j
       SET state = 'waiting', group_wait = false, after = $3
     WHERE j.id = ANY ($1::bigint[])
    RETURNING j.id
)
INSERT INTO jobs.job_dependency (child, parent, parents)
SELECT w.id, p.parent, cardinality($2::bigint[])
  FROM waiting w
 CROSS JOIN unnest($2::bigint[]) AS p(parent)
