-- The hand-written idempotency table that scenario i measures pg_jobs's idempotency records
-- against: the same record (status, token, fingerprint, pending_for, expiry, response) under
-- the same primary key and expiry index, written by plain statements with no function calls,
-- no roles, tenants or row-level security. The statements are in
-- benchmarks/src/scenarios/idempotency.rs.
DROP TABLE IF EXISTS bench_idempotency;
CREATE TABLE bench_idempotency (
    scope       text NOT NULL DEFAULT '',
    key         text NOT NULL,
    status      text NOT NULL,
    token       uuid NOT NULL,
    fingerprint text,
    pending_for interval,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    response    jsonb,
    PRIMARY KEY (scope, key)
) WITH (fillfactor = 70);
CREATE INDEX bench_idempotency_expires_idx ON bench_idempotency (expires_at);
