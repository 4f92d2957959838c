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
