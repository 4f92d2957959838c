-- Locks waiting job $1 until this transaction ends, waiting for any transaction that holds it
-- (another settle deciding for it, engine::workflows::dependencies step 3).
-- $1 child
SELECT j.state::text AS state
  FROM jobs.job j
 WHERE j.id = $1
   FOR NO KEY UPDATE
