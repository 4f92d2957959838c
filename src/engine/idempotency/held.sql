-- The record that kept a save from taking its key (the save locked it, so it is the one the
-- save saw): whether it is pending, and when it can be taken over or expires.
-- $1 tenant, $2 scope, $3 key
SELECT r.status, r.updated_at + r.pending_for AS pending_until, r.expires_at
  FROM jobs.idempotency r
 WHERE r.tenant = $1 AND r.scope = $2 AND r.key = $3
