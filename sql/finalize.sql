-- pg_jobs, last part of the install script: what depends on the functions pgrx creates in
-- between (the view and the row-level security policy call jobs.tenant_scope()), and the
-- privileges of every object.

-- Per queue: jobs by state, where ready (queued and due) and scheduled (queued, not yet due)
-- split the queued jobs, so the counts add up to the queue's jobs; running jobs whose lease has
-- passed (the worker reclaims them within a tick); the oldest ready job's age; and jobs
-- finished in the last minute. No row can make it fail: the functions refuse infinite times,
-- and a row that has one is left out of the age. It counts the jobs the session may see: its
-- tenants' (see jobs.tenant_scope); the view runs as its owner, so the filter is here rather
-- than left to the table's row-level security.
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


-- Row-level security, forced (the owner is subject to it too): a direct read of jobs.job shows
-- the session only the jobs its tenant scope allows, exactly as the functions would (they
-- filter by the same scope themselves). The scope is evaluated once per statement.
ALTER TABLE jobs.job ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobs.job FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON jobs.job
    USING ((SELECT jobs.tenant_scope()) IS NULL
           OR (tenant IS NULL AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
           OR tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[]));

-- Reading: every pg_jobs role may read queues, jobs (its tenants') and statistics; the tenant
-- grants only admins. Nobody but the owner may write: state changes only through the
-- functions.
REVOKE ALL ON ALL TABLES IN SCHEMA jobs FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA jobs FROM PUBLIC;
GRANT USAGE ON SCHEMA jobs TO jobs_client;
GRANT SELECT ON jobs.queue, jobs.job, jobs.queue_stats TO jobs_client;
GRANT SELECT ON jobs.tenant_grant TO jobs_admin;

-- Calling: nobody by default, every pg_jobs role for each function of the extension; each
-- function then checks that its caller has the role its work needs (a client may enqueue but
-- not claim, say) and names the role to grant when it has not.
DO $privileges$
DECLARE
    member pg_catalog.regprocedure;
BEGIN
    FOR member IN
        SELECT d.objid::pg_catalog.regprocedure
          FROM pg_catalog.pg_depend d
          JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
         WHERE d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
           AND d.deptype OPERATOR(pg_catalog.=) 'e'
           AND e.extname OPERATOR(pg_catalog.=) 'pg_jobs'
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', member);
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO jobs_client', member);
    END LOOP;
END
$privileges$;

-- ==== Idempotency records (issue 13) =====================================================-- A session sees and touches only its tenants' records, as with jobs; records without a
-- tenant have tenant ''. Clients (and so workers and admins) may read them; only the functions
-- write.
ALTER TABLE jobs.idempotency ENABLE ROW LEVEL SECURITY;
ALTER TABLE jobs.idempotency FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_scope ON jobs.idempotency
    USING ((SELECT jobs.tenant_scope()) IS NULL
           OR (tenant OPERATOR(pg_catalog.=) '' AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
           OR tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[]));
REVOKE ALL ON jobs.idempotency FROM PUBLIC;
GRANT SELECT ON jobs.idempotency TO jobs_client;
-- ==== end of idempotency records ==================================================================
-- Schedules (pg_jobs issue 12): only admins schedule, so only admins read them (their
-- payloads are jobs of no tenant). The tables stay writable by the owner alone.
GRANT SELECT ON jobs.schedule, jobs.schedules TO jobs_admin;
-- ==== Workflows (issue 37) =====================================================================
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
-- ==== end of workflows =========================================================================

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

-- ---------------------------------------------------------------------------------------------
-- Dashboard (pg_jobs issue 38): the views of client workers and of throughput. Both run as
-- their owner and filter by the session's tenant scope themselves, as jobs.queue_stats does.
-- ---------------------------------------------------------------------------------------------

-- Client workers, by the worker name their claims gave (jobs_claim's worker): what they run
-- (the running jobs), their claims waiting for work now (jobs.waiting_claims, from shared
-- memory), their backends (the waiting ones and the sessions whose application_name is the
-- name), their last claim and heartbeat, and the leases about to run out (less than a
-- quarter of the lease left, or passed: a worker whose heartbeats stopped). last_seen is now
-- while a claim waits, else the latest claim or heartbeat. Built from what the server has, so
-- a worker that neither runs a job nor waits is not listed.
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
-- ---------------------------------------------------------------------------------------------
-- End of the dashboard's views.
-- ---------------------------------------------------------------------------------------------
