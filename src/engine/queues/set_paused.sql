-- Pauses ($2 true) or resumes queue $1; no row when it does not exist.
-- $1 queue, $2 paused
UPDATE jobs.queue SET paused = $2, updated_at = now() WHERE name = $1 RETURNING true AS found
