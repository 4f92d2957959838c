-- Deletes up to $2 records that expired before $1, oldest first, skipping rows other sessions
-- hold (a save replacing one of them is about to make it live again). Every tenant's. Only
-- records whose expires_at lies in [$3, $4) are looked at: the worker walks
-- idempotency_expires_idx a window at a time (storage::index_walk), as it keeps an entry for
-- every record deleted since vacuum last could clean up.
-- $1 now, $2 batch size, $3 and $4 the window of expires_at
WITH expired AS (
    SELECT r.ctid
      FROM jobs.idempotency r
     WHERE r.expires_at <= $1
       AND r.expires_at >= $3 AND r.expires_at < $4
     ORDER BY r.expires_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs.idempotency r
 WHERE r.ctid = ANY (ARRAY(SELECT ctid FROM expired))
   AND r.expires_at <= $1
