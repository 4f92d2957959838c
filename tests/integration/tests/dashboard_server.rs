//! What the dashboard reads from the server (issue 38): the counters of released, lost,
//! cancelled and enqueued jobs beside completed, failed and retried; `jobs_run_now`; the client
//! workers (`jobs.workers`); and the throughput history (`jobs.throughput`), across a clean
//! restart, a crash and a prepared transaction.

use std::sync::OnceLock;
use std::time::Duration;

use pg_jobs_tests::{
    assert_claims_nothing, claim, column, enqueue, scalar, wait_until, Client, Cluster,
    TEST_SETTINGS,
};
use serde_json::json;

/// A cluster of its own (the totals and the history are server-wide), with prepared
/// transactions and a worker ticking every 100 ms.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| start("dashboard"))
}

fn start(name: &str) -> Cluster {
    let mut settings = TEST_SETTINGS.to_vec();
    settings.extend(["max_prepared_transactions = 10", "pg_jobs.tick = '100ms'"]);
    let cluster = Cluster::start(name, &settings);
    cluster
        .connect()
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             DO $$ BEGIN
               CREATE ROLE dash_worker LOGIN; GRANT jobs_worker TO dash_worker;
               CREATE ROLE dash_client LOGIN; GRANT jobs_client TO dash_client;
               CREATE ROLE dash_tenant LOGIN; GRANT jobs_worker TO dash_tenant;
             END $$;
             SELECT jobs_grant_tenant('dash_tenant', 'acme');",
        )
        .unwrap();
    cluster
}

/// The queue's counters from `jobs_totals()`, by column name.
fn totals(client: &mut Client, queue: &str) -> [i64; 7] {
    let row = client
        .query_one(
            "SELECT completed, failed, retried, released, lost, cancelled, enqueued
               FROM jobs_totals() WHERE queue = $1",
            &[&queue],
        )
        .unwrap_or_else(|e| panic!("totals of {queue}: {e}"));
    std::array::from_fn(|i| row.get(i))
}

/// A sample of `jobs_metrics()` for the queue (None when it has no line).
fn metric(client: &mut Client, name: &str, labels: &str) -> Option<f64> {
    let text: String = scalar(client, "SELECT jobs_metrics()", &[]);
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().unwrap())
}

#[test]
fn released_lost_cancelled_and_enqueued_jobs_are_counted_when_they_commit() {
    let (mut client, queue) = cluster().connect_with_queue("counted", "");
    // Three enqueues (one in a batch of two), one rolled back.
    enqueue(&mut client, &queue, json!({}));
    client
        .execute(
            "SELECT jobs_enqueue_batch($1, ARRAY['{}', '{}']::jsonb[])",
            &[&queue],
        )
        .unwrap();
    client.batch_execute("BEGIN").unwrap();
    enqueue(&mut client, &queue, json!({}));
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(totals(&mut client, &queue), [0, 0, 0, 0, 0, 0, 3]);

    // A release, then a heartbeat and a complete on the stale lease (lost twice).
    let first = claim(&mut client, &queue, 1, "")[0];
    let released: String = scalar(
        &mut client,
        "SELECT jobs_release($1, $2)",
        &[&first.id, &first.lease],
    );
    assert_eq!(released, "queued");
    for call in ["jobs_heartbeat($1, $2)", "jobs_complete($1, $2)"] {
        let answer: String = scalar(
            &mut client,
            &format!("SELECT {call}"),
            &[&first.id, &first.lease],
        );
        assert_eq!(answer, "lost", "{call} on a released job's lease");
    }
    // A batch complete with one stale lease among a good one: one lost, one completed.
    let held = claim(&mut client, &queue, 1, "")[0];
    let outcomes: Vec<String> = column(
        &mut client,
        "SELECT outcome FROM jobs_complete_batch(ARRAY[$1, $2]::bigint[], ARRAY[$3, $4]::uuid[])",
        &[&held.id, &first.id, &held.lease, &first.lease],
    );
    assert_eq!(outcomes, ["succeeded", "lost"]);
    // A cancel of a queued job counts; a cancel of a finished one changes nothing.
    let queued: i64 = scalar(
        &mut client,
        "SELECT id FROM jobs.job WHERE queue = $1 AND state = 'queued' ORDER BY id LIMIT 1",
        &[&queue],
    );
    let cancelled: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&queued]);
    assert_eq!(cancelled, "cancelled");
    let again: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&queued]);
    assert_eq!(again, "cancelled");
    // A cancel rolled back counts nothing.
    let other = enqueue(&mut client, &queue, json!({}));
    client.batch_execute("BEGIN").unwrap();
    let _: String = scalar(&mut client, "SELECT jobs_cancel($1)", &[&other]);
    client.batch_execute("ROLLBACK").unwrap();

    assert_eq!(
        totals(&mut client, &queue),
        [1, 0, 0, 1, 3, 1, 4],
        "completed, failed, retried, released, lost, cancelled, enqueued"
    );
    let labels = format!("queue=\"{queue}\"");
    for (name, value) in [
        ("pg_jobs_completed_total", 1.0),
        ("pg_jobs_released_total", 1.0),
        ("pg_jobs_lost_total", 3.0),
        ("pg_jobs_cancelled_total", 1.0),
        ("pg_jobs_enqueued_total", 4.0),
    ] {
        assert_eq!(metric(&mut client, name, &labels), Some(value), "{name}");
    }
}

#[test]
fn run_now_makes_a_delayed_job_due_and_only_an_admin_may() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("run-now", "");
    let later: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1, '{}', run_at => now() + interval '1 hour')",
        &[&queue],
    );
    assert_claims_nothing(&mut client, &queue, 1, "not due yet");

    // A worker may not: refused with 42501 and a hint, and the job is left as it was.
    let mut worker = cluster.connect_as("dash_worker");
    let refused = worker
        .query_one("SELECT jobs_run_now($1)", &[&later])
        .unwrap_err();
    let refused = refused.as_db_error().unwrap();
    assert_eq!(refused.code().code(), "42501");
    assert!(
        refused.message().contains("run jobs now"),
        "{}",
        refused.message()
    );
    assert!(refused.hint().unwrap().contains("GRANT jobs_admin"));
    let still_later: bool = scalar(
        &mut client,
        "SELECT run_at > now() + interval '50 minutes' FROM jobs.job WHERE id = $1",
        &[&later],
    );
    assert!(still_later);

    // Bad input: the argument is named, nothing changes.
    let error = client
        .query_one("SELECT jobs_run_now(NULL)", &[])
        .unwrap_err();
    assert!(
        error.as_db_error().unwrap().message().contains("id"),
        "{error}"
    );
    let error = client
        .query_one("SELECT jobs_run_now(-1)", &[])
        .unwrap_err();
    assert_eq!(error.as_db_error().unwrap().code().code(), "P0002");

    // An admin may: due at once, and a claim (waiting since before) gets it.
    let waiting = {
        let dsn = cluster.dsn("postgres");
        let queue = queue.clone();
        std::thread::spawn(move || {
            let mut waiter = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
            claim(&mut waiter, &queue, 1, ", wait => '20 seconds'")
        })
    };
    wait_until(Duration::from_secs(10), "the claim to wait", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM jobs.waiting_claims() WHERE queue = $1",
            &[&queue],
        ) == 1
    });
    let answer: String = scalar(&mut client, "SELECT jobs_run_now($1)", &[&later]);
    assert_eq!(answer, "queued");
    let claimed = waiting.join().unwrap();
    assert_eq!(claimed.len(), 1, "the waiting claim woke for it");
    assert_eq!(claimed[0].id, later);
    // A running job is left as it is.
    let answer: String = scalar(&mut client, "SELECT jobs_run_now($1)", &[&later]);
    assert_eq!(answer, "running");
}

#[test]
fn workers_show_waiting_claims_running_jobs_and_expiring_leases() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("workers", "");
    let name = format!("{queue}-w");

    // A waiting claim: listed with its backend and since when it waits.
    let (dsn, q, n) = (cluster.dsn("postgres"), queue.clone(), name.clone());
    let waiting = std::thread::spawn(move || {
        let mut waiter = postgres::Client::connect(&dsn, postgres::NoTls).unwrap();
        let pid: i32 = scalar(&mut waiter, "SELECT pg_backend_pid()", &[]);
        let claimed = claim(
            &mut waiter,
            &q,
            1,
            &format!(", worker => '{n}', wait => '30 seconds', lease => '4 seconds'"),
        );
        (pid, claimed)
    });
    wait_until(Duration::from_secs(10), "the claim to be listed", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM jobs.workers WHERE worker = $1 AND waiting = 1",
            &[&name],
        ) == 1
    });
    let row = client
        .query_one(
            "SELECT queues, pids, waiting_since <= now(), running, last_seen = now()
               FROM jobs.workers WHERE worker = $1",
            &[&name],
        )
        .unwrap();
    assert_eq!(row.get::<_, Vec<String>>(0), std::slice::from_ref(&queue));
    assert_eq!(row.get::<_, Vec<i32>>(1).len(), 1);
    assert!(row.get::<_, bool>(2));
    assert_eq!(row.get::<_, i64>(3), 0);
    assert!(row.get::<_, bool>(4), "a waiting worker is seen now");
    // A client without a tenant sees no waiting claims (they are workers').
    let mut reader = cluster.connect_as("dash_client");
    let seen: i64 = scalar(
        &mut reader,
        "SELECT count(*) FROM jobs.workers WHERE worker = $1",
        &[&name],
    );
    assert_eq!(seen, 0);

    // The claim gets a job: now it runs it, and waits no more.
    let id = enqueue(&mut client, &queue, json!({}));
    let (pid, claimed) = waiting.join().unwrap();
    assert_eq!(claimed[0].id, id);
    let row = client
        .query_one(
            "SELECT waiting, running, running_jobs, last_claim IS NOT NULL, leases_expiring, pids
               FROM jobs.workers WHERE worker = $1",
            &[&name],
        )
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 0);
    assert_eq!(row.get::<_, i64>(1), 1);
    assert_eq!(row.get::<_, Vec<i64>>(2), [id]);
    assert!(row.get::<_, bool>(3));
    assert_eq!(row.get::<_, i64>(4), 0, "a fresh lease is not expiring");
    assert!(
        !row.get::<_, Vec<i32>>(5).contains(&pid),
        "the backend is gone with its wait (and its application_name is not the worker's)"
    );
    // Its heartbeats stop: within the last quarter of the 4-second lease it is expiring.
    wait_until(Duration::from_secs(10), "the lease to be expiring", || {
        scalar::<i64>(
            &mut client,
            "SELECT leases_expiring FROM jobs.workers WHERE worker = $1",
            &[&name],
        ) == 1
    });
    let metric_line = format!("pg_jobs_client_leases_expiring{{worker=\"{name}\"}} 1");
    let text: String = scalar(&mut client, "SELECT jobs_metrics()", &[]);
    assert!(text.contains(&metric_line), "{text}");
}

#[test]
fn a_tenant_sees_only_its_tenants_workers() {
    let cluster = cluster();
    let (mut admin, queue) = cluster.connect_with_queue("tenant-workers", "");
    let ours: i64 = scalar(
        &mut admin,
        "SELECT jobs_enqueue($1, '{}', tenant => 'acme')",
        &[&queue],
    );
    enqueue(&mut admin, &queue, json!({}));
    let mut acme = cluster.connect_as("dash_tenant");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let claimed = claim(&mut acme, &queue, 5, &format!(", worker => '{queue}-acme'"));
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, ours);
    claim(
        &mut admin,
        &queue,
        5,
        &format!(", worker => '{queue}-shared'"),
    );

    let names = |client: &mut Client| -> Vec<String> {
        column(
            client,
            "SELECT worker FROM jobs.workers WHERE $1 = ANY (queues) ORDER BY worker",
            &[&queue],
        )
    };
    assert_eq!(
        names(&mut admin),
        [format!("{queue}-acme"), format!("{queue}-shared")]
    );
    assert_eq!(names(&mut acme), [format!("{queue}-acme")]);
}

/// The queue's throughput summed over the minutes jobs.throughput shows: enqueued, completed,
/// failed, retried.
fn throughput(client: &mut Client, queue: &str) -> [i64; 4] {
    let row = client
        .query_one(
            "SELECT coalesce(sum(enqueued), 0)::bigint, coalesce(sum(completed), 0)::bigint,
                    coalesce(sum(failed), 0)::bigint, coalesce(sum(retried), 0)::bigint
               FROM jobs.throughput WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    std::array::from_fn(|i| row.get(i))
}

/// Enqueues three jobs and completes one, fails one for good and fails one with a retry.
fn some_work(client: &mut Client, queue: &str) {
    for _ in 0..3 {
        enqueue(client, queue, json!({}));
    }
    let held = claim(client, queue, 3, "");
    for (job, call) in held.iter().zip([
        "jobs_complete($1, $2)",
        "jobs_fail($1, $2, 'x', retry => false)",
        "jobs_fail($1, $2, 'x', retry_in => '1 hour')",
    ]) {
        let _: String = scalar(client, &format!("SELECT {call}"), &[&job.id, &job.lease]);
    }
}

#[test]
fn throughput_is_written_once_a_minute_and_read_with_the_current_minute() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("throughput", "");
    // An old minute, as a superuser could have left it: the next write drops it.
    client
        .execute(
            "INSERT INTO jobs.throughput_minute VALUES (date_trunc('minute', now()) - interval '25 hours', $1, 0, 9, 9, 9, 9)",
            &[&queue],
        )
        .unwrap();
    assert_eq!(
        throughput(&mut client, &queue),
        [0; 4],
        "older than 24 hours"
    );

    some_work(&mut client, &queue);
    assert_eq!(
        throughput(&mut client, &queue),
        [3, 1, 1, 1],
        "the current minute, from shared memory"
    );
    let current: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.throughput WHERE queue = $1 AND minute = date_trunc('minute', now())",
        &[&queue],
    );
    assert_eq!(current, 1);

    // The worker writes the minute once it ended (two rows if one ended during the work),
    // and drops the old one.
    wait_until(Duration::from_secs(75), "the minute to be written", || {
        scalar::<i64>(
            &mut client,
            "SELECT count(*) FROM jobs.throughput_pending() WHERE queue = $1",
            &[&queue],
        ) == 0
    });
    let written = client
        .query_one(
            "SELECT sum(enqueued)::bigint, sum(completed)::bigint, sum(failed)::bigint,
                    sum(retried)::bigint, max(tenant_hash),
                    count(*) FILTER (WHERE minute < now() - interval '24 hours')
               FROM jobs.throughput_minute WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    let written: [i64; 6] = std::array::from_fn(|i| written.get(i));
    assert_eq!(written, [3, 1, 1, 1, 0, 0]);
    assert_eq!(
        throughput(&mut client, &queue),
        [3, 1, 1, 1],
        "not counted twice"
    );
}

#[test]
fn throughput_is_scoped_to_the_callers_tenants() {
    let cluster = cluster();
    let (mut admin, queue) = cluster.connect_with_queue("tenant-throughput", "");
    admin
        .execute(
            "SELECT jobs_enqueue($1, '{}', tenant => 'acme'), jobs_enqueue($1, '{}', tenant => 'acme')",
            &[&queue],
        )
        .unwrap();
    enqueue(&mut admin, &queue, json!({}));
    assert_eq!(throughput(&mut admin, &queue), [3, 0, 0, 0]);
    let mut acme = cluster.connect_as("dash_tenant");
    acme.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    assert_eq!(throughput(&mut acme, &queue), [2, 0, 0, 0]);
    let mut client = cluster.connect_as("dash_client");
    assert_eq!(
        throughput(&mut client, &queue),
        [1, 0, 0, 0],
        "jobs without a tenant"
    );
    // Written rows are scoped alike.
    wait_until(Duration::from_secs(75), "the minute to be written", || {
        scalar::<i64>(
            &mut admin,
            "SELECT count(*) FROM jobs.throughput_minute WHERE queue = $1",
            &[&queue],
        ) == 2
    });
    assert_eq!(throughput(&mut acme, &queue), [2, 0, 0, 0]);
    assert_eq!(throughput(&mut client, &queue), [1, 0, 0, 0]);
    let hash: i64 = scalar(&mut admin, "SELECT jobs.tenant_hash('acme')", &[]);
    assert_ne!(hash, 0);
    let tenanted: i64 = scalar(
        &mut admin,
        "SELECT enqueued FROM jobs.throughput_minute WHERE queue = $1 AND tenant_hash = $2",
        &[&queue, &hash],
    );
    assert_eq!(tenanted, 2);
}

#[test]
fn throughput_survives_a_clean_restart_and_a_crash_loses_only_the_current_minute() {
    let cluster = start("dashboard-restart");
    let (mut client, queue) = cluster.connect_with_queue("restarted", "");
    some_work(&mut client, &queue);
    // A prepared enqueue counts when it is committed.
    client.batch_execute("BEGIN").unwrap();
    enqueue(&mut client, &queue, json!({}));
    client
        .batch_execute(&format!("PREPARE TRANSACTION 'dash-{queue}'"))
        .unwrap();
    assert_eq!(throughput(&mut client, &queue), [3, 1, 1, 1]);
    client
        .batch_execute(&format!("COMMIT PREPARED 'dash-{queue}'"))
        .unwrap();
    assert_eq!(throughput(&mut client, &queue), [4, 1, 1, 1]);

    // A clean restart: the worker writes the current minute as it stops.
    drop(client);
    cluster.stop();
    cluster.restart();
    let mut client = cluster.connect();
    assert_eq!(throughput(&mut client, &queue), [4, 1, 1, 1]);
    let pending = |client: &mut Client| -> i64 {
        scalar(
            client,
            "SELECT count(*) FROM jobs.throughput_pending() WHERE queue = $1",
            &[&queue],
        )
    };
    assert_eq!(pending(&mut client), 0, "all of it was written");

    // A crash loses what was not written yet (shared memory is made anew), and only that.
    enqueue(&mut client, &queue, json!({}));
    assert_eq!(throughput(&mut client, &queue)[0], 5);
    drop(client);
    cluster.crash();
    cluster.restart();
    let mut client = cluster.connect();
    assert_eq!(pending(&mut client), 0);
    let after = throughput(&mut client, &queue);
    assert!(
        after[0] == 4 || after[0] == 5,
        "the minutes written before the crash stay ({after:?}; 5 when a minute ended between the enqueue and the crash)"
    );
    assert_eq!(&after[1..], &[1, 1, 1]);
}
