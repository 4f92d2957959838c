-- jobs_distribute(): turns pg_jobs of this database distributed over its Citus cluster
-- (docs/src/internals/citus.md), in the caller's transaction, on the coordinator; the caller
-- checked that this is the coordinator and that no job exists. SHARD_COUNT is filled in.
SET LOCAL citus.shard_replication_factor = 1;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';
SET LOCAL citus.enable_unsafe_triggers = on;
-- Citus creates a reference table's foreign keys on every node itself, and the extension made
-- them there already: drop the workers' (these commit at once, and again harmlessly when this
-- transaction is retried). Schedules stay a plain table on the coordinator, which Citus cannot
-- keep referencing a reference table (it would recreate the table, and with it the extension's
-- view jobs.schedules): jobs_schedule checks the queue, and a schedule whose queue was dropped
-- fails its worker step, which jobs_worker_status() reports.
SELECT pg_catalog.count(*) FROM run_command_on_workers(
    'ALTER TABLE jobs.queue DROP CONSTRAINT IF EXISTS queue_dead_letter_fkey');
SELECT pg_catalog.count(*) FROM run_command_on_workers(
    'ALTER TABLE jobs.schedule DROP CONSTRAINT IF EXISTS schedule_queue_fkey');
ALTER TABLE jobs.schedule DROP CONSTRAINT schedule_queue_fkey;
-- Citus refuses subqueries in the policies of a distributed table: the same filter, with the
-- scope evaluated per row rather than once per statement.
ALTER POLICY tenant_scope ON jobs.job
    USING (jobs.tenant_scope() IS NULL
           OR (tenant IS NULL AND pg_catalog.cardinality(jobs.tenant_scope()) OPERATOR(pg_catalog.=) 0)
           OR tenant OPERATOR(pg_catalog.=) ANY (jobs.tenant_scope()::pg_catalog.text[]));
-- Citus's unique keys must hold the distribution column; ids stay unique by construction.
ALTER TABLE jobs.job DROP CONSTRAINT job_pkey, ADD CONSTRAINT job_pkey PRIMARY KEY (id, queue);
-- Each new job gets an id whose text hashes into its queue's shard (Citus copies the trigger
-- to every shard, also to one a move makes).
CREATE TRIGGER job_distributed_id BEFORE INSERT ON jobs.job
    FOR EACH ROW EXECUTE FUNCTION jobs.distributed_job_id();
SELECT create_reference_table('jobs.queue');
SELECT create_reference_table('jobs.tenant_grant');
SELECT create_distributed_table('jobs.job', 'queue', shard_count := SHARD_COUNT);
SELECT create_distributed_table('jobs.rate_bucket', 'queue', colocate_with := 'jobs.job');
-- Calls of a queue or of a job go to the node holding its shard, also inside a transaction
-- block (force_delegation); but not jobs_fail there: Citus lets a force-delegated call write
-- only its own shard, and a failed job's dead-letter copy may go to another one.
SELECT create_distributed_function(p.oid::regprocedure, '$1', colocate_with := 'jobs.job',
                                   force_delegation := p.proname OPERATOR(pg_catalog.<>) 'jobs_fail')
  FROM pg_proc p
  JOIN pg_extension e ON e.extname = 'pg_jobs' AND p.pronamespace = e.extnamespace
 WHERE p.proname IN ('jobs_enqueue', 'jobs_enqueue_batch', 'jobs_claim', 'jobs_complete_and_claim',
                     'jobs_create_queue', 'jobs_drop_queue', 'jobs_pause', 'jobs_resume',
                     'jobs_complete', 'jobs_fail', 'jobs_heartbeat', 'jobs_release',
                     'jobs_cancel', 'jobs_retry', 'jobs_get')
 ORDER BY p.proname;
