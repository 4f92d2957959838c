//! What an operator scrapes (README "Monitoring"): the totals of jobs settled since the server
//! started (`jobs_totals()`, the `_total` families of `jobs_metrics()`), counted only for
//! settles that committed, and the background worker's health in `jobs_metrics()`.

use std::sync::OnceLock;
use std::time::Duration;

use pg_jobs_tests::{
    claim, complete, enqueue, row, scalar, settle, state, wait_until, Claimed, Client, Cluster,
    TEST_SETTINGS,
};
use serde_json::json;

/// A cluster of its own (the totals are server-wide), with prepared transactions enabled.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let mut settings = TEST_SETTINGS.to_vec();
        settings.push("max_prepared_transactions = 10");
        Cluster::start_with_extension("metrics", &settings)
    })
}

/// The queue's totals: (completed, failed, retried).
fn totals(client: &mut Client, queue: &str) -> (i64, i64, i64) {
    row(
        client,
        "SELECT completed, failed, retried FROM jobs_totals() WHERE queue = $1",
        &[&queue],
    )
}

/// Enqueues a job and claims it.
fn held(client: &mut Client, queue: &str) -> Claimed {
    let id = enqueue(client, queue, json!({}));
    let claimed = claim(client, queue, 1, "");
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, id);
    claimed[0]
}

#[test]
fn totals_count_each_kind_of_settle_once() {
    let (mut client, queue) = cluster().connect_with_queue("totals", "max_attempts => 2");
    assert_eq!(
        totals(&mut client, &queue),
        (0, 0, 0),
        "a new queue has a line of zeros"
    );

    let job = held(&mut client, &queue);
    assert_eq!(complete(&mut client, &job), "succeeded");
    let job = held(&mut client, &queue);
    assert_eq!(
        settle(
            &mut client,
            "SELECT jobs_fail($1, $2, 'x', retry_in => '0 seconds')",
            &job
        ),
        "queued"
    );
    // The retried job, on its last attempt, fails for good.
    let again = claim(&mut client, &queue, 1, "");
    assert_eq!(
        settle(&mut client, "SELECT jobs_fail($1, $2, 'x')", &again[0]),
        "failed"
    );
    let job = held(&mut client, &queue);
    assert_eq!(
        settle(
            &mut client,
            "SELECT jobs_fail($1, $2, 'x', retry => false)",
            &job
        ),
        "failed"
    );
    // A release spends no attempt and is no retry; a heartbeat settles nothing.
    let job = held(&mut client, &queue);
    assert_eq!(
        settle(&mut client, "SELECT jobs_heartbeat($1, $2)", &job),
        "running"
    );
    assert_eq!(
        settle(&mut client, "SELECT jobs_release($1, $2)", &job),
        "queued"
    );
    // The released job and a new one, completed in one batch.
    let released = claim(&mut client, &queue, 1, "");
    assert_eq!(released.len(), 1);
    let fresh = held(&mut client, &queue);
    let ids = vec![released[0].id, fresh.id];
    let leases = vec![released[0].lease, fresh.lease];
    let succeeded: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs_complete_batch($1, $2) WHERE outcome = 'succeeded'",
        &[&ids, &leases],
    );
    assert_eq!(succeeded, 2);
    // A late answer for a job already settled counts nothing.
    assert_eq!(
        scalar::<String>(
            &mut client,
            "SELECT jobs_complete($1, $2)",
            &[&ids[0], &leases[0]]
        ),
        "lost"
    );
    assert_eq!(totals(&mut client, &queue), (3, 2, 1));
}

#[test]
fn expired_leases_count_as_retried_or_failed() {
    let (mut client, queue) = cluster().connect_with_queue("reclaimed", "max_attempts => 2");
    enqueue(&mut client, &queue, json!({}));
    for _ in 0..2 {
        let claimed = claim(&mut client, &queue, 1, ", lease => '50 milliseconds'");
        assert_eq!(claimed.len(), 1);
        // The worker (or this call, whichever comes first) takes the lease back.
        wait_until(Duration::from_secs(10), "the lease to be reclaimed", || {
            let _: i64 = scalar(&mut client, "SELECT jobs_reclaim()::bigint", &[]);
            state(&mut client, claimed[0].id) != "running"
        });
    }
    assert_eq!(totals(&mut client, &queue), (0, 1, 1));
}

#[test]
fn only_committed_settles_count() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("committed", "");

    // A settle rolled back with its transaction.
    let job = held(&mut client, &queue);
    client.batch_execute("BEGIN").unwrap();
    assert_eq!(complete(&mut client, &job), "succeeded");
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(
        totals(&mut client, &queue),
        (0, 0, 0),
        "a rolled-back complete"
    );

    // A settle in a savepoint rolled back, in a transaction that commits.
    client.batch_execute("BEGIN; SAVEPOINT s").unwrap();
    assert_eq!(
        settle(&mut client, "SELECT jobs_fail($1, $2, 'x')", &job),
        "queued"
    );
    client
        .batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT")
        .unwrap();
    assert_eq!(
        totals(&mut client, &queue),
        (0, 0, 0),
        "a fail rolled back to a savepoint"
    );

    // A settle in a released savepoint (and one nested deeper) counts with its transaction.
    client
        .batch_execute("BEGIN; SAVEPOINT outer_s; SAVEPOINT inner_s")
        .unwrap();
    assert_eq!(complete(&mut client, &job), "succeeded");
    client
        .batch_execute("RELEASE SAVEPOINT inner_s; RELEASE SAVEPOINT outer_s")
        .unwrap();
    assert_eq!(
        totals(&mut cluster.connect(), &queue),
        (0, 0, 0),
        "counted before its transaction committed"
    );
    client.batch_execute("COMMIT").unwrap();
    assert_eq!(
        totals(&mut client, &queue),
        (1, 0, 0),
        "a complete in released savepoints"
    );

    // A PL/pgSQL exception block is a subtransaction too.
    let job = held(&mut client, &queue);
    client
        .batch_execute(&format!(
            "DO $$ BEGIN
                 PERFORM jobs_complete({}, '{}');
                 RAISE EXCEPTION 'undo';
             EXCEPTION WHEN raise_exception THEN NULL;
             END $$",
            job.id, job.lease
        ))
        .unwrap();
    assert_eq!(state(&mut client, job.id), "running");
    assert_eq!(
        totals(&mut client, &queue),
        (1, 0, 0),
        "a complete in a failed block"
    );
}

#[test]
fn a_prepared_settle_counts_when_committed_prepared() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("prepared", "");

    for (gid, end, expected) in [
        ("totals-rollback", "ROLLBACK PREPARED", (0, 0, 0)),
        ("totals-commit", "COMMIT PREPARED", (1, 0, 0)),
    ] {
        let job = held(&mut client, &queue);
        client.batch_execute("BEGIN").unwrap();
        assert_eq!(complete(&mut client, &job), "succeeded");
        client
            .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
            .unwrap();
        // Ended from another session, which knows nothing of what the prepared one did.
        let mut other = cluster.connect();
        assert_eq!(totals(&mut other, &queue), (0, 0, 0), "before {end}");
        other.batch_execute(&format!("{end} '{gid}'")).unwrap();
        assert_eq!(totals(&mut other, &queue), expected, "after {end}");
    }
}

#[test]
fn metrics_show_totals_and_the_workers_health() {
    let cluster = cluster();
    let (mut client, queue) = cluster.connect_with_queue("scraped", "");
    let job = held(&mut client, &queue);
    assert_eq!(complete(&mut client, &job), "succeeded");
    // The worker has ticked at least once with the extension there (its tick is 100 ms): a
    // tick before CREATE EXTENSION committed counts in `ticks` but leaves `serving` false.
    wait_until(Duration::from_secs(10), "a worker tick that served", || {
        scalar::<Option<bool>>(
            &mut client,
            "SELECT bool_or(serving) FROM jobs_worker_status()",
            &[],
        )
        .unwrap_or(false)
    });
    let metrics: String = scalar(&mut client, "SELECT jobs_metrics()", &[]);
    for line in [
        format!("pg_jobs_completed_total{{queue=\"{queue}\"}} 1"),
        format!("pg_jobs_failed_total{{queue=\"{queue}\"}} 0"),
        format!("pg_jobs_retried_total{{queue=\"{queue}\"}} 0"),
        "pg_jobs_worker_up{database=\"postgres\"} 1".to_owned(),
        "# TYPE pg_jobs_completed_total counter".to_owned(),
        "# TYPE pg_jobs_worker_ticks_total counter".to_owned(),
        "pg_jobs_worker_last_error_age_seconds{database=\"postgres\"} +Inf".to_owned(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in:\n{metrics}"
        );
    }
    let tick_age: f64 = metric_value(&metrics, "pg_jobs_worker_last_tick_age_seconds");
    assert!((0.0..10.0).contains(&tick_age), "last tick age {tick_age}");
    for counter in [
        "pg_jobs_worker_ticks_total",
        "pg_jobs_worker_reclaimed_total",
        "pg_jobs_worker_purged_total",
    ] {
        assert!(metric_value(&metrics, counter) >= 0.0, "{counter}");
    }
    // Every sample line parses as name{labels} value.
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let (_, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            value == "+Inf" || value.parse::<f64>().is_ok(),
            "not a sample: {line:?}"
        );
    }
}

/// The value of the only sample of `name` in `metrics`.
fn metric_value(metrics: &str, name: &str) -> f64 {
    let line = metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"));
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}
