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
       coalesce(s.finished_last_minute, 0) AS finished_last_minute
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
                                                                                           AS finished_last_minute
          FROM jobs.job j
         WHERE (SELECT jobs.tenant_scope()) IS NULL
            OR (j.tenant IS NULL AND pg_catalog.cardinality((SELECT jobs.tenant_scope())) OPERATOR(pg_catalog.=) 0)
            OR j.tenant OPERATOR(pg_catalog.=) ANY ((SELECT jobs.tenant_scope())::pg_catalog.text[])
         GROUP BY j.queue
       ) s ON s.queue OPERATOR(pg_catalog.=) q.name;
COMMENT ON VIEW jobs.queue_stats IS
    'per queue: jobs by state (ready + scheduled = queued; the states add up), running jobs past their lease, the oldest ready job''s age, jobs finished in the last minute';


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
