-- The jobs $1 succeeded: their dependency rows go. Returns each row's child and how many rows
-- the child got (engine::workflows::dependencies decides from them which children to queue).
-- A row another settle holds as its witness is waited for, until that settle commits.
-- $1 parents
DELETE FROM jobs.job_dependency d
 WHERE d.parent = ANY ($1::bigint[])
RETURNING d.child, d.parents
