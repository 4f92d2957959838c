-- Deletes the record of (tenant $1, scope $2, key $3), only if it holds token $4 when one is
-- given; answers whether it was live (an expired record is deleted too, but was absent).
-- $1 tenant, $2 scope, $3 key, $4 token (NULL: whichever record holds the key), $5 now
DELETE FROM jobs.idempotency r
 WHERE r.tenant = $1 AND r.scope = $2 AND r.key = $3
   AND ($4::uuid IS NULL OR r.token = $4::uuid)
RETURNING r.expires_at > $5 AS live
