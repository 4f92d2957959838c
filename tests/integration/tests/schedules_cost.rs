//! What a schedules run costs per job, against `jobs_enqueue_batch` of as many jobs, in one
//! run on one cluster (on demand: timings on a shared 2-core machine are for reading, not for
//! failing the suite):
//!
//! ```sh
//! cargo test --release -p pg_jobs_tests --test schedules_cost -- --ignored --nocapture
//! ```
//!
//! 10,000 schedules, of which 1,000 are due: `jobs_run_schedules()` runs the worker's step
//! (lock the due schedules, plan their slots, one insert of their jobs through the enqueue
//! door, advance their progress) in its own transaction, as a tick does; it is timed against
//! `jobs_enqueue_batch` of the same 1,000 jobs (the same payloads, and headers of the size a
//! slot's job carries; without headers too) in its own transaction, alternately, 15 rounds
//! each, client-timed and by EXPLAIN ANALYZE. The database is one the background worker does
//! not serve, so nothing else takes the slots. It fails only if a run does not enqueue every
//! due slot exactly once; the figures (and whether the 1.5× target is met) are printed.

use std::time::Instant;

use pg_jobs_tests::{scalar, Client, Cluster, TEST_SETTINGS};

/// Schedules in the table.
const SCHEDULES: i64 = 10_000;
/// Of which due at each round.
const DUE: i64 = 1_000;
/// Rounds of each.
const ROUNDS: usize = 15;

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values[values.len() / 2]
}

/// Deletes every job and vacuums the table, so that each timed call starts from the same
/// empty table.
fn empty_jobs(client: &mut Client) {
    client.batch_execute("DELETE FROM jobs.job").unwrap();
    client.batch_execute("VACUUM jobs.job").unwrap();
}

#[test]
#[ignore = "a measurement; run on demand"]
fn a_run_with_1000_due_of_10000_schedules_against_a_batch_enqueue_of_the_same_jobs() {
    let mut settings: Vec<&str> = TEST_SETTINGS.to_vec();
    settings.extend(["fsync = on", "synchronous_commit = on"]);
    settings.retain(|line| {
        !line.starts_with("fsync = off") && !line.starts_with("synchronous_commit = off")
    });
    let cluster = Cluster::start("sched-cost", &settings);
    let mut admin = cluster.connect();
    admin.batch_execute("CREATE DATABASE sched_cost").unwrap();
    let mut client = cluster.connect_to("sched_cost");
    client
        .batch_execute(&format!(
            "CREATE EXTENSION pg_jobs;
             SELECT jobs_create_queue('cost');
             SELECT count(jobs_schedule('s' || i, CASE WHEN i <= {DUE} THEN '* * * * *' ELSE '0 0 1 1 *' END,
                                        'cost', jsonb_build_object('n', i)))
               FROM generate_series(1, {SCHEDULES}) i;"
        ))
        .unwrap();
    client
        .batch_execute("VACUUM ANALYZE jobs.schedule")
        .unwrap();
    let make_due = format!(
        "UPDATE jobs.schedule SET next_slot = date_trunc('second', now()) - interval '1 second',
                                due_floor = least(due_floor, date_trunc('second', now()) - interval '1 second')
          WHERE name IN (SELECT 's' || i FROM generate_series(1, {DUE}) i)"
    );
    let payloads =
        format!("SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, {DUE}) i");
    let execution_ms = |plan: &serde_json::Value| plan[0]["Execution Time"].as_f64().unwrap();
    // The same jobs as far as a batch can make them: the same payloads, and headers of the
    // same size as a slot's (a batch takes one headers object for all its jobs).
    let headers =
        serde_json::json!({"pg_jobs.schedule": "s1000", "pg_jobs.slot": "2026-12-01T10:00:00Z"});
    let (mut run_ms, mut batch_ms, mut run_exec, mut batch_exec) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut bare_ms = Vec::new();
    for round in 0..=ROUNDS {
        let payloads: Vec<serde_json::Value> = scalar(&mut client, &payloads, &[]);
        // Timed by the client, each call in its own transaction (commit included).
        client.batch_execute(&make_due).unwrap();
        let started = Instant::now();
        let enqueued: i64 = scalar(&mut client, "SELECT jobs_run_schedules()", &[]);
        let run = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(enqueued, DUE, "every due schedule's slot, once");
        empty_jobs(&mut client);
        let started = Instant::now();
        let inserted: i64 = scalar(
            &mut client,
            "SELECT count(*) FROM jobs_enqueue_batch('cost', $1, headers => $2)",
            &[&payloads, &headers],
        );
        let batch = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(inserted, DUE);
        empty_jobs(&mut client);
        let started = Instant::now();
        let inserted: i64 = scalar(
            &mut client,
            "SELECT count(*) FROM jobs_enqueue_batch('cost', $1)",
            &[&payloads],
        );
        let bare = started.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(inserted, DUE);
        empty_jobs(&mut client);
        // Timed by the server: the statement's execution alone.
        client.batch_execute(&make_due).unwrap();
        let plan: serde_json::Value = scalar(
            &mut client,
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT jobs_run_schedules()",
            &[],
        );
        let run_server = execution_ms(&plan);
        empty_jobs(&mut client);
        let plan: serde_json::Value = scalar(
            &mut client,
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM jobs_enqueue_batch('cost', $1, headers => $2)",
            &[&payloads, &headers],
        );
        let batch_server = execution_ms(&plan);
        empty_jobs(&mut client);
        // The first round warms the caches and the kept plans.
        if round > 0 {
            run_ms.push(run);
            batch_ms.push(batch);
            bare_ms.push(bare);
            run_exec.push(run_server);
            batch_exec.push(batch_server);
        }
    }
    let (run, batch, bare) = (
        median(&mut run_ms),
        median(&mut batch_ms),
        median(&mut bare_ms),
    );
    let (run_server, batch_server) = (median(&mut run_exec), median(&mut batch_exec));
    let per_job = |ms: f64| ms * 1000.0 / DUE as f64;
    println!(
        "client-timed (commit included): schedules run with {DUE} due of {SCHEDULES}: median {run:.2} ms \
         ({:.1} µs per job); jobs_enqueue_batch of {DUE} with the same headers: median {batch:.2} ms ({:.1} µs per job); ratio {:.2}",
        per_job(run),
        per_job(batch),
        run / batch
    );
    println!(
        "client-timed: jobs_enqueue_batch of {DUE} without headers: median {bare:.2} ms ({:.1} µs per job); \
         the run is {:.2}× that",
        per_job(bare),
        run / bare
    );
    println!(
        "EXPLAIN ANALYZE execution: schedules run median {run_server:.2} ms ({:.1} µs per job); \
         jobs_enqueue_batch median {batch_server:.2} ms ({:.1} µs per job); ratio {:.2}",
        per_job(run_server),
        per_job(batch_server),
        run_server / batch_server
    );
    // Issue 12's target; printed rather than asserted, as a timing on a shared machine.
    println!(
        "target: at most 1.5× the batch enqueue of the same jobs per job: {}",
        if run / batch <= 1.5 { "met" } else { "missed" }
    );
}
