//! t. Schedules: what one run of the schedules costs per job when 1,000 of 10,000 schedules
//! are due, against `jobs_enqueue_batch` of 1,000 jobs (pg_jobs issue 12: at most 1.5×).
//!
//! Runs in a database of its own in the suite's cluster, which the pg_jobs background worker
//! does not serve, so nothing else takes the due slots: each round makes the same 1,000
//! schedules due, times `jobs_run_schedules()` (the worker's step: lock the due schedules,
//! plan their slots, one insert of their jobs, advance their progress) in its own
//! transaction, then `jobs_enqueue_batch` of the same 1,000 jobs (same payloads, headers of the
//! same size) in its own, both from the same session; 15 rounds after one warm-up round, medians reported.

use std::time::Instant;

use anyhow::Result;
use postgres::Client;

use super::{attempt, Ctx};
use crate::comparators::Comparator;
use crate::db;
use crate::results::Measurement;

/// The run of the schedules, and the batch enqueue of the same jobs it is judged against.
pub const RUN: &str = "run, 1,000 due of 10,000";
pub const BATCH: &str = "jobs_enqueue_batch, the same 1,000 jobs";
/// The target of issue 12: a run costs at most this many times the batch enqueue per job.
pub const TARGET: f64 = 1.5;
/// Schedules in the table.
const SCHEDULES: i64 = 10_000;
/// Of which due at each round.
const DUE: i64 = 1_000;
/// Measured rounds.
const ROUNDS: usize = 15;
/// The database the scenario uses.
const DATABASE: &str = "bench_schedules";

/// The two figures of the scenario: the run, and the batch enqueue it is judged against.
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let mut figures: Option<(f64, f64)> = None;
    let run = attempt("t", RUN, "pg_jobs", || {
        let (run_ms, batch_ms) = measure(ctx, admin)?;
        figures = Some((run_ms, batch_ms));
        Ok(figure(RUN, run_ms, batch_ms))
    });
    let mut out = vec![run];
    if let Some((_, batch_ms)) = figures {
        out.push(figure(BATCH, batch_ms, batch_ms));
    }
    out
}

fn figure(variant: &str, ms: f64, batch_ms: f64) -> Measurement {
    let mut m = Measurement::new("t", variant, "pg_jobs");
    m.jobs = DUE as u64;
    m.seconds = ms / 1000.0;
    m.rate = Some(DUE as f64 / (ms / 1000.0));
    m.note = Some(format!(
        "median of {ROUNDS} rounds: {ms:.2} ms, {:.1} µs per job, {:.2}× the batch enqueue",
        ms * 1000.0 / DUE as f64,
        ms / batch_ms
    ));
    m
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

/// Medians of the run and of the batch enqueue, in milliseconds.
fn measure(ctx: &Ctx, admin: &mut Client) -> Result<(f64, f64)> {
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {DATABASE}"))?;
    admin.batch_execute(&format!("CREATE DATABASE {DATABASE}"))?;
    let dsn = format!(
        "host={} port={} user=postgres dbname={DATABASE}",
        ctx.cfg.socket_dir, ctx.cfg.port
    );
    let mut client = db::connect(&dsn)?;
    client.batch_execute(&format!(
        "CREATE EXTENSION pg_jobs;
         SELECT jobs_create_queue('schedules');
         SELECT count(jobs_schedule('s' || i, CASE WHEN i <= {DUE} THEN '* * * * *' ELSE '0 0 1 1 *' END,
                                    'schedules', jsonb_build_object('n', i)))
           FROM generate_series(1, {SCHEDULES}) i;"
    ))?;
    client.batch_execute("VACUUM ANALYZE jobs.schedule")?;
    let make_due = format!(
        "UPDATE jobs.schedule SET next_slot = date_trunc('second', now()) - interval '1 second',
                                due_floor = least(due_floor, date_trunc('second', now()) - interval '1 second')
          WHERE name IN (SELECT 's' || i FROM generate_series(1, {DUE}) i)"
    );
    let reset = "DELETE FROM jobs.job";
    let payloads: Vec<serde_json::Value> =
        (1..=DUE).map(|n| serde_json::json!({ "n": n })).collect();
    // The same jobs as far as a batch can make them: headers of the size a slot's job carries
    // (a batch takes one headers object for all its jobs).
    let headers =
        serde_json::json!({"pg_jobs.schedule": "s1000", "pg_jobs.slot": "2026-12-01T10:00:00Z"});
    let enqueue = client
        .prepare("SELECT count(*) FROM jobs_enqueue_batch('schedules', $1, headers => $2)")?;
    let run_all = client.prepare("SELECT jobs_run_schedules()")?;
    let (mut runs, mut batches) = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        client.batch_execute(&make_due)?;
        let started = Instant::now();
        let enqueued: i64 = client.query_one(&run_all, &[])?.get(0);
        let run_ms = started.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(
            enqueued == DUE,
            "the run enqueued {enqueued} jobs, not {DUE}"
        );
        client.batch_execute(reset)?;
        client.batch_execute("VACUUM jobs.job")?;
        let started = Instant::now();
        let inserted: i64 = client.query_one(&enqueue, &[&payloads, &headers])?.get(0);
        let batch_ms = started.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(
            inserted == DUE,
            "the batch inserted {inserted} jobs, not {DUE}"
        );
        client.batch_execute(reset)?;
        client.batch_execute("VACUUM jobs.job")?;
        if round > 0 {
            runs.push(run_ms);
            batches.push(batch_ms);
        }
    }
    drop(client);
    admin.batch_execute(&format!("DROP DATABASE {DATABASE}"))?;
    Ok((median(&mut runs), median(&mut batches)))
}
