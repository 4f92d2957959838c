-- Takes the key (tenant $1, scope $2, key $3) for a new record, in one statement, so two
-- concurrent saves can never both win: the primary key lets one insert, and every other save
-- of the key waits for it and then decides on the committed record. The key is taken when
-- there is no record, or the record has expired, is finished (not pending) with the same
-- fingerprint, or is pending and was not updated for its pending_for (a request that died).
-- No row: the record stays, locked by this statement until the transaction ends (the caller
-- then reads it to say why).
-- $1 tenant ('' for none), $2 scope ('' for none), $3 key, $4 status, $5 response,
-- $6 ttl (exact), $7 fingerprint, $8 pending_for (exact), $9 now, $10 a fresh token
INSERT INTO jobs.idempotency AS r
       (tenant, scope, key, status, token, save_outcome, fingerprint, pending_for,
        created_at, updated_at, expires_at, response)
VALUES ($1, $2, $3, $4, $10, 'created', $7, $8, $9, $9, $9 + $6, $5)
ON CONFLICT (tenant, scope, key) DO UPDATE
   SET status       = excluded.status,
       token        = excluded.token,
       save_outcome = CASE WHEN r.expires_at <= $9 THEN 'replaced_expired'
                           WHEN r.status = 'pending' THEN 'taken_over'
                           ELSE 'replaced' END,
       fingerprint  = excluded.fingerprint,
       pending_for  = excluded.pending_for,
       created_at   = excluded.created_at,
       updated_at   = excluded.updated_at,
       expires_at   = excluded.expires_at,
       response     = excluded.response
 WHERE r.expires_at <= $9
    OR (r.status <> 'pending' AND r.fingerprint IS NOT DISTINCT FROM excluded.fingerprint)
    OR (r.status = 'pending' AND r.updated_at + r.pending_for <= $9)
RETURNING ROW(r.save_outcome, r.token, r.expires_at)::jobs.idempotency_saved AS saved
