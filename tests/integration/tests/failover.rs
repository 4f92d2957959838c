//! Failover to a streaming standby (README "Failover and standbys"): a primary with pg_jobs
//! preloaded and its worker, and a hot standby made with `pg_basebackup -R` that the primary
//! replicates to synchronously (`synchronous_standby_names` naming it, `synchronous_commit =
//! on`), so that every commit a client saw return is on the standby.
//!
//! On the standby, every writing `jobs_*` function fails at once with 25006 and a message
//! saying to run it on the primary, leaving shared memory as it was (a waiting claim does not
//! wait); the reading functions show the replicated jobs; the background worker is there but
//! idle: it runs no tick, reports no error and does not reclaim a lease that expires meanwhile.
//! Then the standby is cut off for half a second (no commit may return meanwhile), the primary
//! is stopped hard (`pg_ctl stop -m immediate`) while clients enqueue, claim and complete, and
//! the standby is promoted: the worker serves it within a few ticks and
//! reclaims the expired leases of holders that died with the primary (Rule 5); a holder that
//! lived through the failover settles with its old lease (Rule 4); every acknowledged enqueue,
//! claim and completion is there; new ids continue above the old ones; the reclaimed jobs run
//! again. Last, the same writing functions in a read-only transaction on the new primary fail
//! the same way.
//!
//! A second pair replicates asynchronously and shows what the README warns of: the commits the
//! standby missed are lost, though their clients saw them return.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::TEST_SETTINGS;
use pg_jobs_tests::{
    claim, column, complete, enqueue, row, scalar, settle, state, wait_until, Claimed, Client,
    Cluster,
};
use serde_json::json;
use uuid::Uuid;

/// The name the standby connects with, which `synchronous_standby_names` gives.
const STANDBY: &str = "failover_standby";

/// The lease of the jobs whose holder dies with the primary: long enough to be live at the
/// crash on a busy machine, short enough to run out while the test looks at the standby.
const SHORT_LEASE_SECS: u64 = 4;

/// One call of each `jobs_*` function that only reads, run on the standby (where each must
/// work). Every other `jobs_*` function of the extension must appear in [`writing_calls`];
/// [`every_function_is_classified`] checks that, so a new function cannot escape these tests.
const READING_CALLS: &[(&str, &str)] = &[
    ("jobs_get", "SELECT * FROM jobs_get(1)"),
    ("jobs_list", "SELECT * FROM jobs_list()"),
    ("jobs_metrics", "SELECT jobs_metrics()"),
    ("jobs_totals", "SELECT * FROM jobs_totals()"),
    ("jobs_worker_status", "SELECT * FROM jobs_worker_status()"),
    (
        "jobs_idempotency_get",
        "SELECT * FROM jobs_idempotency_get('request-1')",
    ),
    ("jobs_cron_next", "SELECT jobs_cron_next('*/5 * * * *')"),
    (
        "jobs_results",
        "SELECT * FROM jobs_results(ARRAY[1::bigint])",
    ),
    (
        "jobs_wait",
        "SELECT * FROM jobs_wait(ARRAY[1::bigint], '0')",
    ),
];

/// The primary's settings: the test settings, with commits that wait for the standby (the
/// standby is named in `synchronous_standby_names` once it runs, see [`start_pair`]).
fn primary_settings() -> Vec<&'static str> {
    TEST_SETTINGS
        .iter()
        .copied()
        .filter(|line| !line.starts_with("synchronous_commit"))
        .chain([
            "synchronous_commit = on",
            "wal_level = replica",
            "max_prepared_transactions = 10",
        ])
        .collect()
}

/// The jobs made on the primary before the failover, in every state.
struct Jobs {
    /// Queued and due.
    queued: Vec<i64>,
    /// Queued, due in an hour.
    delayed: i64,
    /// Finished: succeeded, failed (no retry) and cancelled.
    succeeded: i64,
    failed: i64,
    cancelled: i64,
    /// Running under a lease of [`SHORT_LEASE_SECS`]; their holder dies with the primary.
    orphaned: Vec<Claimed>,
    /// Running under a 1-hour lease; their holder lives through the failover.
    held: Vec<Claimed>,
    /// Queued in the rate-limited queue `fo-rate`.
    rated: i64,
}

impl Jobs {
    fn all(&self) -> Vec<i64> {
        let mut all = self.queued.clone();
        all.extend([self.delayed, self.succeeded, self.failed, self.cancelled]);
        all.extend(self.orphaned.iter().chain(&self.held).map(|c| c.id));
        all
    }
}

/// What the load clients saw acknowledged before the primary died.
#[derive(Default)]
struct Acknowledged {
    enqueued: BTreeSet<i64>,
    /// The latest claim of each job whose claim returned: its lease.
    claims: BTreeMap<i64, Uuid>,
    completed: BTreeSet<i64>,
}

/// Starts the primary (extension created, a login role granted `jobs_worker`) and its hot
/// standby, replicated to synchronously or not.
fn start_pair(synchronous: bool) -> (Cluster, Cluster) {
    let primary = Cluster::start("failover-primary", &primary_settings());
    let mut admin = primary.connect();
    admin
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             CREATE ROLE failover_app LOGIN;
             GRANT jobs_worker TO failover_app;
             SELECT jobs_create_queue('fo', lease => '2 seconds', max_attempts => 5);
             SELECT jobs_create_queue('fo-load', lease => '2 seconds', max_attempts => 5);
             SELECT jobs_create_queue('fo-empty');
             SELECT jobs_create_queue('fo-2pc');
             SELECT jobs_create_queue('fo-rate', rate_limit => 0.01, rate_burst => 1);",
        )
        .unwrap();
    let standby = primary.start_standby(STANDBY, &[]);
    // Named only now: set before the base backup, the standby would have inherited it and, once
    // promoted, waited for itself on every commit.
    if synchronous {
        admin
            .batch_execute(&format!(
                "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'"
            ))
            .unwrap();
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    }
    let sync_state = if synchronous { "sync" } else { "async" };
    wait_until(
        Duration::from_secs(30),
        &format!("the standby to stream ({sync_state})"),
        || {
            scalar::<i64>(
                &mut admin,
                "SELECT count(*) FROM pg_stat_replication
                  WHERE application_name = $1 AND sync_state = $2 AND state = 'streaming'",
                &[&STANDBY, &sync_state],
            ) == 1
        },
    );
    (primary, standby)
}

/// Cuts the standby off its primary (an empty `primary_conninfo`, as when the network between
/// them fails) and waits until the primary no longer streams to it. The standby keeps what it
/// received.
fn disconnect_standby(primary: &mut Client, standby: &Cluster) {
    let mut client = standby.connect();
    client
        .batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .unwrap();
    client.batch_execute("SELECT pg_reload_conf()").unwrap();
    wait_until(
        Duration::from_secs(30),
        "the primary to stop streaming to the standby",
        || {
            scalar::<i64>(
                primary,
                "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1",
                &[&STANDBY],
            ) == 0
        },
    );
}

/// How many commits the load clients saw return so far.
fn acknowledged(seen: &Mutex<Acknowledged>) -> usize {
    let seen = seen.lock().unwrap();
    seen.enqueued.len() + seen.claims.len() + seen.completed.len()
}

/// Makes jobs in every state on the primary; the running ones are claimed by `holder`.
fn make_jobs(admin: &mut Client, holder: &mut Client) -> Jobs {
    let fail = |client: &mut Client, sql: &str, params: &[&(dyn postgres::types::ToSql + Sync)]| {
        scalar::<String>(client, sql, params)
    };
    // A job enqueued with `payload`, claimed by `holder` and settled by `settle` (with its id
    // and lease), which answers `answer`.
    let mut settled = |payload: serde_json::Value, settle: &str, answer: &str| {
        let id = enqueue(admin, "fo", payload);
        let c = claim(holder, "fo", 1, "");
        assert_eq!(
            c[0].id, id,
            "{settle}: the claim took the job just enqueued"
        );
        assert_eq!(fail(holder, settle, &[&c[0].id, &c[0].lease]), answer);
        id
    };
    let succeeded = settled(
        json!({"will": "succeed"}),
        "SELECT jobs_complete($1, $2, '{\"done\": true}')",
        "succeeded",
    );
    let failed = settled(
        json!({"will": "fail"}),
        "SELECT jobs_fail($1, $2, 'broken for good', retry => false)",
        "failed",
    );
    let cancelled = enqueue(admin, "fo", json!({"will": "be cancelled"}));
    assert_eq!(
        fail(admin, "SELECT jobs_cancel($1)", &[&cancelled]),
        "cancelled"
    );
    let held_ids = [
        enqueue(admin, "fo", json!({"held": 1})),
        enqueue(admin, "fo", json!({"held": 2})),
    ];
    let held = claim(holder, "fo", 2, ", lease => '1 hour'");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), held_ids);
    let delayed: i64 = scalar(
        admin,
        "SELECT jobs_enqueue('fo', '{\"delayed\": true}', run_at => now() + interval '1 hour')",
        &[],
    );
    let queued = (0..3)
        .map(|n| enqueue(admin, "fo", json!({ "queued": n })))
        .collect();
    // One token per 100 s, none spent yet on any server: a claim that took the standby's
    // token would leave none for the first claim after the promotion.
    let rated = enqueue(admin, "fo-rate", json!({"rated": true}));
    Jobs {
        rated,
        queued,
        delayed,
        succeeded,
        failed,
        cancelled,
        orphaned: Vec::new(),
        held,
    }
}

/// Claims the jobs whose holder dies with the primary: enqueued and claimed last, so they are
/// first in claim order (priority −1) and their short leases are live at the crash.
fn orphan_jobs(admin: &mut Client, holder: &mut Client, jobs: &mut Jobs) {
    let ids: Vec<i64> = (0..2)
        .map(|n| {
            scalar(
                admin,
                "SELECT jobs_enqueue('fo', $1, priority => -1)",
                &[&json!({ "orphan": n })],
            )
        })
        .collect();
    jobs.orphaned = claim(
        holder,
        "fo",
        2,
        &format!(", lease => '{SHORT_LEASE_SECS} seconds'"),
    );
    assert_eq!(jobs.orphaned.iter().map(|c| c.id).collect::<Vec<_>>(), ids);
}

/// Runs `body` until the server goes away (any error ends the loop).
fn until_gone(stop: &AtomicBool, mut body: impl FnMut() -> Result<(), postgres::Error>) {
    while !stop.load(Ordering::Acquire) {
        if body().is_err() {
            return;
        }
    }
}

/// A producer and a worker on queue `fo-load` of the primary, until it dies.
fn start_load(
    primary: &Cluster,
    seen: &Arc<Mutex<Acknowledged>>,
    stop: &Arc<AtomicBool>,
) -> Vec<thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let (mut producer, seen_p, stop_p) = (primary.connect(), seen.clone(), stop.clone());
    threads.push(thread::spawn(move || {
        until_gone(&stop_p, || {
            let mut tx = producer.transaction()?;
            let id: i64 = tx.query_one("SELECT jobs_enqueue('fo-load')", &[])?.get(0);
            tx.commit()?;
            seen_p.lock().unwrap().enqueued.insert(id);
            Ok(())
        })
    }));
    let (mut worker, seen_w, stop_w) = (primary.connect(), seen.clone(), stop.clone());
    threads.push(thread::spawn(move || {
        until_gone(&stop_w, || {
            let rows = worker.query("SELECT id, lease FROM jobs_claim('fo-load', n => 3)", &[])?;
            let claimed: Vec<(i64, Uuid)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            seen_w
                .lock()
                .unwrap()
                .claims
                .extend(claimed.iter().copied());
            for (id, lease) in claimed {
                let outcome: String = worker
                    .query_one("SELECT jobs_complete($1, $2)", &[&id, &lease])?
                    .get(0);
                assert_eq!(outcome, "succeeded");
                seen_w.lock().unwrap().completed.insert(id);
            }
            Ok(())
        })
    }));
    threads
}

/// One writing call per writing `jobs_*` function (and a second one where the function has
/// two paths), against the jobs of the test. The names are the functions called.
fn writing_calls(jobs: &Jobs) -> Vec<(&'static str, String)> {
    let held = jobs.held[0];
    let (id, lease) = (held.id, held.lease);
    vec![
        ("jobs_enqueue", "SELECT jobs_enqueue('fo', '{}')".into()),
        (
            "jobs_enqueue_batch",
            "SELECT * FROM jobs_enqueue_batch('fo', ARRAY['{}', '{}']::jsonb[])".into(),
        ),
        (
            "jobs_claim",
            "SELECT * FROM jobs_claim('fo', n => 10)".into(),
        ),
        (
            "jobs_claim",
            "SELECT * FROM jobs_claim('fo-empty', wait => '5 seconds')".into(),
        ),
        ("jobs_claim", "SELECT * FROM jobs_claim('fo-rate')".into()),
        (
            "jobs_heartbeat",
            format!("SELECT jobs_heartbeat({id}, '{lease}', progress => '{{\"step\": 2}}')"),
        ),
        (
            "jobs_complete",
            format!("SELECT jobs_complete({id}, '{lease}')"),
        ),
        (
            "jobs_complete_batch",
            format!("SELECT * FROM jobs_complete_batch(ARRAY[{id}], ARRAY['{lease}'::uuid])"),
        ),
        (
            "jobs_complete_and_claim",
            format!(
                "SELECT * FROM jobs_complete_and_claim('fo', ARRAY[{id}], ARRAY['{lease}'::uuid])"
            ),
        ),
        (
            "jobs_fail",
            format!("SELECT jobs_fail({id}, '{lease}', 'oops')"),
        ),
        (
            "jobs_release",
            format!("SELECT jobs_release({id}, '{lease}')"),
        ),
        (
            "jobs_cancel",
            format!("SELECT jobs_cancel({})", jobs.queued[0]),
        ),
        ("jobs_retry", format!("SELECT jobs_retry({})", jobs.failed)),
        (
            "jobs_run_now",
            format!("SELECT jobs_run_now({})", jobs.queued[0]),
        ),
        ("jobs_reclaim", "SELECT jobs_reclaim()".into()),
        (
            "jobs_create_queue",
            "SELECT jobs_create_queue('fo-new')".into(),
        ),
        (
            "jobs_create_queue",
            "SELECT jobs_create_queue('fo', max_attempts => 7)".into(),
        ),
        (
            "jobs_drop_queue",
            "SELECT jobs_drop_queue('fo-empty')".into(),
        ),
        ("jobs_pause", "SELECT jobs_pause('fo')".into()),
        ("jobs_resume", "SELECT jobs_resume('fo')".into()),
        (
            "jobs_grant_tenant",
            "SELECT jobs_grant_tenant('failover_app', 'acme')".into(),
        ),
        (
            "jobs_revoke_tenant",
            "SELECT jobs_revoke_tenant('failover_app', 'acme')".into(),
        ),
        (
            "jobs_idempotency_save",
            "SELECT * FROM jobs_idempotency_save('request-2')".into(),
        ),
        (
            "jobs_idempotency_update",
            "SELECT jobs_idempotency_update('request-1', 'succeeded')".into(),
        ),
        (
            "jobs_idempotency_delete",
            "SELECT jobs_idempotency_delete('request-1')".into(),
        ),
        (
            "jobs_schedule",
            "SELECT * FROM jobs_schedule('fo-nightly', '30 2 * * *', 'fo')".into(),
        ),
        (
            "jobs_unschedule",
            "SELECT jobs_unschedule('fo-nightly')".into(),
        ),
        ("jobs_run_schedules", "SELECT jobs_run_schedules()".into()),
        (
            "jobs_await",
            format!("SELECT jobs_await({id}, '{lease}', 'fo-signal')"),
        ),
        ("jobs_signal", "SELECT jobs_signal('fo-signal')".into()),
        ("jobs_distribute", "SELECT jobs_distribute()".into()),
    ]
}

/// How one call ended: its SQLSTATE and message with its hint (`None` when it succeeded), and
/// its duration.
struct Outcome {
    function: &'static str,
    sql: String,
    error: Option<(String, String)>,
    took: Duration,
}

/// Runs each call in its own transaction (after `setup`, if any) and says how it ended.
fn run_calls(client: &mut Client, calls: &[(&'static str, String)], setup: &str) -> Vec<Outcome> {
    calls
        .iter()
        .map(|(function, sql)| {
            let started = Instant::now();
            let result = client.batch_execute(&format!("BEGIN; {setup} {sql}"));
            let took = started.elapsed();
            client.batch_execute("ROLLBACK").unwrap();
            Outcome {
                function,
                sql: sql.clone(),
                error: result.err().map(|e| match e.as_db_error() {
                    Some(db) => (
                        db.code().code().to_owned(),
                        match db.hint() {
                            Some(hint) => format!("{} (hint: {hint})", db.message()),
                            None => db.message().to_owned(),
                        },
                    ),
                    None => ("(no SQLSTATE)".to_owned(), e.to_string()),
                }),
                took,
            }
        })
        .collect()
}

/// Prints the outcomes (the test's record of what each function did) and asserts that every
/// call failed at once with 25006 and a message or hint containing each of `words`.
fn assert_refused(outcomes: &[Outcome], words: &[&str], where_: &str) {
    eprintln!("writing functions {where_}:");
    for o in outcomes {
        match &o.error {
            Some((code, message)) => eprintln!(
                "  {:<20} {code} after {:>4} ms: {message}   [{}]",
                o.function,
                o.took.as_millis(),
                o.sql
            ),
            None => eprintln!(
                "  {:<20} SUCCEEDED after {} ms   [{}]",
                o.function,
                o.took.as_millis(),
                o.sql
            ),
        }
    }
    let wrong: Vec<String> = outcomes
        .iter()
        .filter(|o| {
            !o.error.as_ref().is_some_and(|(code, message)| {
                code == "25006" && words.iter().all(|w| message.contains(w))
            }) || o.took > Duration::from_secs(1)
        })
        .map(|o| o.sql.clone())
        .collect();
    assert!(
        wrong.is_empty(),
        "{where_}, these calls did not fail at once with 25006 and a message naming {words:?}: {wrong:#?}"
    );
}

/// The shared-memory state of `queue` on the server `client` is connected to.
fn runtime_state(client: &mut Client, queue: &str) -> String {
    scalar(
        client,
        "SELECT row(s.*)::text FROM jobs.runtime_state($1) s",
        &[&queue],
    )
}

/// The worker row of `jobs_worker_status()`: pid, serving, ticks, reclaimed, last error.
fn worker_status(client: &mut Client) -> (Option<i32>, bool, i64, i64, Option<String>) {
    let row = client
        .query_one(
            "SELECT pid, serving, ticks, reclaimed, last_error
               FROM jobs_worker_status() WHERE database = 'postgres'",
            &[],
        )
        .expect("the worker's row in jobs_worker_status()");
    (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4))
}

/// Waits until the standby has replayed everything it received.
fn wait_for_replay(standby: &mut Client) {
    wait_until(Duration::from_secs(30), "the standby to replay", || {
        scalar::<bool>(
            standby,
            "SELECT pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn()",
            &[],
        )
    });
}

/// The job's state, attempt and lease.
fn job(client: &mut Client, id: i64) -> (String, i32, Option<Uuid>) {
    row(
        client,
        "SELECT state::text, attempt, lease FROM jobs.job WHERE id = $1",
        &[&id],
    )
}

/// On the standby: the reading functions work, and show the replicated jobs.
fn standby_reads(standby: &mut Client, jobs: &Jobs) {
    for (function, sql) in READING_CALLS {
        if let Err(e) = standby.batch_execute(sql) {
            panic!("{function} must work on a standby: {sql}: {e}");
        }
    }
    let all = jobs.all();
    let listed: BTreeSet<i64> = column(
        standby,
        "SELECT id FROM jobs_list('fo', \"limit\" => 1000)",
        &[],
    );
    assert_eq!(
        listed,
        all.iter().copied().collect(),
        "jobs_list on the standby"
    );
    for (id, expected) in [
        (jobs.succeeded, "succeeded"),
        (jobs.failed, "failed"),
        (jobs.cancelled, "cancelled"),
        (jobs.delayed, "queued"),
        (jobs.held[0].id, "running"),
        (jobs.orphaned[0].id, "running"),
    ] {
        let got: String = scalar(standby, "SELECT (jobs_get($1)).state::text", &[&id]);
        assert_eq!(got, expected, "jobs_get({id}) on the standby");
    }
    let running: i64 = scalar(
        standby,
        "SELECT running FROM jobs.queue_stats WHERE queue = 'fo'",
        &[],
    );
    assert_eq!(running, 4, "jobs.queue_stats on the standby");
    let metrics: String = scalar(standby, "SELECT jobs_metrics()", &[]);
    assert!(
        metrics.contains("pg_jobs_queue_jobs{queue=\"fo\",state=\"running\"} 4"),
        "jobs_metrics on the standby: {metrics}"
    );
    // Nothing settled on this server yet: its totals are its own.
    let settled: i64 = scalar(
        standby,
        "SELECT coalesce(sum(completed + failed + retried), 0)::bigint FROM jobs_totals()",
        &[],
    );
    assert_eq!(
        settled, 0,
        "jobs_totals on the standby counts this server's settles only"
    );
}

/// Every `jobs_*` function of the extension is either in [`READING_CALLS`] or called by
/// [`writing_calls`].
fn every_function_is_classified(client: &mut Client, jobs: &Jobs) {
    let functions: BTreeSet<String> = column(
        client,
        "SELECT p.proname::text FROM pg_proc p
               JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
               JOIN pg_extension e ON d.refclassid = 'pg_extension'::regclass
                                   AND d.refobjid = e.oid AND e.extname = 'pg_jobs'
              WHERE p.proname LIKE 'jobs\\_%'",
        &[],
    );
    let known: BTreeSet<String> = READING_CALLS
        .iter()
        .map(|(f, _)| *f)
        .chain(writing_calls(jobs).iter().map(|(f, _)| *f))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        functions, known,
        "every jobs_* function must be a reading function or have a writing call in this test"
    );
}

#[test]
fn failover_to_a_synchronous_standby() {
    let (primary, standby) = start_pair(true);
    let mut admin = primary.connect();
    let mut holder = primary.connect_as("failover_app");
    let mut jobs = make_jobs(&mut admin, &mut holder);
    // A transaction prepared on the old primary and committed on the new one, whose shared
    // memory never heard of it.
    let mut preparer = primary.connect();
    preparer.batch_execute("BEGIN").unwrap();
    let prepared: i64 = scalar(&mut preparer, "SELECT jobs_enqueue('fo-2pc', '{}')", &[]);
    preparer
        .batch_execute("PREPARE TRANSACTION 'fo-prepared'")
        .unwrap();

    // Clients at work on the primary, then the jobs whose holder dies with it, then the crash.
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(&primary, &seen, &stop);
    thread::sleep(Duration::from_millis(500));
    orphan_jobs(&mut admin, &mut holder, &mut jobs);
    let orphaned_at = Instant::now();
    // The standby goes away for a while before the crash: no commit may return meanwhile, as
    // none can reach the standby.
    disconnect_standby(&mut admin, &standby);
    thread::sleep(Duration::from_millis(100));
    let before_pause = acknowledged(&seen);
    thread::sleep(Duration::from_millis(400));
    assert_eq!(
        acknowledged(&seen),
        before_pause,
        "commits returned while the synchronous standby was cut off"
    );
    primary.crash();
    stop.store(true, Ordering::Release);
    for thread in load {
        thread.join().expect("a load client panicked");
    }
    drop((admin, holder, preparer));
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    assert!(
        !seen.enqueued.is_empty() && !seen.completed.is_empty(),
        "the load clients got nothing done before the crash"
    );

    // The standby: everything is there to read.
    let mut reader = standby.connect();
    wait_for_replay(&mut reader);
    every_function_is_classified(&mut reader, &jobs);
    standby_reads(&mut reader, &jobs);

    // Every writing function fails at once, and leaves shared memory as it was.
    let before: Vec<String> = ["fo", "fo-empty", "fo-rate"]
        .iter()
        .map(|q| runtime_state(&mut reader, q))
        .collect();
    let mut app = standby.connect_as("failover_app");
    let calls = writing_calls(&jobs);
    let worker_calls: Vec<_> = calls
        .iter()
        .filter(|(f, _)| {
            [
                "jobs_claim",
                "jobs_heartbeat",
                "jobs_complete",
                "jobs_complete_and_claim",
                "jobs_fail",
                "jobs_release",
            ]
            .contains(f)
        })
        .cloned()
        .collect();
    let mut outcomes = run_calls(&mut reader, &calls, "");
    outcomes.extend(run_calls(&mut app, &worker_calls, ""));
    assert_refused(
        &outcomes,
        &[
            "is a standby",
            "run it on the primary",
            "pg_is_in_recovery()",
        ],
        "on the standby",
    );
    let after: Vec<String> = ["fo", "fo-empty", "fo-rate"]
        .iter()
        .map(|q| runtime_state(&mut reader, q))
        .collect();
    assert_eq!(
        before, after,
        "the refused calls changed shared memory on the standby"
    );

    // The worker on the standby: present, idle, silent, and it leaves expired leases alone.
    let (pid, serving, ticks, _, last_error) = worker_status(&mut reader);
    assert!(pid.is_some(), "the worker runs on the standby");
    assert!(
        !serving,
        "the worker on the standby must not report itself serving"
    );
    let in_transaction: bool = scalar(
        &mut reader,
        "SELECT xact_start IS NOT NULL FROM pg_stat_activity WHERE pid = $1",
        &[&pid],
    );
    assert!(!in_transaction, "the idle worker holds no transaction");
    let expired = orphaned_at + Duration::from_secs(SHORT_LEASE_SECS) + Duration::from_secs(1);
    thread::sleep(expired.saturating_duration_since(Instant::now()));
    let (_, serving, ticks_later, _, last_error_later) = worker_status(&mut reader);
    assert!(!serving);
    assert_eq!(
        (ticks, ticks_later, &last_error, &last_error_later),
        (0, 0, &None, &None),
        "the worker on the standby must run no tick"
    );
    for orphan in &jobs.orphaned {
        assert_eq!(
            state(&mut reader, orphan.id),
            "running",
            "nothing reclaims on a standby"
        );
    }
    let log = standby.log();
    assert!(
        !log.contains("tick failed"),
        "the standby's worker logged failing ticks:\n{log}"
    );
    // On every major, under the default log_min_messages (warning): pgrx's own LOG macro
    // dropped these lines on PostgreSQL 13.
    assert_eq!(
        log.matches("this server is a standby; the worker runs no tick")
            .count(),
        1,
        "the worker says once that it idles on the standby:\n{log}"
    );
    drop((reader, app));

    // Promote: the worker serves the new primary within a few ticks (100 ms each) and reclaims
    // the orphaned jobs' expired leases, nobody calling jobs_reclaim().
    standby.promote();
    let promoted_at = Instant::now();
    let mut admin = standby.connect();
    wait_until(
        Duration::from_secs(10),
        "the worker to serve the new primary",
        || {
            let (pid, serving, ticks, _, _) = worker_status(&mut admin);
            pid.is_some() && serving && ticks > 0
        },
    );
    let serving_after = promoted_at.elapsed();
    wait_until(
        Duration::from_secs(10),
        "the worker to reclaim the orphans",
        || {
            jobs.orphaned
                .iter()
                .all(|o| state(&mut admin, o.id) == "queued")
        },
    );
    let reclaimed_after = promoted_at.elapsed();
    eprintln!(
        "after promotion: first tick within {} ms, orphans reclaimed within {} ms",
        serving_after.as_millis(),
        reclaimed_after.as_millis()
    );
    assert!(
        serving_after < Duration::from_secs(3),
        "the worker took {serving_after:?} to serve the promoted server"
    );
    let (_, _, _, reclaimed, last_error) = worker_status(&mut admin);
    assert!(reclaimed >= 2, "the worker reclaimed {reclaimed} jobs");
    assert_eq!(last_error, None);
    assert!(
        standby
            .log()
            .contains("the server was promoted; the worker serves it"),
        "the worker says that it serves the promoted server"
    );
    for orphan in &jobs.orphaned {
        // Reclaimed: the attempt spent, the token kept (Rule 5).
        assert_eq!(
            job(&mut admin, orphan.id),
            ("queued".to_owned(), 1, Some(orphan.lease))
        );
    }

    // Everything committed on the old primary is here.
    let max_before: i64 = scalar(&mut admin, "SELECT max(id) FROM jobs.job", &[]);
    for id in &seen.enqueued {
        let exists: bool = scalar(
            &mut admin,
            "SELECT EXISTS (SELECT FROM jobs.job WHERE id = $1)",
            &[id],
        );
        assert!(exists, "acknowledged enqueue {id} was lost in the failover");
    }
    for (id, lease) in &seen.claims {
        let (state, _, kept) = job(&mut admin, *id);
        assert_eq!(kept, Some(*lease), "job {id} lost its acknowledged claim");
        if seen.completed.contains(id) {
            assert_eq!(state, "succeeded", "acknowledged completion of {id} lost");
        }
    }
    for (id, expected) in [
        (jobs.succeeded, "succeeded"),
        (jobs.failed, "failed"),
        (jobs.cancelled, "cancelled"),
        (jobs.delayed, "queued"),
    ] {
        assert_eq!(
            state(&mut admin, id),
            expected,
            "job {id} after the failover"
        );
    }
    let result: serde_json::Value = scalar(
        &mut admin,
        "SELECT result FROM jobs.job WHERE id = $1",
        &[&jobs.succeeded],
    );
    assert_eq!(result, json!({"done": true}));

    // The holder that lived through the failover reconnects and settles with its old leases.
    let mut holder = standby.connect_as("failover_app");
    let (first, second) = (jobs.held[0], jobs.held[1]);
    for (sql, job, answer) in [
        ("SELECT jobs_heartbeat($1, $2)", first, "running"),
        ("SELECT jobs_complete($1, $2)", first, "succeeded"),
        (
            "SELECT jobs_fail($1, $2, 'after the failover', retry_in => '0')",
            second,
            "queued",
        ),
    ] {
        assert_eq!(
            settle(&mut holder, sql, &job),
            answer,
            "{sql} of job {}",
            job.id
        );
    }

    // The orphans, the queued jobs and the retried one run again; the delayed job waits.
    let again = claim(&mut holder, "fo", 10, "");
    let ids: BTreeSet<i64> = again.iter().map(|c| c.id).collect();
    let expected: BTreeSet<i64> = jobs
        .orphaned
        .iter()
        .map(|o| o.id)
        .chain(jobs.queued.iter().copied())
        .chain([second.id])
        .collect();
    assert_eq!(ids, expected, "the claimable jobs after the failover");
    for c in &again {
        let expected_attempt = if jobs.orphaned.iter().any(|o| o.id == c.id) || c.id == second.id {
            2
        } else {
            1
        };
        assert_eq!(c.attempt, expected_attempt, "attempt of job {}", c.id);
        assert_eq!(complete(&mut holder, c), "succeeded");
    }
    // The load queue's orphans too, once the worker has reclaimed them.
    wait_until(
        Duration::from_secs(10),
        "the load queue's leases to be reclaimed",
        || {
            scalar::<i64>(
                &mut admin,
                "SELECT count(*) FROM jobs.job WHERE queue = 'fo-load' AND state = 'running'",
                &[],
            ) == 0
        },
    );
    // The rate-limited queue's only token is still there: the refused claims on the standby
    // spent nothing of the bucket the promoted server keeps in shared memory.
    let rated = claim(&mut holder, "fo-rate", 1, "");
    assert_eq!(
        rated.iter().map(|c| c.id).collect::<Vec<_>>(),
        [jobs.rated],
        "the rate-limited queue's token was spent on the standby"
    );

    // New ids continue above every id of the old primary, the prepared job's included.
    let new_ids: Vec<i64> = column(
        &mut admin,
        "SELECT id FROM jobs_enqueue_batch('fo', array_fill('{}'::jsonb, ARRAY[100]))",
        &[],
    );
    let old_max = max_before.max(prepared);
    assert!(
        new_ids.iter().all(|id| *id > old_max),
        "ids after the failover must not repeat: max before {old_max}, new {new_ids:?}"
    );

    // The prepared transaction is still prepared. Claims on the new primary raise the queue's
    // floor past its invisible job; COMMIT PREPARED finds no effects stashed for it here, and
    // the worker's floor check must still hand the job to a waiting claim within a few ticks.
    let still_prepared: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'fo-prepared'",
        &[],
    );
    assert_eq!(
        still_prepared, 1,
        "the prepared transaction survives the failover"
    );
    let burned: Vec<i64> = (0..3)
        .map(|n| enqueue(&mut admin, "fo-2pc", json!({ "burn": n })))
        .collect();
    let taken = claim(&mut holder, "fo-2pc", 3, "");
    assert_eq!(taken.iter().map(|c| c.id).collect::<Vec<_>>(), burned);
    let floor: Option<i64> = scalar(
        &mut admin,
        "SELECT floor_id FROM jobs.runtime_state('fo-2pc')",
        &[],
    );
    assert!(
        floor.is_some_and(|f| f > prepared),
        "the claims should have raised the floor ({floor:?}) past the prepared job ({prepared})"
    );
    admin
        .batch_execute("COMMIT PREPARED 'fo-prepared'")
        .unwrap();
    let started = Instant::now();
    let late = claim(&mut holder, "fo-2pc", 1, ", wait => '10 seconds'");
    let took = started.elapsed();
    assert_eq!(
        late.iter().map(|c| c.id).collect::<Vec<_>>(),
        [prepared],
        "the job committed by COMMIT PREPARED on the new primary"
    );
    eprintln!(
        "the prepared job was claimed {} ms after COMMIT PREPARED",
        took.as_millis()
    );
    assert!(
        took < Duration::from_secs(3),
        "the prepared job took {took:?} to be claimed"
    );
    // PREPARE TRANSACTION recorded its effects in a row of its own, replayed by the standby;
    // COMMIT PREPARED on the new primary took that row and applied them itself (lowered the
    // floor, woke the claim), with no help from the worker.
    let left: i64 = scalar(
        &mut admin,
        "SELECT count(*) FROM jobs.prepared_effects WHERE gid = 'fo-prepared'",
        &[],
    );
    assert_eq!(left, 0, "COMMIT PREPARED took the recorded effects");

    // In a read-only transaction on the new primary, the same calls fail the same way.
    let outcomes = run_calls(
        &mut admin,
        &writing_calls(&jobs),
        "SET TRANSACTION READ ONLY;",
    );
    assert_refused(
        &outcomes,
        &["in a read-only transaction", "BEGIN READ WRITE"],
        "in a read-only transaction",
    );
}

/// With asynchronous replication, the commits the standby had not received when the primary
/// died are lost, although their clients saw them return: enqueued jobs that the new primary
/// never had, completions whose jobs run again there (at-least-once, not exactly-once), and a
/// claim whose holder is then told `lost`. The README's "Failover and standbys" says so; this
/// shows it.
#[test]
fn asynchronous_replication_can_lose_acknowledged_commits() {
    let (primary, standby) = start_pair(false);
    let mut admin = primary.connect();
    let backlog: BTreeSet<i64> = column(
        &mut admin,
        "SELECT id FROM jobs_enqueue_batch('fo-load', array_fill('{}'::jsonb, ARRAY[500]))",
        &[],
    );
    let sent: String = scalar(&mut admin, "SELECT pg_current_wal_lsn()::text", &[]);
    let mut reader = standby.connect();
    wait_until(
        Duration::from_secs(30),
        "the standby to replay the backlog",
        || {
            scalar::<bool>(
                &mut reader,
                "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                &[&sent],
            )
        },
    );
    drop(reader);

    // Cut off, the standby misses everything from here on; the primary does not wait for it.
    disconnect_standby(&mut admin, &standby);
    let mut holder = primary.connect_as("failover_app");
    let held = claim(&mut holder, "fo-load", 1, ", lease => '1 hour'");
    let seen = Arc::new(Mutex::new(Acknowledged::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(&primary, &seen, &stop);
    thread::sleep(Duration::from_millis(500));
    primary.crash();
    stop.store(true, Ordering::Release);
    for thread in load {
        thread.join().expect("a load client panicked");
    }
    drop((admin, holder));
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();

    standby.promote();
    let mut admin = standby.connect();
    let exists = |client: &mut Client, id: i64| -> bool {
        scalar(
            client,
            "SELECT EXISTS (SELECT FROM jobs.job WHERE id = $1)",
            &[&id],
        )
    };
    let lost_enqueues = seen
        .enqueued
        .iter()
        .filter(|id| !exists(&mut admin, **id))
        .count();
    let completed_backlog: Vec<i64> = seen
        .completed
        .iter()
        .copied()
        .filter(|id| backlog.contains(id))
        .collect();
    eprintln!(
        "asynchronous: {} enqueues and {} completions of backlog jobs acknowledged after the standby was cut off; {lost_enqueues} enqueues lost",
        seen.enqueued.len(),
        completed_backlog.len()
    );
    assert!(
        lost_enqueues > 0 && lost_enqueues == seen.enqueued.len(),
        "every enqueue acknowledged after the standby was cut off is lost: {lost_enqueues} of {}",
        seen.enqueued.len()
    );
    assert!(
        !completed_backlog.is_empty(),
        "the load completed no backlog job after the cut"
    );
    for id in &completed_backlog {
        assert_eq!(
            job(&mut admin, *id),
            ("queued".to_owned(), 0, None),
            "job {id}, completed on the old primary, is queued again on the new one"
        );
    }

    // The holder of the claim that was lost is told so, and the jobs whose completion was lost
    // run again.
    let mut holder = standby.connect_as("failover_app");
    let answer: String = scalar(
        &mut holder,
        "SELECT jobs_heartbeat($1, $2)",
        &[&held[0].id, &held[0].lease],
    );
    assert_eq!(answer, "lost", "a claim the new primary never had");
    let again: BTreeSet<i64> = claim(&mut holder, "fo-load", 500, "")
        .iter()
        .map(|c| c.id)
        .collect();
    assert!(
        completed_backlog.iter().all(|id| again.contains(id)),
        "the jobs whose completion was lost must be claimable again"
    );
}
