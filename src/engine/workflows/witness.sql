-- A dependency row of child $1 that no transaction is deleting, locked against deletion until
-- this transaction ends (engine::workflows::dependencies, step 2): its parent's settle will
-- see this transaction's deletes. The highest parent's first, which claims in id order settle
-- last. Rows being deleted by transactions in flight are skipped, never waited for.
-- $1 child
SELECT d.parent
  FROM jobs.job_dependency d
 WHERE d.child = $1
 ORDER BY d.parent DESC
 LIMIT 1
   FOR KEY SHARE SKIP LOCKED
