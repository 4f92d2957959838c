-- The live record of (tenant $1, scope $2, key $3): an expired one is absent, purged or not.
-- The expiry is tested as IS TRUE so that it is no index condition: the record is reached by
-- its key alone (a plan made on an empty table once combined the key with the expiry index,
-- reading every live record's entry on each call as the table grew).
-- $1 tenant, $2 scope, $3 key, $4 now
SELECT ROW(r.status, r.response, r.fingerprint, r.created_at, r.updated_at,
           r.expires_at)::jobs.idempotency_record AS record
  FROM jobs.idempotency r
 WHERE r.tenant = $1 AND r.scope = $2 AND r.key = $3 AND (r.expires_at > $4) IS TRUE
