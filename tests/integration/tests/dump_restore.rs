//! `pg_dump -Fc` and `pg_restore` of a database with jobs in flight: queued, delayed, running
//! (leases held), finished; queues with settings, a dead-letter queue, tenants granted,
//! schedules, idempotency records. The restore creates the extension, every row comes back,
//! ids continue after the highest restored id, the catalogs equal the source's, and the
//! restored database works: its worker serves it, running jobs settle with their leases, the
//! queued ones are claimed in order.
//!
//! `pg_extension_config_dump` must name every table that holds user data: a table of schema
//! jobs that is neither dumped nor listed here as runtime state fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pg_jobs_tests::{
    catalog, column, pg_bin, pg_command_in, run, scalar, state, wait_until, Client, Cluster, NoTls,
    TEST_SETTINGS,
};

/// Tables whose rows are runtime state, rebuilt after a restore rather than dumped: the token
/// buckets of rate limits (refilled from the queue's settings) and the schedules' clock (a
/// restore counts as downtime for catch_up).
const RUNTIME_TABLES: &[&str] = &[
    "jobs.prepared_effects",
    "jobs.rate_bucket",
    "jobs.schedule_clock",
    // Monitoring history, like PostgreSQL's statistics: a restore starts it afresh.
    "jobs.throughput_minute",
];

/// The rows of a table that pg_dump dumps (those `condition` selects, as
/// `pg_extension_config_dump` says), as JSON text, sorted.
fn rows(client: &mut Client, table: &str, condition: &str) -> BTreeSet<String> {
    client
        .query(
            &format!("SELECT to_jsonb(t)::text FROM {table} t {condition}"),
            &[],
        )
        .unwrap_or_else(|e| panic!("read {table}: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The tables and sequences pg_dump dumps the rows of, by `pg_extension_config_dump`, with
/// the condition that selects the rows dumped.
fn dumped_tables(client: &mut Client) -> BTreeMap<String, String> {
    client
        .query(
            "SELECT c.tab::regclass::text, c.cond
               FROM pg_extension, unnest(extconfig, extcondition) AS c(tab, cond)
              WHERE extname = 'pg_jobs'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

#[test]
fn dump_and_restore_with_jobs_in_flight() {
    let settings: Vec<&str> = TEST_SETTINGS
        .iter()
        .copied()
        .filter(|line| !line.starts_with("pg_jobs.databases"))
        .chain(["pg_jobs.databases = 'source, restored'"])
        .collect();
    let cluster = Cluster::start("dump", &settings);
    let mut postgres = cluster.connect();
    for statement in [
        "CREATE DATABASE source",
        "CREATE DATABASE restored",
        "CREATE ROLE dump_app LOGIN",
    ] {
        postgres.batch_execute(statement).unwrap();
    }
    let mut source = cluster.connect_to("source");
    source
        .batch_execute(
            "CREATE EXTENSION pg_jobs;
             GRANT jobs_client TO dump_app;
             SELECT jobs_grant_tenant('dump_app', 'acme');
             SELECT jobs_create_queue('dead', retention => '30 days');
             SELECT jobs_create_queue('work', lease => '10 minutes', max_attempts => 4,
                                      rate_limit => 1000, dead_letter => 'dead');
             SELECT jobs_schedule('nightly', '0 3 * * *', 'work', '{\"report\": true}');",
        )
        .unwrap();

    let enqueue = |client: &mut Client, extra: &str| -> i64 {
        scalar(
            client,
            &format!(
                "SELECT jobs_enqueue('work', jsonb_build_object('at', clock_timestamp()){extra})"
            ),
            &[],
        )
    };
    // Finished: one succeeded, one failed for good (into the dead-letter queue).
    for outcome in ["succeeded", "failed"] {
        let id = enqueue(&mut source, "");
        let lease: uuid::Uuid = scalar(
            &mut source,
            "SELECT lease FROM jobs_claim('work') WHERE id = $1",
            &[&id],
        );
        let settled: String = if outcome == "succeeded" {
            scalar(&mut source, "SELECT jobs_complete($1, $2)", &[&id, &lease])
        } else {
            scalar(
                &mut source,
                "SELECT jobs_fail($1, $2, 'broken', retry => false)",
                &[&id, &lease],
            )
        };
        assert_eq!(settled, outcome);
    }
    // Running, leases held by a worker session.
    let running: Vec<(i64, uuid::Uuid)> = {
        let ids = [enqueue(&mut source, ""), enqueue(&mut source, "")];
        let claimed: Vec<(i64, uuid::Uuid)> = source
            .query("SELECT id, lease FROM jobs_claim('work', n => 2)", &[])
            .unwrap()
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(claimed.iter().map(|c| c.0).collect::<Vec<_>>(), ids);
        claimed
    };
    // Queued (one of a tenant, one in a group, one unique), then delayed.
    let queued = vec![
        enqueue(&mut source, ""),
        enqueue(&mut source, ", tenant => 'acme'"),
        enqueue(&mut source, ", group_key => 'g1'"),
        enqueue(&mut source, ", unique_key => 'only-one'"),
        enqueue(&mut source, ", priority => 0"),
    ];
    let delayed = vec![
        enqueue(&mut source, ", run_at => now() + interval '1 hour'"),
        enqueue(&mut source, ", run_at => now() + interval '2 hours'"),
    ];
    // Idempotency records: one pending, one completed with its response.
    source
        .batch_execute("SELECT jobs_idempotency_save('req-pending')")
        .unwrap();
    let token: uuid::Uuid = scalar(
        &mut source,
        "SELECT token FROM jobs_idempotency_save('req-done')",
        &[],
    );
    let updated: String = scalar(
        &mut source,
        "SELECT jobs_idempotency_update('req-done', 'completed', '{\"status\": 201}', token => $1)",
        &[&token],
    );
    assert_eq!(updated, "updated");
    // Workflows: a job waiting for an unfinished parent, a job waiting for a signal, and a
    // signal recorded for later awaits.
    source
        .batch_execute("SELECT jobs_create_queue('flows')")
        .unwrap();
    let parent: i64 = scalar(&mut source, "SELECT jobs_enqueue('flows', '{}')", &[]);
    let child: i64 = scalar(
        &mut source,
        "SELECT jobs_enqueue('flows', '{}', after => ARRAY[$1::bigint])",
        &[&parent],
    );
    let awaiting: i64 = scalar(
        &mut source,
        "SELECT jobs_enqueue('flows', '{}', kind => 'awaits')",
        &[],
    );
    let answer: String = scalar(
        &mut source,
        "SELECT jobs_await(id, lease, 'restored') FROM jobs_claim('flows', kinds => ARRAY['awaits'])",
        &[],
    );
    assert_eq!(answer, "waiting");
    let _: i32 = scalar(
        &mut source,
        "SELECT jobs_signal('recorded', '{\"kept\": true}')",
        &[],
    );

    // Every table of schema jobs is dumped or is runtime state.
    let dumped = dumped_tables(&mut source);
    let tables: BTreeSet<String> = column(
        &mut source,
        "SELECT c.oid::regclass::text FROM pg_class c
              WHERE c.relnamespace = 'jobs'::regnamespace AND c.relkind IN ('r', 'p')",
        &[],
    );
    for table in &tables {
        assert!(
            dumped.contains_key(table) || RUNTIME_TABLES.contains(&table.as_str()),
            "{table} is neither dumped (pg_extension_config_dump) nor runtime state: a table of user data must be dumped"
        );
    }
    for table in RUNTIME_TABLES {
        assert!(!dumped.contains_key(*table), "{table} is runtime state");
    }
    assert!(
        dumped.contains_key("jobs.job_id_seq"),
        "the id sequence is dumped, so ids continue"
    );

    let user_tables: Vec<(String, String)> = dumped
        .into_iter()
        .filter(|(t, _)| tables.contains(t))
        .collect();
    assert_eq!(
        user_tables
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        [
            "jobs.idempotency",
            "jobs.job",
            "jobs.job_await",
            "jobs.job_dependency",
            "jobs.queue",
            "jobs.schedule",
            "jobs.signal",
            "jobs.tenant_grant"
        ],
        "the tables of user data"
    );
    let before: Vec<BTreeSet<String>> = user_tables
        .iter()
        .map(|(t, c)| rows(&mut source, t, c))
        .collect();
    for ((table, _), rows) in user_tables.iter().zip(&before) {
        assert!(!rows.is_empty(), "the test puts rows into {table}");
    }
    let max_id: i64 = scalar(&mut source, "SELECT max(id) FROM jobs.job", &[]);
    let source_catalog = catalog::snapshot(&mut source);

    // Dump while the jobs are in flight, restore into another database.
    let file = cluster.base.join("source.dump");
    let mut dump = pg_command_in(&pg_bin(), "pg_dump");
    dump.args(["-Fc", "-h", "localhost", "-U", "postgres", "-p"])
        .arg(cluster.port.to_string())
        .arg("-f")
        .arg(&file)
        .arg("source");
    run(dump, "pg_dump -Fc");
    let mut restore = pg_command_in(&pg_bin(), "pg_restore");
    restore
        .args(["--exit-on-error", "-h", "localhost", "-U", "postgres", "-p"])
        .arg(cluster.port.to_string())
        .args(["-d", "restored"])
        .arg(&file);
    run(restore, "pg_restore");

    let mut restored = cluster.connect_to("restored");
    let version: String = scalar(
        &mut restored,
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
        &[],
    );
    assert_eq!(
        version,
        pg_jobs_tests::pg_jobs_version(),
        "the restore created the extension"
    );
    for ((table, condition), rows_before) in user_tables.iter().zip(&before) {
        assert_eq!(
            &rows(&mut restored, table, condition),
            rows_before,
            "{table} restored row for row"
        );
    }
    if let Some(diff) = catalog::difference(
        "source",
        &source_catalog,
        "restored",
        &catalog::snapshot(&mut restored),
    ) {
        panic!("the restored database's catalogs differ from the source's: {diff}");
    }
    let next: i64 = scalar(&mut restored, "SELECT jobs_enqueue('work')", &[]);
    assert!(next > max_id, "ids continue: {next} after {max_id}");

    // The restored database works: its worker serves it ...
    wait_until(
        Duration::from_secs(30),
        "the worker to serve the restored database",
        || {
            scalar::<bool>(
                &mut restored,
                "SELECT coalesce(bool_or(serving), false) FROM jobs_worker_status() WHERE database = 'restored'",
                &[],
            )
        },
    );
    // ... the running jobs settle with their leases ...
    for (id, lease) in &running {
        let outcome: String = scalar(&mut restored, "SELECT jobs_complete($1, $2)", &[id, lease]);
        assert_eq!(outcome, "succeeded", "job {id} settles with its lease");
    }
    // ... the app role acts for the tenant it was granted (and sees only its jobs) ...
    let mut app = Client::connect(&cluster.dsn_as("dump_app", "restored"), NoTls).unwrap();
    app.batch_execute("SET pg_jobs.tenant = 'acme'").unwrap();
    let visible: Vec<i64> = column(&mut app, "SELECT id FROM jobs.job", &[]);
    assert_eq!(
        visible,
        vec![queued[1]],
        "the app sees its tenant's job only"
    );
    // ... the queued ones are claimed in order, the delayed ones are not due ...
    let claimed: Vec<i64> = column(
        &mut restored,
        "SELECT id FROM jobs_claim('work', n => 100)",
        &[],
    );
    let mut expected = queued.clone();
    expected.push(next);
    assert_eq!(claimed, expected, "queued jobs claimed in order");
    for id in &delayed {
        assert_eq!(
            state(&mut restored, *id),
            "queued",
            "delayed job {id} waits for its time"
        );
    }
    // ... a unique key is still held, the schedule and the idempotency records are back.
    let duplicate: i64 = scalar(
        &mut restored,
        "SELECT jobs_enqueue('work', unique_key => 'only-one')",
        &[],
    );
    assert_eq!(
        duplicate, queued[3],
        "the restored job holds its unique key"
    );
    let next_slot: Option<String> = scalar(
        &mut restored,
        "SELECT next_slot::text FROM jobs.schedules WHERE name = 'nightly'",
        &[],
    );
    assert!(next_slot.is_some(), "the schedule has its next slot");
    let response: serde_json::Value = scalar(
        &mut restored,
        "SELECT response FROM jobs_idempotency_get('req-done')",
        &[],
    );
    assert_eq!(response, serde_json::json!({"status": 201}));
    // ... and the workflows go on: the signal wakes the job that awaits it, the parent's
    // success queues its child, and the recorded signal answers a later await at once.
    let woken: i32 = scalar(&mut restored, "SELECT jobs_signal('restored')", &[]);
    assert_eq!(woken, 1);
    assert_eq!(state(&mut restored, awaiting), "queued");
    let settled: String = scalar(
        &mut restored,
        "SELECT jobs_complete(id, lease) FROM jobs_claim('flows', kinds => ARRAY['default'])",
        &[],
    );
    assert_eq!(settled, "succeeded");
    assert_eq!(
        state(&mut restored, child),
        "queued",
        "the restored dependency queued the child"
    );
    let recorded: i64 = scalar(
        &mut restored,
        "SELECT count(*) FROM jobs.signal WHERE name = 'recorded'",
        &[],
    );
    assert_eq!(recorded, 1);
}
