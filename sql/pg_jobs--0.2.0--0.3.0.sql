-- pg_jobs upgrade from 0.2.0 to 0.3.0, run by ALTER EXTENSION pg_jobs UPDATE. Written by hand:
-- pgrx generates install scripts only. tests/integration/tests/upgrade.rs runs it on a database
-- with jobs in flight and compares every catalog entry of the result with a fresh install, so a
-- change to sql/schema.sql, sql/finalize.sql or a #[pg_extern] that this script does not follow
-- fails there.
--
-- What it keeps: every queue, job, schedule, tenant grant and idempotency row, ids and the id
-- sequence, and the leases of running jobs.

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
