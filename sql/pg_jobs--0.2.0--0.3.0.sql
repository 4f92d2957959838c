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
