-- Makes queued job $1 due at $2 (now) when it was due later; a job due already is left as it
-- is. The caller locked the row and checked its state.
-- $1 id, $2 now
UPDATE jobs.job
   SET run_at = $2
 WHERE id = $1 AND state = 'queued' AND run_at > $2
RETURNING queue, priority, run_at, id
