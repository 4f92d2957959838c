-- Changes the live record of (tenant $1, scope $2, key $3) that holds token $4: its status and
-- response, and its expiry when a ttl is given (else it keeps it). A record taken over by
-- another save holds another token; an expired one is absent: no row, nothing changed.
-- A pending status renews the pending window (pending_for counts from updated_at). The expiry
-- is tested as IS TRUE so that it is no index condition (see get.sql).
-- $1 tenant, $2 scope, $3 key, $4 token, $5 status, $6 response, $7 ttl (exact; NULL keeps
-- the expiry), $8 now
UPDATE jobs.idempotency r
   SET status     = $5,
       response   = $6,
       updated_at = $8,
       expires_at = CASE WHEN $7::interval IS NULL THEN r.expires_at ELSE $8 + $7::interval END
 WHERE r.tenant = $1 AND r.scope = $2 AND r.key = $3 AND r.token = $4
   AND (r.expires_at > $8) IS TRUE
