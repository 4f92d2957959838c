-- Locks a job and reads its latest committed state, for operations that decide by state.
-- $1 id
SELECT state::text AS state, queue FROM jobs.job WHERE id = $1 FOR UPDATE
