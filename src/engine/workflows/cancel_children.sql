-- The jobs $1 ended in the states $2 (failed or cancelled): their waiting children are
-- cancelled with the error 'dependency <parent> <state>' (the lowest such parent of each),
-- and lose their dependency rows. Returns the cancelled children, whose own dependents the
-- caller cancels next.
-- $1 parents, $2 their states, $3 now
WITH edges AS (
    SELECT DISTINCT ON (d.child) d.child, d.parent, p.state
      FROM jobs.job_dependency d
      JOIN unnest($1::bigint[], $2::text[]) AS p(id, state) ON p.id = d.parent
     ORDER BY d.child, d.parent
), cancelled AS (
    UPDATE jobs.job j
       SET state = 'cancelled', finished_at = $3,
           errors = j.errors || jsonb_build_array(jsonb_build_object(
                        'attempt', j.attempt, 'at', $3,
                        'error', 'dependency ' || e.parent || ' ' || e.state)),
           unique_hold = false, group_wait = false
      FROM edges e
     WHERE j.id = e.child AND j.state = 'waiting'
    RETURNING j.id, j.queue, j.tenant, j.dependents
), unlinked AS (
    DELETE FROM jobs.job_dependency d
     USING cancelled c
     WHERE d.child = c.id
)
SELECT c.id, c.queue, c.tenant, c.dependents FROM cancelled c
