-- On a Citus shard: one dead-letter copy (copies.sql), inserted into the distributed table, so
-- Citus routes it to its queue's shard; the shard's trigger gives it an id that routes there.
-- Into the kinds index whatever the queue's claims_by_kind, as copy.sql says.
-- $1 queue, $2 kind, $3 payload, $4 headers, $5 max_attempts, $6 tenant, $7 origin
INSERT INTO jobs.job (queue, kind, payload, headers, max_attempts, tenant, origin, kind_indexed)
VALUES ($1, $2, $3, $4, $5, $6, $7, true)
RETURNING queue, id, priority, run_at
