-- pg_jobs upgrade from 0.2.0 to 0.3.0, run by ALTER EXTENSION pg_jobs UPDATE. Written by hand:
-- pgrx generates install scripts only. tests/integration/tests/upgrade.rs runs it on a database
-- with jobs in flight and compares every catalog entry of the result with a fresh install, so a
-- change to sql/schema.sql, sql/finalize.sql or a #[pg_extern] that this script does not follow
-- fails there.
--
-- What it keeps: every queue, job, schedule, tenant grant and idempotency row, ids and the id
-- sequence, and the leases of running jobs.

-- Reliability (0.3.0): rate limits below one claim in about 32 years are refused now (the next
-- token's time left the timestamp range, and waiting claims were admitted about once a second);
-- a queue that has one keeps the lowest limit instead.
UPDATE jobs.queue SET rate_limit = 0.000000001
 WHERE rate_limit OPERATOR(pg_catalog.<) 0.000000001;

-- Prepared transactions (0.3.0): their effects on shared memory are recorded in the transaction
-- itself (sql/schema.sql has why). 0.2.0 kept them in shared memory, which a restart between
-- PREPARE TRANSACTION and COMMIT PREPARED lost: a transaction prepared by 0.2.0 and committed
-- after the upgrade is covered by the worker's floor check and wake-up backstop within a tick.
CREATE TABLE jobs.prepared_effects (
    gid         text NOT NULL,
    effects     jsonb NOT NULL,
    prepared_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
REVOKE ALL ON jobs.prepared_effects FROM PUBLIC;
