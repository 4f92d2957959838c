-- pg_jobs schema: the tables, types and views behind the jobs_* functions.
--
-- Users may read everything here; state changes go through the functions, which keep the
-- rules of the state machine (fencing, attempts, terminal states).

CREATE SCHEMA jobs;
COMMENT ON SCHEMA jobs IS 'pg_jobs: tables, types and views of the job queue';

CREATE TYPE jobs.state AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled');

CREATE TABLE jobs.queue (
    name              text PRIMARY KEY
                      CHECK (name ~ '^[A-Za-z0-9_.:-]{1,63}$'),
    lease             interval NOT NULL DEFAULT '30 seconds' CHECK (lease > '0'),
    max_attempts      integer NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 10000),
    backoff_base      interval NOT NULL DEFAULT '1 second' CHECK (backoff_base >= '0'),
    backoff_max       interval NOT NULL DEFAULT '1 hour' CHECK (backoff_max >= backoff_base),
    jitter            double precision NOT NULL DEFAULT 0.1 CHECK (jitter BETWEEN 0 AND 1),
    retention         interval NOT NULL DEFAULT '7 days' CHECK (retention >= '0'),
    paused            boolean NOT NULL DEFAULT false,
    rate_limit        double precision CHECK (rate_limit > 0),
    group_concurrency integer NOT NULL DEFAULT 1 CHECK (group_concurrency >= 1),
    dead_letter       text REFERENCES jobs.queue (name) DEFERRABLE INITIALLY DEFERRED
                      CHECK (dead_letter <> name),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE jobs.queue IS 'pg_jobs queues and their settings; change them with jobs_create_queue';

-- No foreign key to jobs.queue: its check would lock the queue row (FOR KEY SHARE) on every
-- enqueue and turn concurrent producers into MultiXact traffic. The enqueue statement reads the
-- queue row in the same statement instead, and jobs_drop_queue locks this table out.
-- Column order matters for WAL: an update logs only the bytes between the longest unchanged
-- prefix and suffix of the row. So what never changes comes first, then what retries and
-- heartbeats change, and last what every claim and settle changes.
CREATE TABLE jobs.job (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue          text NOT NULL,
    kind           text NOT NULL DEFAULT 'default',
    payload        jsonb NOT NULL DEFAULT '{}',
    headers        jsonb,
    priority       smallint NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL,
    tenant         text,
    group_key      text,
    unique_key     text,
    origin         jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    run_at         timestamptz NOT NULL DEFAULT now(),
    errors         jsonb NOT NULL DEFAULT '[]',
    release_reason text,
    progress       jsonb,
    state          jobs.state NOT NULL DEFAULT 'queued',
    attempt        integer NOT NULL DEFAULT 0,
    worker         text,
    lease          uuid,
    lease_duration interval,
    started_at     timestamptz,
    lease_until    timestamptz,
    heartbeat_at   timestamptz,
    finished_at    timestamptz,
    result         jsonb,
    CHECK (attempt BETWEEN 0 AND max_attempts)
)
-- Every job is updated at least twice (claim, settle). Room on its page lets the new version
-- stay there: no page-move lock record in the WAL, a smaller update record, fewer pages dirtied
-- per job. With half of each page free, a claim of every job on a page still fits.
WITH (fillfactor = 50);
COMMENT ON TABLE jobs.job IS 'pg_jobs jobs, one row per job for its whole life, until retention purges it';

-- The claim reads only this index: due, queued jobs of one queue in claim order. Finished and
-- running jobs are not in it, so a table full of history does not slow claims down.
CREATE INDEX job_claim_idx ON jobs.job (queue, priority, run_at, id) WHERE state = 'queued';
-- Reclaim finds expired leases here.
CREATE INDEX job_lease_idx ON jobs.job (lease_until) WHERE state = 'running';
-- No index serves the retention purge: an index on finished jobs would cost every completion
-- an insertion (and its WAL) to speed up a job that runs once a tick. The worker sweeps the
-- table in id order instead, a bounded window at a time.

-- What jobs_claim returns for each claimed job.
CREATE TYPE jobs.claimed AS (
    id           bigint,
    queue        text,
    kind         text,
    payload      jsonb,
    headers      jsonb,
    attempt      integer,
    max_attempts integer,
    lease        uuid,
    lease_until  timestamptz,
    priority     smallint,
    tenant       text,
    group_key    text,
    created_at   timestamptz,
    run_at       timestamptz
);

-- Per queue: jobs by state, where ready (queued and due) and scheduled (queued, not yet due)
-- split the queued jobs, so the counts add up to the queue's jobs; running jobs whose lease has
-- passed (the worker reclaims them within a tick); the oldest ready job's age; and jobs
-- finished in the last minute. No row can make it fail: the functions refuse infinite times,
-- and a row that has one is left out of the age.
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
         ORDER BY d.run_at
         LIMIT 1)                          AS oldest_ready_age,
       coalesce(s.finished_last_minute, 0) AS finished_last_minute
  FROM jobs.queue q
  LEFT JOIN (
        SELECT j.queue,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'queued'
                                  AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.now())    AS ready,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'queued'
                                  AND j.run_at OPERATOR(pg_catalog.>) pg_catalog.now())     AS scheduled,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running')             AS running,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'succeeded')           AS succeeded,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'failed')              AS failed,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'cancelled')           AS cancelled,
               count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'running'
                                  AND j.lease_until OPERATOR(pg_catalog.<) pg_catalog.now()) AS running_past_lease,
               count(*) FILTER (WHERE j.finished_at OPERATOR(pg_catalog.>)
                                      (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute'))
                                                                                           AS finished_last_minute
          FROM jobs.job j
         GROUP BY j.queue
       ) s ON s.queue OPERATOR(pg_catalog.=) q.name;
COMMENT ON VIEW jobs.queue_stats IS
    'per queue: jobs by state (ready + scheduled = queued; the states add up), running jobs past their lease, the oldest ready job''s age, jobs finished in the last minute';

INSERT INTO jobs.queue (name) VALUES ('default');

-- Queues and jobs are user data: pg_dump must carry them (the default queue comes back with
-- CREATE EXTENSION, so only its changes would be lost, and those are rare).
SELECT pg_catalog.pg_extension_config_dump('jobs.queue', 'WHERE name <> ''default''');
SELECT pg_catalog.pg_extension_config_dump('jobs.job', '');
SELECT pg_catalog.pg_extension_config_dump('jobs.job_id_seq', '');

-- The priorities above `above` (all of them when NULL) that have queued jobs in a queue,
-- lowest first, found by a loose index scan: one probe of job_claim_idx per priority, however
-- many jobs each holds. Claims read due jobs priority by priority through it, so a pile of
-- delayed jobs is never walked. It is a plain SQL function without a SET clause so the planner
-- inlines it into the statements that use it; its operators are qualified instead.
CREATE FUNCTION jobs.queued_priorities(queue_name text, above smallint DEFAULT NULL)
RETURNS SETOF smallint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    WITH RECURSIVE priorities AS (
        (SELECT j.priority
           FROM jobs.job j
          WHERE j.queue OPERATOR(pg_catalog.=) queue_name
            AND j.state OPERATOR(pg_catalog.=) 'queued'::jobs.state
            AND j.priority OPERATOR(pg_catalog.>=) coalesce(above::integer OPERATOR(pg_catalog.+) 1, -32768)
          ORDER BY j.priority
          LIMIT 1)
        UNION ALL
        SELECT (SELECT j.priority
                  FROM jobs.job j
                 WHERE j.queue OPERATOR(pg_catalog.=) queue_name
                   AND j.state OPERATOR(pg_catalog.=) 'queued'::jobs.state
                   AND j.priority OPERATOR(pg_catalog.>) p.priority
                 ORDER BY j.priority
                 LIMIT 1)
          FROM priorities p
         WHERE p.priority IS NOT NULL
    )
    SELECT priority FROM priorities WHERE priority IS NOT NULL
$$;
