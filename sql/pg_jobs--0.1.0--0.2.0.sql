-- pg_jobs upgrade from 0.1.0 to 0.2.0, run by ALTER EXTENSION pg_jobs UPDATE (README
-- "Upgrading"). Written by hand: pgrx generates install scripts only. The test
-- tests/integration/tests/upgrade.rs runs it on a 0.1.0 database with jobs in flight and
-- compares every catalog entry of the result with a fresh 0.2.0 install, so a change to
-- sql/schema.sql, sql/finalize.sql or a #[pg_extern] that this script does not follow fails
-- there.
--
-- What it keeps: every queue and job row, ids and the id sequence, leases of running jobs (a
-- worker that claimed before the upgrade settles with its lease afterwards). The 0.1.0
-- functions refused tenant, group_key and unique_key, so no existing job has them and the new
-- unique_hold column starts false for all.
--
-- What it costs: jobs.job and jobs.queue are locked (ACCESS EXCLUSIVE) while their text
-- columns change to the C collation, which rebuilds their indexes but does not rewrite the
-- tables; the new columns are added without a rewrite. On a large jobs.job table that takes
-- as long as building its indexes.

-- Objects that depend on columns whose collation changes, and functions whose argument list or
-- result changed (CREATE OR REPLACE cannot change either). No CASCADE: if a user's own view or
-- function depends on one of them, the update stops and says which, instead of dropping it.
DROP VIEW jobs.queue_stats;
-- 0.2.0's claim no longer uses it.
DROP FUNCTION jobs.queued_priorities(pg_catalog.text, pg_catalog.int2);
-- The batch overload of jobs_complete is jobs_complete_batch in 0.2.0 (one name, one
-- signature: clients that send untyped parameters could not choose between the two).
DROP FUNCTION jobs_complete(pg_catalog.int8[], uuid[]);
-- rate_burst comes before group_concurrency and dead_letter.
DROP FUNCTION jobs_create_queue(pg_catalog.text, pg_catalog.interval, pg_catalog.int4,
    pg_catalog.interval, pg_catalog.interval, pg_catalog.float8, pg_catalog.interval,
    pg_catalog.float8, pg_catalog.int4, pg_catalog.text);
-- Returns jobs.enqueued rows instead of ids, and takes unique_keys and group_keys.
DROP FUNCTION jobs_enqueue_batch(pg_catalog.text, pg_catalog.jsonb[], pg_catalog.text,
    pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text,
    pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text);
-- Returns more columns (floors_healed, scheduled, idempotency_purged).
DROP FUNCTION jobs_worker_status();

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


-- ---------------------------------------------------------------------------------------------
-- Queues and jobs: names, kinds, tenants, groups and unique keys compare as bytes (the C
-- collation), the same in every database; the columns of the new features.
-- ---------------------------------------------------------------------------------------------
ALTER TABLE jobs.queue
    ALTER COLUMN name TYPE pg_catalog.text COLLATE pg_catalog."C",
    ALTER COLUMN dead_letter TYPE pg_catalog.text COLLATE pg_catalog."C",
    ADD COLUMN rate_burst double precision CHECK (rate_burst OPERATOR(pg_catalog.>=) 1);

ALTER TABLE jobs.job
    ALTER COLUMN queue TYPE pg_catalog.text COLLATE pg_catalog."C",
    ALTER COLUMN kind TYPE pg_catalog.text COLLATE pg_catalog."C",
    ALTER COLUMN tenant TYPE pg_catalog.text COLLATE pg_catalog."C",
    ALTER COLUMN group_key TYPE pg_catalog.text COLLATE pg_catalog."C",
    ALTER COLUMN unique_key TYPE pg_catalog.text COLLATE pg_catalog."C",
    ADD COLUMN unique_hold boolean NOT NULL DEFAULT false,
    ADD COLUMN unique_for interval,
    ADD COLUMN group_wait boolean NOT NULL DEFAULT false;

-- Room on each page for a job's claim and settle versions (see schema.sql); pages written
-- from now on.
ALTER TABLE jobs.job SET (fillfactor = 25);

-- No CHECK on jobs.job any more (see schema.sql): every statement that writes the table parsed
-- and prepared it again. Claims and releases keep attempts within bounds themselves.
ALTER TABLE jobs.job DROP CONSTRAINT job_check;

-- The claim index leaves out the jobs that wait for their group (none yet). It and the kinds
-- and group indexes do without deduplication: their keys end with the id, and both claim
-- indexes lead with hashes of the queue (and kind), not the names (see schema.sql).
DROP INDEX jobs.job_claim_idx;
CREATE INDEX job_claim_idx ON jobs.job ((pg_catalog.hashtext(queue)), priority, run_at, id)
    WITH (deduplicate_items = off)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND NOT group_wait;

-- Claims of some kinds read this one instead: the due jobs of each kind in claim order, so
-- a claim of kind x never walks the jobs of other kinds queued ahead of x's.
CREATE INDEX job_kind_claim_idx
    ON jobs.job ((pg_catalog.hashtext(queue)), (pg_catalog.hashtext(kind)), priority, run_at, id)
    WITH (deduplicate_items = off)
    WHERE state OPERATOR(pg_catalog.=) 'queued' AND NOT group_wait;
-- Unique jobs: at most one job holds a unique key in a queue (per tenant; '' stands for no
-- tenant, which no tenant can be called). Only jobs that hold a key are in it. The key comes
-- first: keys differ where queues and tenants repeat, so a comparison stops at the first
-- column (the columns after a text one have no cached offset; 9% less CPU per batch of 1,000
-- unique jobs than with the queue first).
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
-- two string comparisons and an uncached walk to the id (a claim of 100 jobs from 100 groups
-- and its jobs_complete_batch spent 15% of its instructions checking those keys; 39.7 M
-- instructions with text keys, 29.0 M with the hash, callgrind). The statements compare the
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
-- seldom, and so seldom reads the group itself (a settle of 100 jobs of 100 groups with
-- nothing waiting: 4 M instructions when it read each group's head, callgrind). Only
-- statements that name a group may read it (group_key IS NOT NULL): the settle's statement
-- once read every waiting job of every queue through it, to find the few it clears, when its
-- plan was made while nothing waited.
CREATE INDEX job_group_wait_idx
    ON jobs.job ((pg_catalog.hashtextextended(group_key, pg_catalog.hashtext(queue))), id)
    WITH (deduplicate_items = off)
    WHERE group_key IS NOT NULL AND group_wait AND state OPERATOR(pg_catalog.=) 'queued';

-- Reclaim's index leaves out what the reclaim never looks for, so a group's count of running
-- jobs reads job_group_idx and never this one (see schema.sql).
DROP INDEX jobs.job_lease_idx;
CREATE INDEX job_lease_idx ON jobs.job (lease_until)
    WHERE state OPERATOR(pg_catalog.=) 'running' AND lease_until IS NOT NULL;

-- ---------------------------------------------------------------------------------------------
-- New in 0.2.0, as sql/schema.sql creates them.
-- ---------------------------------------------------------------------------------------------

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

-- ---------------------------------------------------------------------------------------------
-- Functions, as the 0.2.0 install script defines them (its definitions come from the
-- #[pg_extern] functions: `cargo pgrx schema` prints them). The 0.1.0 functions that keep their
-- signature, symbol, defaults and volatility change only in running as the extension's owner
-- with a pinned search_path: ALTER FUNCTION does that and keeps their OIDs (and so whatever a
-- user made that depends on them, and their privileges). A later change to one of them beyond
-- what ALTER FUNCTION can say makes the upgrade test's catalog comparison fail. The functions
-- new in 0.2.0, and those dropped above, are created as the install script creates them.
-- ---------------------------------------------------------------------------------------------

ALTER FUNCTION jobs_cancel(pg_catalog.int8) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_claim(pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.interval, pg_catalog.text[], pg_catalog.interval) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_complete(pg_catalog.int8, uuid, pg_catalog.jsonb) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

CREATE FUNCTION "jobs_complete_batch"(
	"ids" bigint[], /* :: std :: option :: Option < Vec < Option < i64 > > > */
	"leases" uuid[] /* :: std :: option :: Option < Vec < Option < pgrx :: Uuid > > > */
) RETURNS TABLE (
	"id" bigint,  /* i64 */
	"outcome" TEXT  /* String */
)
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_complete_batch_wrapper';

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
	"dead_letter" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS jobs.queue /* QueueRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_create_queue_wrapper';

CREATE FUNCTION "jobs_cron_next"(
	"cron" TEXT, /* Option < & str > */
	"after" timestamp with time zone DEFAULT pg_catalog.now(), /* Option < TimestampWithTimeZone > */
	"timezone" TEXT DEFAULT 'UTC' /* Option < & str > */
) RETURNS timestamp with time zone /* Option < TimestampWithTimeZone > */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_cron_next_wrapper';

ALTER FUNCTION jobs_drop_queue(pg_catalog.text, pg_catalog.bool) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_enqueue(pg_catalog.text, pg_catalog.jsonb, pg_catalog.text, pg_catalog.timestamptz, pg_catalog.int4, pg_catalog.int4, pg_catalog.jsonb, pg_catalog.text, pg_catalog.interval, pg_catalog.text, pg_catalog.text, pg_catalog.text) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

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
	"group_keys" TEXT[] DEFAULT NULL /* :: std :: option :: Option < Vec < Option < String > > > */
) RETURNS SETOF jobs.enqueued /* EnqueuedRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_enqueue_batch_wrapper';

ALTER FUNCTION jobs_fail(pg_catalog.int8, uuid, pg_catalog.text, pg_catalog.interval, pg_catalog.bool) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_get(pg_catalog.int8) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

CREATE FUNCTION "jobs_grant_tenant"(
	"role" TEXT, /* Option < & str > */
	"tenant" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_grant_tenant_wrapper';

ALTER FUNCTION jobs_heartbeat(pg_catalog.int8, uuid, pg_catalog.interval, pg_catalog.jsonb) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

CREATE FUNCTION "jobs_idempotency_delete"(
	"key" TEXT, /* Option < & str > */
	"scope" TEXT DEFAULT NULL, /* Option < & str > */
	"token" uuid DEFAULT NULL /* Option < pgrx :: Uuid > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_idempotency_delete_wrapper';

CREATE FUNCTION "jobs_idempotency_get"(
	"key" TEXT, /* Option < & str > */
	"scope" TEXT DEFAULT NULL /* Option < & str > */
) RETURNS SETOF jobs.idempotency_record /* IdempotencyRecordRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_idempotency_get_wrapper';

CREATE FUNCTION "jobs_idempotency_save"(
	"key" TEXT, /* Option < & str > */
	"status" TEXT DEFAULT 'pending', /* Option < & str > */
	"response" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"ttl" interval DEFAULT '24 hours', /* Option < Interval > */
	"scope" TEXT DEFAULT NULL, /* Option < & str > */
	"fingerprint" TEXT DEFAULT NULL, /* Option < & str > */
	"pending_for" interval DEFAULT NULL /* Option < Interval > */
) RETURNS jobs.idempotency_saved /* IdempotencySavedRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_idempotency_save_wrapper';

CREATE FUNCTION "jobs_idempotency_update"(
	"key" TEXT, /* Option < & str > */
	"status" TEXT, /* Option < & str > */
	"response" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"ttl" interval DEFAULT NULL, /* Option < Interval > */
	"scope" TEXT DEFAULT NULL, /* Option < & str > */
	"token" uuid DEFAULT NULL /* Option < pgrx :: Uuid > */
) RETURNS TEXT /* & '_ str */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_idempotency_update_wrapper';

ALTER FUNCTION jobs_list(pg_catalog.text, pg_catalog.text, pg_catalog.text, pg_catalog.int4, pg_catalog.int8) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_metrics() SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_pause(pg_catalog.text) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_reclaim() SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_release(pg_catalog.int8, uuid, pg_catalog.text, pg_catalog.interval) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_resume(pg_catalog.text) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

ALTER FUNCTION jobs_retry(pg_catalog.int8, pg_catalog.timestamptz) SECURITY DEFINER
    SET search_path TO pg_catalog, pg_temp;

CREATE FUNCTION "jobs_revoke_tenant"(
	"role" TEXT, /* Option < & str > */
	"tenant" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_revoke_tenant_wrapper';

CREATE FUNCTION "jobs_run_schedules"() RETURNS bigint /* i64 */
STRICT VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_run_schedules_wrapper';

CREATE FUNCTION "jobs_schedule"(
	"name" TEXT, /* Option < & str > */
	"cron" TEXT, /* Option < & str > */
	"queue" TEXT, /* Option < & str > */
	"payload" jsonb DEFAULT '{}', /* Option < Jsonb > */
	"kind" TEXT DEFAULT 'default', /* Option < & str > */
	"timezone" TEXT DEFAULT 'UTC', /* Option < & str > */
	"headers" jsonb DEFAULT NULL, /* Option < Jsonb > */
	"priority" INT DEFAULT 0, /* Option < i32 > */
	"max_attempts" INT DEFAULT NULL, /* Option < i32 > */
	"catch_up" TEXT DEFAULT 'latest', /* Option < & str > */
	"enabled" bool DEFAULT true /* Option < bool > */
) RETURNS jobs.schedules /* ScheduleRow */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_schedule_wrapper';

CREATE FUNCTION "jobs_totals"() RETURNS TABLE (
	"queue" TEXT,  /* Option < String > */
	"completed" bigint,  /* i64 */
	"failed" bigint,  /* i64 */
	"retried" bigint  /* i64 */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_totals_wrapper';

CREATE FUNCTION "jobs_unschedule"(
	"name" TEXT /* Option < & str > */
) RETURNS bool /* bool */
VOLATILE SECURITY DEFINER PARALLEL UNSAFE
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_unschedule_wrapper';

CREATE FUNCTION "jobs_worker_status"() RETURNS TABLE (
	"database" TEXT,  /* String */
	"pid" INT,  /* Option < i32 > */
	"started_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"last_tick" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"serving" bool,  /* bool */
	"ticks" bigint,  /* i64 */
	"reclaimed" bigint,  /* i64 */
	"purged" bigint,  /* i64 */
	"floors_healed" bigint,  /* i64 */
	"scheduled" bigint,  /* i64 */
	"last_error" TEXT,  /* Option < String > */
	"last_error_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"idempotency_purged" bigint  /* i64 */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'jobs_worker_status_wrapper';

CREATE FUNCTION jobs."tenant_scope"() RETURNS TEXT[] /* :: std :: option :: Option < Vec < String > > */
STRICT STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'tenant_scope_wrapper';

ALTER FUNCTION jobs.backoff_delay(pg_catalog.interval, pg_catalog.interval, pg_catalog.float8, pg_catalog.int4)
    SET search_path TO pg_catalog, pg_temp;

CREATE FUNCTION jobs."runtime_state"(
	"queue" TEXT /* & str */
) RETURNS TABLE (
	"floor_priority" smallint,  /* Option < i16 > */
	"floor_run_at" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"floor_id" bigint,  /* Option < i64 > */
	"floor_generation" bigint,  /* i64 */
	"reach_id" bigint,  /* Option < i64 > */
	"waiters" INT,  /* i32 */
	"wake_generation" bigint,  /* i64 */
	"next_due" timestamp with time zone,  /* Option < TimestampWithTimeZone > */
	"freed_heads" bigint[]  /* alloc::vec::Vec<i64> */
)
STRICT VOLATILE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path TO pg_catalog, pg_temp
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'runtime_state_wrapper';

-- ---------------------------------------------------------------------------------------------
-- The last part of the install script (sql/finalize.sql), as it stands in 0.2.0: the view and
-- the row-level security that call jobs.tenant_scope(), and the privileges of every object.
-- ---------------------------------------------------------------------------------------------
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
