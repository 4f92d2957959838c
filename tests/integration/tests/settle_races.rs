//! A late settle racing a reclaim and a claim of the same job must never deadlock.
//!
//! The interleaving: the settle's update meets the job while a reclaim changes it, waits for
//! the reclaim, then (its recheck failing, the job being queued now) holds the row's lock; a
//! claim picks the queued job, holding its job lock, and its update waits for that row lock;
//! the settle then needs the job lock ("done wins" takes it for a reclaimed job). Before the
//! fix, PostgreSQL broke the cycle with 40P01; the history checker's large runs met it about
//! three times in 100,000 jobs. The interleaving happens inside one call, so it cannot be
//! scripted step by step; this test provokes it over many rounds instead.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use pg_jobs_tests::{claim, enqueue, Client, Cluster, TEST_SETTINGS};
use serde_json::json;

#[test]
fn late_settles_racing_reclaims_and_claims_never_deadlock() {
    // Without the worker, this test's reclaim is the only one.
    let settings: Vec<&str> = TEST_SETTINGS
        .iter()
        .copied()
        .map(|s| {
            if s.starts_with("pg_jobs.databases") {
                "pg_jobs.databases = ''"
            } else {
                s
            }
        })
        .collect();
    let cluster = Cluster::start_with_extension("settle-races", &settings);
    let (mut admin, queue) =
        cluster.connect_with_queue("races", "lease => '100 milliseconds', max_attempts => 1000");
    let rounds: usize = std::env::var("PG_JOBS_SETTLE_RACE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let mut deadlocks = Vec::new();
    let mut settle = cluster.connect();
    let mut reclaimer = cluster.connect();
    let mut claimer = cluster.connect();
    for round in 0..rounds {
        let id = enqueue(&mut admin, &queue, json!({ "round": round }));
        let held = claim(&mut admin, &queue, 1, "");
        assert_eq!(held[0].id, id);
        // Let the lease run out (the clock decides; sleep just past it).
        thread::sleep(Duration::from_millis(110));
        let barrier = Arc::new(Barrier::new(3));
        let lease = held[0].lease;
        let run = |client: &mut Client, sql: String, barrier: Arc<Barrier>| {
            let mut client = std::mem::replace(
                client,
                Client::connect(&cluster.dsn("postgres"), postgres::NoTls).unwrap(),
            );
            thread::spawn(move || {
                barrier.wait();
                let result = client.batch_execute(&sql);
                (
                    client,
                    result.err().and_then(|e| {
                        e.as_db_error()
                            .map(|d| (d.code().code().to_owned(), d.message().to_owned()))
                    }),
                )
            })
        };
        let handles = [
            run(
                &mut reclaimer,
                "SELECT jobs_reclaim()".to_owned(),
                barrier.clone(),
            ),
            run(
                &mut settle,
                format!("SELECT jobs_complete({id}, '{lease}')"),
                barrier.clone(),
            ),
            run(
                &mut claimer,
                format!("SELECT jobs_complete(id, lease) FROM jobs_claim('{queue}')"),
                barrier.clone(),
            ),
        ];
        for (i, handle) in handles.into_iter().enumerate() {
            let (client, error) = handle.join().unwrap();
            match i {
                0 => reclaimer = client,
                1 => settle = client,
                _ => claimer = client,
            }
            if let Some((code, message)) = error {
                assert_eq!(
                    code, "40P01",
                    "round {round}: unexpected error {code}: {message}"
                );
                deadlocks.push(round);
            }
        }
        // The job ended exactly once.
        let state: String = pg_jobs_tests::state(&mut admin, id);
        assert_eq!(state, "succeeded", "round {round}");
    }
    assert!(
        deadlocks.is_empty(),
        "deadlocks in rounds {deadlocks:?} of {rounds}"
    );
}

/// `jobs_retry` of a unique job racing an enqueue of its key: the enqueue's transaction is not
/// committed when the retry checks the key, commits while the retry's update waits in the
/// unique index, and the retry then refuses with the documented message naming the holder, not
/// the index's raw 23505 (`job_unique_idx`).
#[test]
fn a_retry_racing_a_new_holder_of_its_unique_key_names_the_holder() {
    let cluster = Cluster::shared();
    let (mut admin, queue) = cluster.connect_with_queue("retry-race", "");
    let failed: i64 = pg_jobs_tests::scalar(
        &mut admin,
        "SELECT jobs_enqueue($1, '{}', unique_key => 'race')",
        &[&queue],
    );
    let job = claim(&mut admin, &queue, 1, "")[0];
    let outcome: String = pg_jobs_tests::scalar(
        &mut admin,
        "SELECT jobs_fail($1, $2, 'boom', retry => false)",
        &[&job.id, &job.lease],
    );
    assert_eq!(outcome, "failed");

    let mut producer = cluster.connect();
    producer.batch_execute("BEGIN").unwrap();
    let holder: i64 = pg_jobs_tests::scalar(
        &mut producer,
        "SELECT jobs_enqueue($1, '{}', unique_key => 'race')",
        &[&queue],
    );
    let mut operator = cluster.connect();
    let operator_pid: i32 = pg_jobs_tests::scalar(&mut operator, "SELECT pg_backend_pid()", &[]);
    let retry = thread::spawn(move || {
        operator
            .query_one("SELECT jobs_retry($1)", &[&failed])
            .map(|row| row.get::<_, String>(0))
    });
    pg_jobs_tests::wait_for_a_lock(&mut admin, operator_pid, "the retry to wait in the index");
    producer.batch_execute("COMMIT").unwrap();
    let error = retry
        .join()
        .unwrap()
        .expect_err("the retry must refuse: the key has a new holder");
    let db = error.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "23505");
    assert_eq!(
        db.message(),
        format!(
            "job {failed} cannot be retried: job {holder} (queued) holds its unique key 'race' in queue '{queue}'"
        )
    );
    assert_eq!(pg_jobs_tests::state(&mut admin, failed), "failed");
}
