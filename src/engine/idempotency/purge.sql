-- Deletes up to $2 records that expired before $1, oldest first, skipping rows other sessions
-- hold (a save replacing one of them is about to make it live again). Every tenant's.
-- $1 now, $2 batch size
WITH expired AS (
    SELECT r.ctid
      FROM jobs.idempotency r
     WHERE r.expires_at <= $1
     ORDER BY r.expires_at
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs.idempotency r
 WHERE r.ctid = ANY (ARRAY(SELECT ctid FROM expired))
   AND r.expires_at <= $1
