-- The hand-rolled SKIP LOCKED queue of the pg_jobs benchmark suite: one table and a partial
-- index on queued rows, as most applications write their first queue. The load generator
-- (benchmarks/src/comparators/handrolled.rs) claims with
--   UPDATE handrolled.jobs SET state = 'running', attempts = attempts + 1, started_at = now()
--    WHERE id IN (SELECT id FROM handrolled.jobs
--                  WHERE state = 'queued' AND run_at <= now()
--                  ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
--   RETURNING id
-- and completes with UPDATE ... SET state = 'done' (finished rows stay in the table).
DROP SCHEMA IF EXISTS handrolled CASCADE;
CREATE SCHEMA handrolled;

CREATE TABLE handrolled.jobs (
    id          bigserial PRIMARY KEY,
    payload     jsonb       NOT NULL,
    state       text        NOT NULL DEFAULT 'queued',
    run_at      timestamptz NOT NULL DEFAULT now(),
    attempts    integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz
);

CREATE INDEX jobs_queued_idx ON handrolled.jobs (id) WHERE state = 'queued';
