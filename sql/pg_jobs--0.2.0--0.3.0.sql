-- pg_jobs upgrade from 0.2.0 to 0.3.0, run by ALTER EXTENSION pg_jobs UPDATE. Written by hand:
-- pgrx generates install scripts only. tests/integration/tests/upgrade.rs runs it on a database
-- with jobs in flight and compares every catalog entry of the result with a fresh install, so a
-- change to sql/schema.sql, sql/finalize.sql or a #[pg_extern] that this script does not follow
-- fails there.
--
-- What it keeps: every queue, job, schedule, tenant grant and idempotency row, ids and the id
-- sequence, and the leases of running jobs.

-- ==== Workflows (issue 37): dependencies, results and durable waits ==========================
-- The new state. ALTER TYPE ... ADD VALUE may run in this script's transaction, but the value
-- may not be used in it until it commits: nothing below names 'waiting' as a jobs.state (the
-- view compares the state as text, as sql/finalize.sql does).
ALTER TYPE jobs.state ADD VALUE 'waiting';

-- What jobs carry for workflows (sql/schema.sql says what each is). NOT NULL DEFAULT false
-- needs no rewrite of the table (the default is kept in the catalog).
ALTER TABLE jobs.job
    ADD COLUMN dependents boolean NOT NULL DEFAULT false,
    ADD COLUMN after bigint[],
    ADD COLUMN signal jsonb;

-- What a claim returns grows by the signal that woke the job.
ALTER TYPE jobs.claimed ADD ATTRIBUTE signal jsonb;

-- One row per (waiting job, unfinished parent): the child waits until no row of it is left.
-- A parent's success deletes its rows, and the settle that deletes a child's last one queues
-- the child in its transaction (engine::workflows says how two last parents settling at once
-- are told apart without a count that every settle would update). A parent that ends failed or
-- cancelled cancels its waiting children, whose rows go with them. `parents`: how many rows
-- the child got when they were made (all at once), so a settle that deletes them all knows it
-- is the last without asking.
CREATE TABLE jobs.job_dependency (
    child   bigint NOT NULL,
    parent  bigint NOT NULL,
    parents integer NOT NULL,
    PRIMARY KEY (child, parent)
);
COMMENT ON TABLE jobs.job_dependency IS 'pg_jobs: which unfinished jobs each waiting job still waits for; written by jobs_enqueue(after => ...) and the settles of the parents';
-- A settle finds its children here.
CREATE INDEX job_dependency_parent_idx ON jobs.job_dependency (parent);
SELECT pg_catalog.pg_extension_config_dump('jobs.job_dependency', '');

-- One row per job waiting for a signal (jobs_await): the signal's commit deletes the rows of
-- its (tenant, signal) and queues their jobs; the worker (or jobs_reclaim) deletes those past
-- their deadline and queues their jobs timed out. A row goes exactly once, so a signal and a
-- timeout racing for a job wake it once. Kept apart from jobs.job so that the jobs table has no
-- index that only awaits need (every claim and settle would maintain it). tenant '' stands for
-- no tenant, as in jobs.idempotency.
CREATE TABLE jobs.job_await (
    job       bigint PRIMARY KEY,
    tenant    text NOT NULL,
    signal    text NOT NULL,
    deadline  timestamptz NOT NULL
);
COMMENT ON TABLE jobs.job_await IS 'pg_jobs: the jobs waiting for a signal (jobs_await), with their deadline';
CREATE INDEX job_await_signal_idx ON jobs.job_await (tenant, signal);
CREATE INDEX job_await_deadline_idx ON jobs.job_await (deadline);
SELECT pg_catalog.pg_extension_config_dump('jobs.job_await', '');

-- Recorded signals (jobs_signal with keep > 0): an await of a recorded signal that has not
-- expired answers at once, so no wake-up is lost whichever of the two commits first. One row
-- per (tenant, signal): a later signal replaces the payload and the expiry. The worker deletes
-- expired ones in bounded batches.
CREATE TABLE jobs.signal (
    tenant     text NOT NULL,
    name       text NOT NULL,
    payload    jsonb,
    sent_at    timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
COMMENT ON TABLE jobs.signal IS 'pg_jobs: signals recorded by jobs_signal for late awaits, until they expire';
CREATE INDEX signal_expires_idx ON jobs.signal (expires_at);
SELECT pg_catalog.pg_extension_config_dump('jobs.signal', '');

-- The view gains the waiting jobs, at its end. Dropped and made again (CREATE OR REPLACE could
-- replace a view someone else made there; pgspot refuses it), without CASCADE: a user's view
-- that depends on it stops the update and says so instead of being dropped.
DROP VIEW jobs.queue_stats;
CREATE VIEW jobs.queue_stats AS
SELECT q.name AS queue,
       q.paused,
       coalesce(s.ready, 0)                AS ready,
       coalesce(s.scheduled, 0)            AS scheduled,
       coalesce(s.running, 0)              AS running,
       coalesce(s.succeeded, 0)            AS succeeded,
       coalesce(s.failed, 0)               AS failed,
       coalesce(s.cancelled, 0)            AS cancelled,
       coalesce(s.running_past_lease, 0)   AS running_past_lease,
       (SELECT pg_catalog.now() OPERATOR(pg_catalog.-) d.run_at
          FROM jobs.job d
         WHERE d.queue OPERATOR(pg_catalog.=) q.name
           AND d.state OPERATOR(pg_catalog.=) 'queued'
           AND d.run_at OPERATOR(pg_catalog.<=) pg_catalog.now()
           AND pg_catalog.isfinite(d.run_at)
           AND ((SELECT jobs.tenant_scope()) IS NULL
                OR (d.tenant IS NULL AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
                OR d.tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[]))
         ORDER BY d.run_at
         LIMIT 1)                          AS oldest_ready_age,
       coalesce(s.finished_last_minute, 0) AS finished_last_minute,
       -- Workflows (0.3.0): jobs waiting for their dependencies or a signal. Last, as a view
       -- may only grow at its end.
       coalesce(s.waiting, 0)              AS waiting
  FROM jobs.queue q
  LEFT JOIN (
        SELECT j.queue,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'queued'
                                  AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now())    AS ready,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'queued'
                                  AND j.run_at OPERATOR(pg_catalog.>) pg_catalog.now())     AS scheduled,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running')             AS running,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'succeeded')           AS succeeded,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'failed')              AS failed,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'cancelled')           AS cancelled,
               pg_catalog.count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running'
                                  AND j.lease_until OPERATOR(pg_catalog.<) pg_catalog.now()) AS running_past_lease,
               pg_catalog.count(*) FILTER (WHERE j.finished_at OPERATOR(pg_catalog.>)
                                      (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute'))
                                                                                           AS finished_last_minute,
               -- Compared as text: the upgrade script that adds 'waiting' to jobs.state
               -- defines this view in the same transaction, where the new value may not be
               -- used yet.
               pg_catalog.count(*) FILTER (WHERE j.state::pg_catalog.text OPERATOR(pg_catalog.=) 'waiting') AS waiting
          FROM jobs.job j
         WHERE (SELECT jobs.tenant_scope()) IS NULL
            OR (j.tenant IS NULL AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
            OR j.tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[])
         GROUP BY j.queue
       ) s ON s.queue OPERATOR(pg_catalog.=) q.name;
COMMENT ON VIEW jobs.queue_stats IS
    'per queue: jobs by state (ready + scheduled = queued; the states add up, waiting included), running jobs past their lease, the oldest ready job''s age, jobs finished in the last minute';
REVOKE ALL ON jobs.queue_stats FROM PUBLIC;
GRANT SELECT ON jobs.queue_stats TO jobs_client;

-- Recorded signals are a tenant's own, as its jobs are; clients may read them. The dependency
-- and await tables name jobs of every tenant: only the functions read them.
ALTER TABLE jobs.signal ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobs.signal FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON jobs.signal
    USING ((SELECT jobs.tenant_scope()) IS NULL
           OR (tenant OPERATOR(pg_catalog.=) '' AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
           OR tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[]));
REVOKE ALL ON jobs.signal, jobs.job_dependency, jobs.job_await FROM PUBLIC;
GRANT SELECT ON jobs.signal TO jobs_client;

-- after is appended to both enqueue functions: a new argument list is a new function.
DROP FUNCTION jobs_enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text);
DROP FUNCTION jobs_enqueue_batch(pg_catalog.text, pg_catalog.jsonb[], pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text[],
    pg_catalog.text[]);

CREATE FUNCTION "jobs_enqueue"(
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT '{}', /* Option < Jsonb > */
	"kind" TEXT DEFAULT 'default', /* Option < & str > */
	"run_at" timestamp with time zone DEFAULT pg_catalog.now(), /* Option < TimestampWithTimeZone > */
	"priority" INT DEFAULT 0, /* Option < i32 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"headers" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"unique_key" TEXT DEFAULT NULL, /* Option < & str > */
	"unique_for" interval DEFAULT NULL, /* Option < Interval > */
	"on_conflict" TEXT DEFAULT 'skip', /* Option < & str > */
	"tenant" TEXT DEFAULT NULL, /* Option < & str > */
	"group_key" TEXT DEFAULT NULL, /* Option < & str > */
	"after" bigint[] DEFAULT NULL /* :: std :: option :: Option < Vec < Option < i64 > > > */
) RETURNS bigint /* i64 */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_enqueue_wrapper';

CREATE FUNCTION "jobs_enqueue_batch"(
	"queue" TEXT, /* Option < & str > */
	"payloads" jsonb[], /* Option < JsonbArray > */
	"kind" TEXT DEFAULT 'default', /* Option < & str > */
	"run_at" timestamp with time zone DEFAULT pg_catalog.now(), /* Option < TimestampWithTimeZone > */
	"priority" INT DEFAULT 0, /* Option < i32 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"headers" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"unique_key" TEXT DEFAULT NULL, /* Option < & str > */
	"unique_for" interval DEFAULT NULL, /* Option < Interval > */
	"on_conflict" TEXT DEFAULT 'skip', /* Option < & str > */
	"tenant" TEXT DEFAULT NULL, /* Option < & str > */
	"group_key" TEXT DEFAULT NULL, /* Option < & str > */
	"unique_keys" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"group_keys" TEXT[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < String > > > */
	"after" bigint[] DEFAULT NULL /* :: std :: option :: Option < Vec < Option < i64 > > > */
) RETURNS SETOF jobs.enqueued /* EnqueuedRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_enqueue_batch_wrapper';

CREATE FUNCTION "jobs_results"(
	"ids" bigint[] /* :: std :: option :: Option < Vec < Option < i64 > > > */
) RETURNS TABLE (
	"id" bigint,  /* i64 */
	"state" TEXT,  /* String */
	"result" jsonb,  /* Option < Jsonb > */
	"errors" jsonb,  /* Option < Jsonb > */
	"finished_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_results_wrapper';

CREATE FUNCTION "jobs_wait"(
	"ids" bigint[], /* :: std :: option :: Option < Vec < Option < i64 > > > */
	"timeout" interval /* Option < Interval > */
) RETURNS TABLE (
	"id" bigint,  /* i64 */
	"state" TEXT,  /* String */
	"result" jsonb,  /* Option < Jsonb > */
	"errors" jsonb,  /* Option < Jsonb > */
	"finished_at" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_wait_wrapper';

CREATE FUNCTION "jobs_await"(
	"id" bigint, /* Option < i64 > */
	"lease" uuid, /* Option < pgrx :: Uuid > */
	"signal" TEXT, /* Option < & str > */
	"timeout" interval DEFAULT '1 day' /* Option < Interval > */
) RETURNS TEXT /* & '_ str */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_await_wrapper';

CREATE FUNCTION "jobs_signal"(
	"signal" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"keep" interval DEFAULT '1 day' /* Option < Interval > */
) RETURNS INT /* i32 */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_signal_wrapper';

-- Callable by every pg_jobs role, as every function of the extension (each checks its caller's
-- role itself).
REVOKE ALL ON FUNCTION jobs_enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int8[])
    TO jobs_client;
REVOKE ALL ON FUNCTION jobs_enqueue_batch(pg_catalog.text, pg_catalog.jsonb[], pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text[],
    pg_catalog.text[], pg_catalog.int8[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_enqueue_batch(pg_catalog.text, pg_catalog.jsonb[], pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.text[],
    pg_catalog.text[], pg_catalog.int8[]) TO jobs_client;
REVOKE ALL ON FUNCTION jobs_results(pg_catalog.int8[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_results(pg_catalog.int8[]) TO jobs_client;
REVOKE ALL ON FUNCTION jobs_wait(pg_catalog.int8[], pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_wait(pg_catalog.int8[], pg_catalog.interval) TO jobs_client;
REVOKE ALL ON FUNCTION jobs_await(pg_catalog.int8, uuid, pg_catalog.text, pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_await(pg_catalog.int8, uuid, pg_catalog.text, pg_catalog.interval) TO jobs_client;
REVOKE ALL ON FUNCTION jobs_signal(pg_catalog.text, pg_catalog.jsonb, pg_catalog.interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_signal(pg_catalog.text, pg_catalog.jsonb, pg_catalog.interval) TO jobs_client;
-- ==== end of workflows =========================================================================

-- Reliability (0.3.0): rate limits below one claim in about 32 years are refused now (the next
-- token's time left the timestamp range, and waiting claims were admitted about once a second);
-- a queue that has one keeps the lowest limit instead.
UPDATE jobs.queue SET rate_limit = 0.000000001
 WHERE rate_limit OPERATOR(pg_catalog.<) 0.000000001;

-- Reliability (0.3.0): a batch payload whose unique key's holder had run out of its window went
-- in without its group and could be marked behind it: a waiting job of no group, which nothing
-- ever made claimable again. Such jobs are made claimable.
UPDATE jobs.job SET group_wait = false
 WHERE group_wait AND group_key IS NULL AND state OPERATOR(pg_catalog.=) 'queued';

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

-- ==== Set-up checks (0.3.0) ===============================================================
-- Said once, at CREATE EXTENSION (and at the update), where the set-up leaves pg_jobs exposed:
-- * the functions' schema lets other roles create objects: a function they create there with
--   a more specific signature (public.jobs_get(integer), say) would capture calls of other
--   roles whose arguments are untyped literals (PostgreSQL 13 and 14 grant CREATE on schema
--   public to every role);
-- * no background worker serves this database: pg_jobs is not preloaded, or pg_jobs.databases
--   does not name it, and nothing reclaims expired leases but jobs_reclaim().
DO $checks$
DECLARE
    creators pg_catalog.text;
    databases pg_catalog.text := pg_catalog.current_setting('pg_jobs.databases', true);
BEGIN
    SELECT pg_catalog.string_agg(
               CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(r.rolname) END, ', '
               ORDER BY a.grantee OPERATOR(pg_catalog.<>) 0, r.rolname)
      INTO creators
      FROM pg_catalog.pg_namespace n,
           LATERAL pg_catalog.aclexplode(
               COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
      LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
     WHERE n.nspname OPERATOR(pg_catalog.=) '@extschema@'
       AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
       AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner
       AND NOT COALESCE(r.rolsuper, false);
    IF creators IS NOT NULL THEN
        RAISE WARNING 'pg_jobs''s functions are in schema %, where % may create objects',
            '@extschema@', creators
            USING DETAIL = 'A function created there with a more specific signature (such as jobs_get(integer)) captures the calls of other roles whose arguments are untyped.',
                  HINT = pg_catalog.format('Revoke it (REVOKE CREATE ON SCHEMA %I FROM %s), or install pg_jobs into a schema only its owner may create objects in (CREATE SCHEMA jobs_api; CREATE EXTENSION pg_jobs SCHEMA jobs_api;) and put that schema on the search path.', '@extschema@', creators);
    END IF;
    IF databases IS NULL THEN
        RAISE WARNING 'pg_jobs is not in shared_preload_libraries: no background worker will serve database %',
            pg_catalog.current_database()
            USING DETAIL = 'Expired leases are reclaimed only by jobs_reclaim(), and schedules run only through jobs_run_schedules().',
                  HINT = 'Add pg_jobs to shared_preload_libraries (ALTER SYSTEM SET shared_preload_libraries = ''pg_jobs'') and restart the server.';
    ELSIF NOT pg_catalog.current_database() OPERATOR(pg_catalog.=) ANY (
              SELECT pg_catalog.btrim(name)
                FROM pg_catalog.regexp_split_to_table(databases, ',') AS name) THEN
        RAISE WARNING 'pg_jobs.databases (%) does not name database %: no background worker will serve it',
            databases, pg_catalog.current_database()
            USING DETAIL = 'Expired leases are reclaimed only by jobs_reclaim(), and schedules run only through jobs_run_schedules().',
                  HINT = pg_catalog.format('Run ALTER SYSTEM SET pg_jobs.databases = %L and restart the server (an ALTER SYSTEM setting outlasts scripts/up, which rewrites only pg_jobs.conf).',
                      pg_catalog.concat_ws(', ', NULLIF(pg_catalog.btrim(databases), ''), pg_catalog.current_database()));
    END IF;
END
$checks$;

-- One commit per job (0.3.0): a worker completes what it finished and claims what comes next
-- in one call.
CREATE  FUNCTION "jobs_complete_and_claim"(
	"queue" TEXT, /* Option < & str > */
	"ids" bigint[], /* :: std :: option :: Option < Vec < Option < i64 > > > */
	"leases" uuid[], /* :: std :: option :: Option < Vec < Option < pgrx :: Uuid > > > */
	"results" jsonb[] DEFAULT NULL, /* :: std :: option :: Option < Vec < Option < pgrx :: JsonB > > > */
	"worker" TEXT DEFAULT NULL, /* Option < & str > */
	"n" INT DEFAULT 1, /* Option < i32 > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"kinds" TEXT[] DEFAULT NULL /* :: std :: option :: Option < Vec < Option < String > > > */
) RETURNS TABLE (
	"settled" bigint,  /* Option < i64 > */
	"outcome" TEXT,  /* Option < String > */
	"claimed" jobs.claimed  /* Option < ClaimedRow > */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_complete_and_claim_wrapper';
REVOKE ALL ON FUNCTION jobs_complete_and_claim(pg_catalog.text, pg_catalog.int8[], uuid[],
    pg_catalog.jsonb[], pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.text[])
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_complete_and_claim(pg_catalog.text, pg_catalog.int8[], uuid[],
    pg_catalog.jsonb[], pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.text[])
    TO jobs_client;

-- ---------------------------------------------------------------------------------------------
-- Dashboard (pg_jobs issue 38): jobs_run_now; jobs_totals counts released, lost, cancelled and
-- enqueued jobs too; the client workers (jobs.workers) and the throughput history
-- (jobs.throughput_minute, jobs.throughput).
-- ---------------------------------------------------------------------------------------------
CREATE TABLE jobs.throughput_minute (
    minute      timestamptz NOT NULL,
    queue       text COLLATE pg_catalog."C" NOT NULL,
    tenant_hash bigint NOT NULL,
    enqueued    bigint NOT NULL,
    completed   bigint NOT NULL,
    failed      bigint NOT NULL,
    retried     bigint NOT NULL,
    PRIMARY KEY (minute, queue, tenant_hash)
);
COMMENT ON TABLE jobs.throughput_minute IS 'pg_jobs: per minute, queue and tenant hash, jobs enqueued, completed, failed and retried (24 hours; read jobs.throughput)';

-- The result grew by four columns: a function's result type cannot change in place.
DROP FUNCTION jobs_totals();
CREATE FUNCTION "jobs_totals"() RETURNS TABLE (
	"queue" TEXT,  /* Option < String > */
	"completed" bigint,  /* i64 */
	"failed" bigint,  /* i64 */
	"retried" bigint,  /* i64 */
	"released" bigint,  /* i64 */
	"lost" bigint,  /* i64 */
	"cancelled" bigint,  /* i64 */
	"enqueued" bigint  /* i64 */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_totals_wrapper';

CREATE FUNCTION "jobs_run_now"(
	"id" bigint /* Option < i64 > */
) RETURNS TEXT /* & '_ str */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_run_now_wrapper';

CREATE FUNCTION jobs."waiting_claims"() RETURNS TABLE (
	"pid" INT,  /* i32 */
	"worker" TEXT,  /* String */
	"queue" TEXT,  /* String */
	"since" timestamp with time zone  /* Option < TimestampWithTimeZone > */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'waiting_claims_wrapper';

CREATE FUNCTION jobs."throughput_pending"() RETURNS TABLE (
	"queue" TEXT,  /* String */
	"minute" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"enqueued" bigint,  /* i64 */
	"completed" bigint,  /* i64 */
	"failed" bigint,  /* i64 */
	"retried" bigint  /* i64 */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'throughput_pending_wrapper';

CREATE FUNCTION jobs."tenant_hash"(
	"tenant" TEXT /* Option < & str > */
) RETURNS bigint /* i64 */
IMMUTABLE PARALLEL SAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tenant_hash_wrapper';

-- The views of client workers and throughput, as sql/finalize.sql makes them.
CREATE VIEW jobs.workers AS
WITH running AS (
    SELECT coalesce(j.worker, '') AS worker,
           pg_catalog.array_agg(DISTINCT j.queue) AS queues,
           pg_catalog.count(*) AS running,
           (pg_catalog.array_agg(j.id ORDER BY j.id))[1:100] AS running_jobs,
           pg_catalog.max(j.started_at) AS last_claim,
           pg_catalog.max(j.heartbeat_at) AS last_heartbeat,
           pg_catalog.min(j.lease_until) AS next_lease_end,
           pg_catalog.count(*) FILTER (WHERE j.lease_until OPERATOR(pg_catalog.<)
                   (pg_catalog.now() OPERATOR(pg_catalog.+) (j.lease_duration OPERATOR(pg_catalog./) 4::pg_catalog.float8)))
               AS leases_expiring
      FROM jobs.job j
     WHERE j.state OPERATOR(pg_catalog.=) 'running'
       AND j.lease_until IS NOT NULL
       AND ((SELECT jobs.tenant_scope()) IS NULL
            OR (j.tenant IS NULL AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
            OR j.tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[]))
     GROUP BY 1
), waiting AS (
    SELECT w.worker,
           pg_catalog.array_agg(DISTINCT w.queue) AS queues,
           pg_catalog.array_agg(w.pid ORDER BY w.pid) AS pids,
           pg_catalog.count(*) AS waiting,
           pg_catalog.min(w.since) AS waiting_since
      FROM jobs.waiting_claims() w
     GROUP BY w.worker
), named AS (
    SELECT coalesce(r.worker, w.worker) AS worker, r.queues AS running_queues,
           w.queues AS waiting_queues, w.pids AS waiting_pids, w.waiting, w.waiting_since,
           r.running, r.running_jobs, r.last_claim, r.last_heartbeat, r.next_lease_end,
           r.leases_expiring
      FROM running r
      FULL JOIN waiting w ON w.worker OPERATOR(pg_catalog.=) r.worker
)
SELECT n.worker,
       ARRAY(SELECT DISTINCT q.queue
               FROM pg_catalog.unnest(pg_catalog.array_cat(n.running_queues, n.waiting_queues)) AS q(queue)
              ORDER BY 1) AS queues,
       ARRAY(SELECT DISTINCT b.pid
               FROM (SELECT pg_catalog.unnest(n.waiting_pids)
                     UNION ALL
                     SELECT a.pid FROM pg_catalog.pg_stat_activity a
                      WHERE a.application_name OPERATOR(pg_catalog.=) n.worker
                        AND a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database()) AS b(pid)
              ORDER BY 1) AS pids,
       coalesce(n.waiting, 0) AS waiting,
       n.waiting_since,
       coalesce(n.running, 0) AS running,
       coalesce(n.running_jobs, '{}') AS running_jobs,
       greatest(n.last_claim, n.waiting_since) AS last_claim,
       n.last_heartbeat,
       n.next_lease_end,
       coalesce(n.leases_expiring, 0) AS leases_expiring,
       CASE WHEN n.waiting IS NOT NULL THEN pg_catalog.now()
            ELSE greatest(n.last_claim, n.last_heartbeat) END AS last_seen
  FROM named n;
COMMENT ON VIEW jobs.workers IS
    'pg_jobs client workers by name: running jobs, waiting claims, backends, last claim and heartbeat, leases about to run out';

-- Throughput per queue and minute over the last 24 hours: jobs enqueued, completed, failed
-- and retried. The minutes the background worker wrote (jobs.throughput_minute) and the
-- current one, still in shared memory (jobs.throughput_pending); within the caller's tenant
-- scope.
CREATE VIEW jobs.throughput AS
SELECT h.queue,
       h.minute,
       pg_catalog.sum(h.enqueued)::bigint  AS enqueued,
       pg_catalog.sum(h.completed)::bigint AS completed,
       pg_catalog.sum(h.failed)::bigint    AS failed,
       pg_catalog.sum(h.retried)::bigint   AS retried
  FROM (SELECT t.queue, t.minute, t.enqueued, t.completed, t.failed, t.retried
          FROM jobs.throughput_minute t
         WHERE t.minute OPERATOR(pg_catalog.>=) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '24 hours')
           AND ((SELECT jobs.tenant_scope()) IS NULL
                OR (t.tenant_hash OPERATOR(pg_catalog.=) 0
                    AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
                OR t.tenant_hash OPERATOR(pg_catalog.=) ANY (ARRAY(
                       SELECT jobs.tenant_hash(s.tenant)
                         FROM pg_catalog.unnest((SELECT jobs.tenant_scope())) AS s(tenant))))
        UNION ALL
        SELECT p.queue, p.minute, p.enqueued, p.completed, p.failed, p.retried
          FROM jobs.throughput_pending() p) h
 GROUP BY h.queue, h.minute;
COMMENT ON VIEW jobs.throughput IS
    'pg_jobs: per queue and minute over the last 24 hours, jobs enqueued, completed, failed and retried';

REVOKE ALL ON jobs.throughput_minute FROM PUBLIC;
GRANT SELECT ON jobs.workers, jobs.throughput TO jobs_client;
DO $privileges$
DECLARE
    member pg_catalog.regprocedure;
BEGIN
    FOREACH member IN ARRAY ARRAY[
        'jobs_totals()'::pg_catalog.regprocedure,
        'jobs_run_now(bigint)'::pg_catalog.regprocedure,
        'jobs.waiting_claims()'::pg_catalog.regprocedure,
        'jobs.throughput_pending()'::pg_catalog.regprocedure,
        'jobs.tenant_hash(text)'::pg_catalog.regprocedure]
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', member);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO jobs_client', member);
    END LOOP;
END
$privileges$;
-- ---------------------------------------------------------------------------------------------
-- End of the dashboard's part.
-- ---------------------------------------------------------------------------------------------

-- ==== Claims by kind (issue 39) =============================================================
-- The kinds index holds only the jobs of queues with claims_by_kind (sql/schema.sql says why).
-- Queues that exist keep what they had: an index by kind for every job, so their claims of
-- some kinds stay as fast. The columns come in true for every row there is (NOT NULL DEFAULT
-- needs no rewrite of the table), and new queues and jobs take false from then on.
ALTER TABLE jobs.queue ADD COLUMN claims_by_kind boolean NOT NULL DEFAULT true;
ALTER TABLE jobs.queue ALTER COLUMN claims_by_kind SET DEFAULT false;
ALTER TABLE jobs.job ADD COLUMN kind_indexed boolean NOT NULL DEFAULT true;
ALTER TABLE jobs.job ALTER COLUMN kind_indexed SET DEFAULT false;
DROP INDEX jobs.job_kind_claim_idx;
CREATE INDEX job_kind_claim_idx
    ON jobs.job ((pg_catalog.hashtext(queue)), (pg_catalog.hashtext(kind)), priority, run_at, id)
    WITH (deduplicate_items = off)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND NOT group_wait AND kind_indexed;

-- claims_by_kind is appended to jobs_create_queue: a new argument list is a new function.
DROP FUNCTION jobs_create_queue(pg_catalog.text, pg_catalog.interval, pg_catalog.int4,
    pg_catalog.interval, pg_catalog.interval, pg_catalog.float8, pg_catalog.interval,
    pg_catalog.float8, pg_catalog.float8, pg_catalog.int4, pg_catalog.text);
CREATE FUNCTION "jobs_create_queue"(
	"queue" TEXT, /* Option < & str > */
	"lease" interval DEFAULT NULL, /* Option < Interval > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"backoff_base" interval DEFAULT NULL, /* Option < Interval > */
	"backoff_max" interval DEFAULT NULL, /* Option < Interval > */
	"jitter" double precision DEFAULT NULL, /* Option < f64 > */
	"retention" interval DEFAULT NULL, /* Option < Interval > */
	"rate_limit" double precision DEFAULT NULL, /* Option < f64 > */
	"rate_burst" double precision DEFAULT NULL, /* Option < f64 > */
	"group_concurrency" INT DEFAULT NULL, /* Option < i32 > */
	"dead_letter" TEXT DEFAULT NULL, /* Option < & str > */
	"claims_by_kind" bool DEFAULT NULL /* Option < bool > */
) RETURNS jobs.queue /* QueueRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_create_queue_wrapper';
REVOKE ALL ON FUNCTION jobs_create_queue(pg_catalog.text, pg_catalog.interval, pg_catalog.int4,
    pg_catalog.interval, pg_catalog.interval, pg_catalog.float8, pg_catalog.interval,
    pg_catalog.float8, pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.bool)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_create_queue(pg_catalog.text, pg_catalog.interval, pg_catalog.int4,
    pg_catalog.interval, pg_catalog.interval, pg_catalog.float8, pg_catalog.interval,
    pg_catalog.float8, pg_catalog.float8, pg_catalog.int4, pg_catalog.text, pg_catalog.bool)
    TO jobs_client;
-- ==== end of claims by kind ==================================================================

-- ==== Scale-out on Citus (0.3.0, issue 40) =================================================
-- jobs_distribute() turns a Citus cluster's pg_jobs distributed (docs/src/internals/citus.md);
-- the trigger function gives jobs ids that route to their shards there. Nothing changes on a
-- single server.
CREATE  FUNCTION "jobs_distribute"(
	"shard_count" INT DEFAULT 32 /* Option < i32 > */
) RETURNS TEXT /* String */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_distribute_wrapper';
REVOKE ALL ON FUNCTION jobs_distribute(pg_catalog.int4) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs_distribute(pg_catalog.int4) TO jobs_client;
CREATE FUNCTION jobs."distributed_job_id"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'distributed_job_id_wrapper';
REVOKE ALL ON FUNCTION jobs.distributed_job_id() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobs.distributed_job_id() TO jobs_client;
-- ==== end of scale-out on Citus ==============================================================
