-- pg_jobs schema: the roles, tables, types and views behind the jobs_* functions.
--
-- Users with a pg_jobs role may read the tables and views (row-level security shows each
-- session its tenants' jobs only); state changes go through the functions alone, which run as
-- the extension's owner and keep the rules of the state machine (fencing, attempts, terminal
-- states). Every operator and function here is schema-qualified, so no object a user creates
-- can change what this script or these definitions do (pgspot checks it).

-- The three roles, made when missing: roles belong to the cluster, so another database may
-- have made them already, and dropping the extension here leaves them for the others.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'jobs_client') THEN
        CREATE ROLE jobs_client NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'jobs_worker') THEN
        CREATE ROLE jobs_worker NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'jobs_admin') THEN
        CREATE ROLE jobs_admin NOLOGIN;
    END IF;
END
$roles$;
COMMENT ON ROLE jobs_client IS 'pg_jobs: enqueue, read and cancel its jobs, idempotency records';
COMMENT ON ROLE jobs_worker IS 'pg_jobs: a client that also claims, heartbeats, settles and releases jobs';
COMMENT ON ROLE jobs_admin IS 'pg_jobs: everything (queues, retry, reclaim, schedules, tenants, every job)';
-- Each role has the powers of the one before it.
GRANT jobs_client TO jobs_worker;
GRANT jobs_worker TO jobs_admin;

CREATE SCHEMA jobs;
COMMENT ON SCHEMA jobs IS 'pg_jobs: tables, types and views of the job queue';

-- 'waiting' (0.3.0, workflows): a job that waits for its dependencies or for a signal. Last, as
-- an upgrade's ALTER TYPE ... ADD VALUE puts it.
CREATE TYPE jobs.state AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'waiting');

CREATE TABLE jobs.queue (
    name              text COLLATE pg_catalog."C" PRIMARY KEY
                      CHECK (name OPERATOR(pg_catalog.~) '^[A-Za-z0-9_.:-]{1,63}$'),
    lease             interval NOT NULL DEFAULT '30 seconds'
                      CHECK (lease OPERATOR(pg_catalog.>) '0'),
    max_attempts      integer NOT NULL DEFAULT 5
                      CHECK (max_attempts OPERATOR(pg_catalog.>=) 1
                             AND max_attempts OPERATOR(pg_catalog.<=) 10000),
    backoff_base      interval NOT NULL DEFAULT '1 second'
                      CHECK (backoff_base OPERATOR(pg_catalog.>=) '0'),
    backoff_max       interval NOT NULL DEFAULT '1 hour'
                      CHECK (backoff_max OPERATOR(pg_catalog.>=) backoff_base),
    jitter            double precision NOT NULL DEFAULT 0.1
                      CHECK (jitter OPERATOR(pg_catalog.>=) 0 AND jitter OPERATOR(pg_catalog.<=) 1),
    retention         interval NOT NULL DEFAULT '7 days'
                      CHECK (retention OPERATOR(pg_catalog.>=) '0'),
    paused            boolean NOT NULL DEFAULT false,
    rate_limit        double precision CHECK (rate_limit OPERATOR(pg_catalog.>) 0),
    group_concurrency integer NOT NULL DEFAULT 1
                      CHECK (group_concurrency OPERATOR(pg_catalog.>=) 1),
    dead_letter       text COLLATE pg_catalog."C" REFERENCES jobs.queue (name) DEFERRABLE INITIALLY DEFERRED
                      CHECK (dead_letter OPERATOR(pg_catalog.<>) name),
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- Flow control (0.2.0): the burst a rate limit allows (NULL: one second's worth). Columns
    -- added after 0.1.0 come last, as an upgrade's ADD COLUMN puts them.
    rate_burst        double precision CHECK (rate_burst OPERATOR(pg_catalog.>=) 1),
    -- Claims by kind (0.3.0): whether the queue's jobs go into the kinds index, which claims
    -- with `kinds` read so that jobs of other kinds queued ahead are never walked. Off, a job
    -- costs one index entry fewer and a claim of some kinds reads the claim index, skipping
    -- other kinds' jobs as it goes.
    claims_by_kind    boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE jobs.queue IS 'pg_jobs queues and their settings; change them with jobs_create_queue';

-- No foreign key to jobs.queue: its check would lock the queue row (FOR KEY SHARE) on every
-- enqueue and turn concurrent producers into MultiXact traffic. The enqueue statement reads the
-- queue row in the same statement instead, and jobs_drop_queue locks this table out.
-- No CHECK constraint: PostgreSQL parses and prepares a table's checks again in every
-- statement that writes it, a cost every claim's and settle's update would pay. Rule 3's bound
-- on attempts is kept where attempts are
-- spent: a claim takes only a job with attempts left (claim/take.sql), a release gives one back
-- only above 0 (settle/release.sql).
-- Column order matters for WAL: an update logs only the bytes between the longest unchanged
-- prefix and suffix of the row. So what never changes comes first, then what retries and
-- heartbeats change, and last what every claim and settle changes.
CREATE TABLE jobs.job (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue          text COLLATE pg_catalog."C" NOT NULL,
    kind           text COLLATE pg_catalog."C" NOT NULL DEFAULT 'default',
    payload        jsonb NOT NULL DEFAULT '{}',
    headers        jsonb,
    priority       smallint NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL,
    tenant         text COLLATE pg_catalog."C",
    group_key      text COLLATE pg_catalog."C",
    unique_key     text COLLATE pg_catalog."C",
    origin         jsonb,
    created_at     timestamptz NOT NULL DEFAULT pg_catalog.now(),
    run_at         timestamptz NOT NULL DEFAULT pg_catalog.now(),
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
    -- Unique jobs (0.2.0): whether this job holds its unique_key in its queue (while queued or
    -- running, and once succeeded for unique_for), and that window. Last, as an upgrade's ADD
    -- COLUMN puts them, and where the claims and settles of other jobs never change them.
    unique_hold    boolean NOT NULL DEFAULT false,
    unique_for     interval,
    -- Groups (0.2.0): a queued job that waits for its group (a claim found an earlier job of
    -- the group unfinished, at group_concurrency 1, or the group full). The claim indexes
    -- leave it out, so claims never walk it; the settle that moves its group on clears it
    -- (engine::groups).
    group_wait     boolean NOT NULL DEFAULT false,
    -- Workflows (0.3.0, engine::workflows). Last, as an upgrade's ADD COLUMN puts them, and
    -- where no claim or settle of a job that uses none of this changes them (an update logs
    -- only the changed middle of the row). `dependents`: jobs were enqueued after this one
    -- while it was unfinished, so its settle looks them up (a settle of any other job skips
    -- the look-up); set once, never cleared. `after`: the jobs this one was enqueued after
    -- (its parents), as given. `signal`: the signal it awaits or was woken by, as
    -- {"name": ..., "payload": ..., "timed_out": ...} (no payload when there is none), which
    -- the next claims carry as it is. One column, in jobs.claimed too: every claim and settle
    -- of every job builds and checks each column of the row, NULL or not, and a claim that took
    -- it apart into three attributes set up three expressions on every call.
    dependents     boolean NOT NULL DEFAULT false,
    after          bigint[],
    signal         jsonb,
    -- Claims by kind (0.3.0): whether the job is in the kinds index. Set at enqueue from its
    -- queue's claims_by_kind (or true when that could be stale: engine::queues says why), and
    -- for every unfinished job of a queue when claims_by_kind is turned on; never cleared, so
    -- that a claim that reads the kinds index of a queue with claims_by_kind misses no job.
    kind_indexed   boolean NOT NULL DEFAULT false
)
-- Every job is updated at least twice (claim, settle). Room on its page lets both new versions
-- stay there: no page-move lock record in the WAL, a smaller update record (only the changed
-- tail of the row), fewer pages dirtied per job. A running version is about 1.5 times the
-- queued one, so the queued rows may take a quarter of the page: at half, a claim of every job
-- on a page moved a quarter of them and the settles most of the rest (10,000 jobs in batches
-- of 100: 996 WAL bytes a job at 50, 859 at 25, and a smaller table, as fewer versions move to
-- new pages).
WITH (fillfactor = 25);
COMMENT ON TABLE jobs.job IS 'pg_jobs jobs, one row per job for its whole life, until retention purges it';

-- The claim reads only this index: due, queued jobs of one queue in claim order. Finished and
-- running jobs are not in it, so a table full of history does not slow claims down.
-- Its keys end with the job's id, so no two live entries are equal and deduplication never saves
-- a byte: without it a full leaf page splits at once instead of first comparing every entry
-- on it with its neighbour, work a batch enqueue pays for every entry. The same holds for the
-- kinds and group indexes.
-- It leads with a hash of the queue's name, not the name: a key whose first column is text has
-- no cached offsets, so every comparison an insertion makes re-walked the entry column by
-- column, and a batch's jobs share queue, priority and run_at, so every comparison went on to
-- the id (the two text-led claim indexes were two thirds of a batch enqueue's instructions).
-- The claim statements compare the hash and the name: two queues whose names hash alike only
-- read each other's entries, in the same claim order.
CREATE INDEX job_claim_idx ON jobs.job ((pg_catalog.hashtext(queue)), priority, run_at, id)
    WITH (deduplicate_items = off)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND NOT group_wait;
-- Claims of some kinds read this one instead: the due jobs of each kind in claim order, so
-- a claim of kind x never walks the jobs of other kinds queued ahead of x's (issue 18: 30 ms a
-- claim behind 200,000 of them). It costs one more index entry per enqueue, so it holds only
-- the jobs of queues that ask for it (claims_by_kind, which sets kind_indexed). Queue and kind
-- are hashed for the reason the claim index's queue is.
CREATE INDEX job_kind_claim_idx
    ON jobs.job ((pg_catalog.hashtext(queue)), (pg_catalog.hashtext(kind)), priority, run_at, id)
    WITH (deduplicate_items = off)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND NOT group_wait AND kind_indexed;
-- Unique jobs: at most one job holds a unique key in a queue (per tenant; '' stands for no
-- tenant, which no tenant can be called). Only jobs that hold a key are in it. The key comes
-- first: keys differ where queues and tenants repeat, so a comparison stops at the first
-- column (the columns after a text one have no cached offset, so each later column a
-- comparison reaches costs a walk of the entry).
CREATE UNIQUE INDEX job_unique_idx ON jobs.job (unique_key, queue, (COALESCE(tenant, '')))
    WHERE unique_hold;
-- Groups: the unfinished jobs of each group, its running jobs first (their place is 0), then
-- its queued ones in enqueue order (their place is their id). One probe answers what a claim
-- or settle asks of a group, each over a range with an end, so it reads a few entries however
-- many jobs the group holds: whether anything of it runs or comes before a job (places below
-- the job's id), how many of it run (place 0), its head (the first entry). Only grouped jobs
-- are in it.
-- Keyed by one hash of the queue's name and the group key, not by the two texts: a probe reads
-- every entry of its range on the leaf page it lands on, and with text keys each entry cost
-- two string comparisons and an uncached walk to the id, a large part of a claim and settle of
-- many groups' jobs. The statements compare the
-- hash and then the names: two groups whose keys hash alike only read each other's entries.
-- The place is one column, not the state and the id: PostgreSQL ends a scan at a bound on a
-- single column, and a row comparison over two read on past the job. Running jobs used to have
-- an index of their own, and every claimed job an entry in both.
CREATE INDEX job_group_idx
    ON jobs.job ((pg_catalog.hashtextextended(group_key, pg_catalog.hashtext(queue))),
                 (CASE WHEN state OPERATOR(pg_catalog.=) 'running' THEN 0 ELSE id END))
    WITH (deduplicate_items = off)
    WHERE group_key IS NOT NULL
      AND (state OPERATOR(pg_catalog.=) 'queued' OR state OPERATOR(pg_catalog.=) 'running');
-- Groups: their waiting jobs (marked by a claim or an enqueue), in enqueue order. A settle
-- that moves a group on asks this small index whether anything waits for the group, which is
-- seldom, and so seldom reads the group itself (reading each settled group's head was most of
-- a settle's work when nothing waited). Only
-- statements that name a group may read it (group_key IS NOT NULL): the settle's statement
-- once read every waiting job of every queue through it, to find the few it clears, when its
-- plan was made while nothing waited.
CREATE INDEX job_group_wait_idx
    ON jobs.job ((pg_catalog.hashtextextended(group_key, pg_catalog.hashtext(queue))), id)
    WITH (deduplicate_items = off)
    WHERE group_key IS NOT NULL AND group_wait AND state OPERATOR(pg_catalog.=) 'queued';
-- Reclaim finds expired leases here (its statement compares lease_until, so it implies the
-- second condition; a running job always has one). The condition keeps the index out of
-- statements that only say "running": a group's count of running jobs could otherwise read
-- every running job of every queue through it, which the planner rates as cheap as
-- job_group_idx whenever its statistics saw few jobs running.
CREATE INDEX job_lease_idx ON jobs.job (lease_until)
    WHERE state OPERATOR(pg_catalog.=) 'running' AND lease_until IS NOT NULL;
-- No index serves the retention purge: an index on finished jobs would cost every completion
-- an insertion (and its WAL) to speed up a job that runs once a tick. The worker sweeps the
-- table in id order instead, a bounded window at a time.

-- What jobs_enqueue_batch returns for each payload: the job's id, and whether it was inserted
-- (false: a unique duplicate was found, whose id this is).
CREATE TYPE jobs.enqueued AS (
    id       bigint,
    inserted boolean
);

-- Rate limits without shared memory: one token bucket per limited queue, updated under its row
-- lock by each claim (the slower path; with the preload the buckets live in shared memory).
CREATE TABLE jobs.rate_bucket (
    queue  text COLLATE pg_catalog."C" PRIMARY KEY,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL
);

-- Prepared transactions (0.3.0): what a transaction prepared with PREPARE TRANSACTION does to
-- the state pg_jobs keeps in shared memory (wake-ups, claim floors, totals), recorded in that
-- transaction just before it is prepared and taken by COMMIT PREPARED, in whichever session and
-- whenever it runs, even after a server restart emptied shared memory (runtime::effects). A row
-- lives from the prepare to the commit (a rolled-back transaction's never existed); the
-- background worker deletes one a crash left between a commit and its taking. Not dumped:
-- prepared transactions do not survive a restore.
CREATE TABLE jobs.prepared_effects (
    gid         text NOT NULL,
    effects     jsonb NOT NULL,
    prepared_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

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
    run_at       timestamptz,
    -- Workflows (0.3.0): the signal the job awaited, {"name", "payload", "timed_out"} (NULL for
    -- a job that never awaited).
    signal       jsonb
);

INSERT INTO jobs.queue (name) VALUES ('default');

-- Queues and jobs are user data: pg_dump must carry them (the default queue comes back with
-- CREATE EXTENSION, so only its changes would be lost, and those are rare).
SELECT pg_catalog.pg_extension_config_dump('jobs.queue', 'WHERE name <> ''default''');
SELECT pg_catalog.pg_extension_config_dump('jobs.job', '');
SELECT pg_catalog.pg_extension_config_dump('jobs.job_id_seq', '');

-- Which tenants each role may act for (jobs_grant_tenant). Roles are named, not numbered, so
-- a dump restores onto another cluster's roles of the same names.
CREATE TABLE jobs.tenant_grant (
    role_name  text NOT NULL,
    tenant     text NOT NULL
               CHECK (pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.>=) 1
                      AND pg_catalog.octet_length(tenant) OPERATOR(pg_catalog.<=) 255),
    granted_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (role_name, tenant)
);
COMMENT ON TABLE jobs.tenant_grant IS 'pg_jobs: the tenants each role may act for; change them with jobs_grant_tenant and jobs_revoke_tenant';
SELECT pg_catalog.pg_extension_config_dump('jobs.tenant_grant', '');

-- ==== Idempotency records (issue 13) =====================================================-- Request-level idempotency for HTTP middleware: per (tenant, scope, key), a pending record
-- while a request runs, then its stored response. The functions jobs_idempotency_get, _save,
-- _update and _delete are the only writers; the background worker purges expired records.
--
-- tenant, scope and key are separate columns of the primary key, so no choice of scope and key
-- can name another pair's record (scope 'a' + key 'bc' is not scope 'ab' + key 'c'). No
-- tenant and no scope are stored as '' (tenant names are never empty; scope NULL and '' are
-- the same scope), which keeps the key a plain primary key: ON CONFLICT can infer it and
-- logical replication can use it as the replica identity.
--
-- No CHECK constraints: only the functions write this table, and they check every value
-- (README "Limits"). A CHECK is parsed and planned again by every statement that writes the
-- table; on a request's save and update that was a tenth of the server's time.
CREATE TABLE jobs.idempotency (
    tenant       text NOT NULL DEFAULT '',
    scope        text NOT NULL DEFAULT '',
    key          text NOT NULL,
    -- pending, completed or failed.
    status       text NOT NULL,
    -- The token the save that took the key returned; updates present it, so the holder of a
    -- record that was taken over cannot change its successor.
    token        uuid NOT NULL,
    -- How the save that took the key found it: created, replaced (a finished record),
    -- replaced_expired or taken_over (a pending record past its pending_for).
    save_outcome text NOT NULL,
    fingerprint  text,
    -- A pending record not updated for this long belongs to a request that died: the next save
    -- takes it over. NULL: never before it expires.
    pending_for  interval,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    response     jsonb,
    PRIMARY KEY (tenant, scope, key)
)
-- An update (status, response, updated_at) changes no indexed column unless it sets a new
-- ttl; room on the page lets it stay a heap-only update.
WITH (fillfactor = 70);
COMMENT ON TABLE jobs.idempotency IS 'pg_jobs idempotency records, one per (tenant, scope, key); change them with jobs_idempotency_save, _update and _delete';
-- The worker's purge finds expired records here, oldest first, a bounded batch at a time.
CREATE INDEX idempotency_expires_idx ON jobs.idempotency (expires_at);
SELECT pg_catalog.pg_extension_config_dump('jobs.idempotency', '');

-- What jobs_idempotency_save returns: how it took the key, the token that updates present, and
-- when the record expires.
CREATE TYPE jobs.idempotency_saved AS (
    outcome    text,
    token      uuid,
    expires_at timestamptz
);
-- What jobs_idempotency_get returns for a live record.
CREATE TYPE jobs.idempotency_record AS (
    status      text,
    response    jsonb,
    fingerprint text,
    created_at  timestamptz,
    updated_at  timestamptz,
    expires_at  timestamptz
);
-- ==== end of idempotency records ==================================================================
-- ---------------------------------------------------------------------------------------------
-- Schedules (pg_jobs issue 12): cron schedules whose slots the background worker enqueues,
-- each slot exactly once. Changed only through jobs_schedule / jobs_unschedule and the
-- worker's runs; read through the view jobs.schedules.
-- ---------------------------------------------------------------------------------------------
CREATE TABLE jobs.schedule (
    name         text PRIMARY KEY
                 CHECK (pg_catalog.octet_length(name) OPERATOR(pg_catalog.>=) 1
                        AND pg_catalog.octet_length(name) OPERATOR(pg_catalog.<=) 255),
    cron         text NOT NULL,
    timezone     text NOT NULL,
    -- The worker must always find the queue it enqueues into: jobs_drop_queue refuses while a
    -- schedule names the queue (with a hint), and the key is the last line of defence.
    queue        text COLLATE pg_catalog."C" NOT NULL REFERENCES jobs.queue (name),
    payload      jsonb NOT NULL,
    kind         text NOT NULL,
    headers      jsonb,
    priority     smallint NOT NULL,
    max_attempts integer
                 CHECK (max_attempts OPERATOR(pg_catalog.>=) 1
                        AND max_attempts OPERATOR(pg_catalog.<=) 10000),
    catch_up     text NOT NULL
                 CHECK (catch_up OPERATOR(pg_catalog.=) ANY (ARRAY['latest', 'none', 'all'])),
    enabled      boolean NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- Progress: the first slot not handled yet (NULL: the expression has no later slot), and
    -- the last slot enqueued with its job. The worker advances them in the transaction that
    -- enqueues the slots' jobs. Last in the row, as jobs.job keeps what changes: an update on
    -- the same page then logs only the changed tail of the row.
    next_slot    timestamptz,
    -- A lower bound of next_slot (NULL with it) that the worker's runs find due schedules by
    -- (schedule_due_idx). Runs leave it as it is while it lags next_slot by less than an hour,
    -- so most progress writes change no indexed column: a heap-only (HOT) update, no new index
    -- entries. The check keeps every due schedule findable.
    due_floor    timestamptz,
    last_slot    timestamptz,
    last_job     bigint,
    CONSTRAINT schedule_due_floor_check CHECK (due_floor OPERATOR(pg_catalog.<=) next_slot)
)
-- Every fire writes a new version of the row (its progress); room on the page keeps it there,
-- which a heap-only update needs.
WITH (fillfactor = 50);
COMMENT ON TABLE jobs.schedule IS 'pg_jobs schedules and their progress; change them with jobs_schedule and jobs_unschedule';
-- The worker's runs read the candidates for due schedules here (due_floor at or before now),
-- then next_slot says which are due.
CREATE INDEX schedule_due_idx ON jobs.schedule (due_floor) WHERE enabled;
SELECT pg_catalog.pg_extension_config_dump('jobs.schedule', '');

-- When a background worker last ran the schedules of this database (and whether it stopped
-- cleanly then): the next worker counts the slots between then and its own start as missed,
-- for catch_up. One row; runtime state, not dumped (a restore counts as downtime).
CREATE TABLE jobs.schedule_clock (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    seen_at   timestamptz,
    stopped   boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE jobs.schedule_clock IS 'pg_jobs: when a background worker last ran the schedules, for catch_up after downtime';
INSERT INTO jobs.schedule_clock DEFAULT VALUES;

-- Schedules as users read them: the next slot the worker will enqueue (NULL while disabled)
-- and the last slot enqueued with its job.
CREATE VIEW jobs.schedules AS
SELECT s.name,
       s.cron,
       s.timezone,
       s.queue,
       s.kind,
       s.payload,
       s.headers,
       s.priority,
       s.max_attempts,
       s.catch_up,
       s.enabled,
       CASE WHEN s.enabled THEN s.next_slot END AS next_slot,
       s.last_slot,
       s.last_job AS last_job_id,
       s.created_at,
       s.updated_at
  FROM jobs.schedule s;
COMMENT ON VIEW jobs.schedules IS 'pg_jobs schedules: definition, next slot, last slot and its job';
-- ---------------------------------------------------------------------------------------------
-- End of schedules.
-- ---------------------------------------------------------------------------------------------

-- ==== Workflows (issue 37) =====================================================================
-- Dependencies, results and durable waits (engine::workflows). The functions are the only
-- writers; none of these tables is read by a claim or settle of a job that uses none of this.

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
-- ==== end of workflows =========================================================================

-- ---------------------------------------------------------------------------------------------
-- Dashboard (pg_jobs issue 38): the throughput history behind the view jobs.throughput. Per
-- minute, queue and tenant (by hash: shared memory counts tenants by the hash of their name,
-- jobs.tenant_hash(tenant); 0 for jobs without one), the jobs enqueued, completed, failed and
-- retried. The background worker writes one row per active queue and tenant a minute, from the
-- counts shared memory keeps (no write per job), and drops rows older than 24 hours
-- (engine::throughput). Runtime state, not dumped.
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
-- ---------------------------------------------------------------------------------------------
-- End of the dashboard's schema.
-- ---------------------------------------------------------------------------------------------
