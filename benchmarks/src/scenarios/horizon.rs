//! o. A transaction held open under pressure (issue 35, defect 9): producers enqueue a steady
//! 400 jobs/s (one job per transaction, from 8 sessions on one schedule) to 32 workers waiting
//! in `jobs_claim(..., wait => ...)`, each completing every job it claims. After a warm-up,
//! a minute is measured; then another session runs `BEGIN; SELECT txid_current();` and stays
//! idle in that transaction for 3 minutes, which holds the xmin horizon: vacuum keeps every
//! row version and index entry the queue leaves behind meanwhile. The same is measured through
//! the hold, then it commits.
//!
//! Per window: pickup latency (the enqueue's COMMIT returned to the client → the job in a
//! worker's hands) of the jobs enqueued in it, p50/p99/max; server CPU and shared buffers read
//! per job completed in it. And about once a second `pg_stat_activity`: the age of the oldest snapshot a pg_jobs
//! session holds (its producers' and workers' role, its background worker), whether one is
//! older than the held transaction's xid (then pg_jobs, not the held transaction, holds the
//! horizon back), and whether waiting claims sleep with a snapshot.
//!
//! The hold, the minute before it and the rate are `BENCH_HOLD_SECS`, `BENCH_HOLD_BEFORE_SECS`
//! and `BENCH_HOLD_RATE` (the small scale holds 20 s after 10 s).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use postgres::Client;

use super::{attempt, connect_workers, percentile, sessions, with_waiting_workers_n, Ctx};
use crate::comparators::{payload, Claimed, Comparator, Worker};
use crate::config::{PRODUCERS, WORKER_ROLE};
use crate::db::{self, Span};
use crate::format::int;
use crate::results::{Horizon, Measurement};

pub const SCENARIO: &str = "o";
pub const BEFORE: &str = "before the hold";
pub const DURING: &str = "during the hold";
/// Waiting workers, as in the harness of issue 35.
pub const WORKERS: usize = 32;
/// Traffic before the first window (then the table is analyzed).
const WARM_UP: Duration = Duration::from_secs(5);
/// How often `pg_stat_activity` is read.
const SAMPLE: Duration = Duration::from_secs(1);
/// How long the workers get to pick up what was enqueued before they are stopped.
const DRAIN: Duration = Duration::from_secs(30);
/// pg_jobs's background worker's `backend_type`.
const BACKGROUND_WORKER: &str = "pg_jobs worker";

/// Runs the scenario on pg_jobs (the only queue whose claims wait in the server).
pub fn run(ctx: &Ctx, admin: &mut Client, queues: &[&dyn Comparator]) -> Vec<Measurement> {
    let Some(c) = queues.iter().copied().find(|c| c.name() == "pg_jobs") else {
        return Vec::new();
    };
    let mut before = None;
    let during = attempt(SCENARIO, DURING, c.name(), || {
        let (b, d) = measure(ctx, admin, c)?;
        eprint!("{} · ", summary(&b));
        before = Some(b);
        Ok(d)
    });
    let before = before.unwrap_or_else(|| {
        Measurement::new(SCENARIO, BEFORE, c.name())
            .missing(during.missing.clone().unwrap_or_default())
    });
    vec![before, during]
}

fn summary(m: &Measurement) -> String {
    format!(
        "before: p50 {:.2} ms, p99 {:.2} ms, {:.3} s server CPU / 1,000 jobs; during",
        m.p50_ms.unwrap_or(f64::NAN),
        m.p99_ms.unwrap_or(f64::NAN),
        m.server_cpu_per_1000().unwrap_or(f64::NAN)
    )
}

/// What the producers and workers note: when each job's enqueue committed, when each was
/// picked up, and how many were completed.
#[derive(Default)]
struct Log {
    committed: Mutex<Vec<(i64, Instant)>>,
    picked: Mutex<Vec<(i64, Instant)>>,
    completed: AtomicU64,
}

/// One window's bounds and the counters at them.
struct Bounds {
    from: Instant,
    server_cpu: f64,
    client_cpu: f64,
    completed: u64,
    /// The bench database's shared buffer reads so far.
    buffers: i64,
}

/// Reads pg_stat_activity and adds what it shows to `h`; `holder` is the held transaction's
/// backend.
///
/// pg_stat_activity reads a backend's xmin and its wait event at slightly different moments, so
/// a claim seen asleep with a snapshot may have been caught between the two (taking its
/// attempt's snapshot just before it went to sleep and dropped it): such a claim counts only
/// when a second reading 20 ms later still shows it asleep with the same xmin. And a pg_jobs
/// statement that began before the hold has a snapshot older than the held xid until it ends:
/// one counts as holding the horizon only once the hold is two seconds old.
fn sample(admin: &mut Client, holder: Option<i32>, h: &mut Horizon) -> Result<()> {
    let row = admin.query_one(
        "WITH a AS (
             SELECT pid, backend_xmin, wait_event_type,
                    usename = $1 OR backend_type = $2 AS ours,
                    backend_type = $2 AS worker
               FROM pg_stat_activity
              WHERE pid <> pg_backend_pid()),
         held AS (SELECT age(backend_xid) AS age, now() - xact_start > interval '2 seconds' AS settled
                    FROM pg_stat_activity WHERE pid = $3)
         SELECT (SELECT age FROM held)::bigint,
                max(age(backend_xmin)) FILTER (WHERE ours)::bigint,
                count(*) FILTER (WHERE ours AND age(backend_xmin) > (SELECT age FROM held)
                                   AND (SELECT settled FROM held)),
                count(*) FILTER (WHERE ours AND NOT worker AND wait_event_type = 'Extension'),
                coalesce(array_agg(pid) FILTER (WHERE ours AND NOT worker
                                                  AND wait_event_type = 'Extension'
                                                  AND backend_xmin IS NOT NULL), '{}'),
                coalesce(array_agg(backend_xmin::text) FILTER (WHERE ours AND NOT worker
                                                  AND wait_event_type = 'Extension'
                                                  AND backend_xmin IS NOT NULL), '{}')
           FROM a",
        &[&WORKER_ROLE, &BACKGROUND_WORKER, &holder.unwrap_or(0)],
    )?;
    let holder_age: Option<i64> = row.get(0);
    let max_age: Option<i64> = row.get(1);
    let (past, asleep): (i64, i64) = (row.get(2), row.get(3));
    let pids: Vec<i32> = row.get(4);
    let xmins: Vec<String> = row.get(5);
    let mut asleep_with_xmin = 0;
    if !pids.is_empty() {
        std::thread::sleep(Duration::from_millis(20));
        asleep_with_xmin = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity a
                   JOIN unnest($1::int[], $2::text[]) AS s(pid, xmin) ON s.pid = a.pid
                  WHERE a.wait_event_type = 'Extension' AND a.backend_xmin::text = s.xmin",
                &[&pids, &xmins],
            )?
            .get::<_, i64>(0);
    }
    h.samples += 1;
    if holder_age.is_some() {
        h.holder_xid_age = holder_age;
    }
    h.max_xmin_age = h.max_xmin_age.max(max_age);
    h.past_holder += u64::from(past > 0);
    h.asleep += asleep as u64;
    h.asleep_with_xmin += asleep_with_xmin as u64;
    Ok(())
}

/// Samples pg_stat_activity until `until`.
fn watch(admin: &mut Client, holder: Option<i32>, until: Instant, h: &mut Horizon) -> Result<()> {
    loop {
        sample(admin, holder, h)?;
        let now = Instant::now();
        if now >= until {
            return Ok(());
        }
        std::thread::sleep(SAMPLE.min(until - now));
    }
}

fn bounds(ctx: &Ctx, admin: &mut Client, log: &Log) -> Result<Bounds> {
    let buffers = admin
        .query_one(
            "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )?
        .get(0);
    Ok(Bounds {
        from: Instant::now(),
        server_cpu: ctx.server.seconds(),
        client_cpu: crate::cpu::own_seconds(),
        completed: log.completed.load(Ordering::Relaxed),
        buffers,
    })
}

/// The window from `a` to `b`: its throughput and CPU, and the pickups of the jobs enqueued
/// in it.
fn window(
    variant: &str,
    c: &dyn Comparator,
    a: &Bounds,
    b: &Bounds,
    latencies: &[(Instant, f64)],
) -> Measurement {
    let span = Span {
        seconds: b.from.duration_since(a.from).as_secs_f64(),
        server_cpu: b.server_cpu - a.server_cpu,
        client_cpu: b.client_cpu - a.client_cpu,
        ..Span::default()
    };
    let mut mine: Vec<f64> = latencies
        .iter()
        .filter(|(at, _)| *at >= a.from && *at < b.from)
        .map(|(_, l)| *l)
        .collect();
    mine.sort_by(f64::total_cmp);
    let mut m =
        Measurement::new(SCENARIO, variant, c.name()).throughput(b.completed - a.completed, &span);
    m.p50_ms = percentile(&mine, 50.0);
    m.p99_ms = percentile(&mine, 99.0);
    m.max_ms = mine.last().copied();
    m
}

fn measure(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
) -> Result<(Measurement, Measurement)> {
    let scale = &ctx.cfg.scale;
    let rate = scale.hold_rate;
    let (before_secs, hold_secs) = (
        Duration::from_secs(scale.hold_before_secs),
        Duration::from_secs(scale.hold_secs),
    );
    c.reset(admin)?;
    db::settle(admin, c.table())?;
    let mut producers = sessions(ctx, c, PRODUCERS)?
        .into_iter()
        .map(|conn| c.producer(conn))
        .collect::<Result<Vec<_>>>()?;
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    // The held transaction's session: the measuring role, not one of pg_jobs's.
    let mut holder = db::connect(&ctx.cfg.admin_dsn)?;
    let holder_pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    let log = Log::default();
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(0);
    let handle = |w: &mut dyn Worker, jobs: &[Claimed]| -> Result<()> {
        let at = Instant::now();
        log.picked
            .lock()
            .unwrap()
            .extend(jobs.iter().map(|j| (j.id, at)));
        w.complete(jobs)?;
        log.completed
            .fetch_add(jobs.len() as u64, Ordering::Relaxed);
        Ok(())
    };

    let outcome = with_waiting_workers_n(c, &mut workers, 1, handle, || -> Result<_> {
        std::thread::scope(|s| -> Result<_> {
            // Let every worker settle into waiting before the first job.
            std::thread::sleep(Duration::from_secs(1));
            let start = Instant::now();
            let threads: Vec<_> = producers
                .iter_mut()
                .map(|p| {
                    let (log, next, stop) = (&log, &next, &stop);
                    s.spawn(move || -> Result<()> {
                        while !stop.load(Ordering::Relaxed) {
                            // Each producer takes the next slot of the one schedule.
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            let due = start + Duration::from_secs_f64(k as f64 / rate);
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            if stop.load(Ordering::Relaxed) {
                                break;
                            }
                            let id = p.enqueue(&payload(k))?;
                            log.committed.lock().unwrap().push((id, Instant::now()));
                        }
                        Ok(())
                    })
                })
                .collect();
            let measured = (|| -> Result<_> {
                std::thread::sleep(WARM_UP);
                admin.batch_execute(&format!("ANALYZE {}", c.table()))?;
                let mut seen_before = Horizon::default();
                let a = bounds(ctx, admin, &log)?;
                watch(admin, None, a.from + before_secs, &mut seen_before)?;
                let b = bounds(ctx, admin, &log)?;
                holder.batch_execute("BEGIN")?;
                let xid: i64 = holder.query_one("SELECT txid_current()", &[])?.get(0);
                let mut seen_during = Horizon::default();
                let watched = watch(
                    admin,
                    Some(holder_pid),
                    b.from + hold_secs,
                    &mut seen_during,
                );
                let e = bounds(ctx, admin, &log)?;
                holder
                    .batch_execute("COMMIT")
                    .context("ending the held transaction")?;
                watched?;
                if threads.iter().any(|t| t.is_finished()) {
                    bail!("a producer stopped early");
                }
                Ok((a, b, e, xid, seen_before, seen_during))
            })();
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))??;
            }
            let measured = measured?;
            // The workers pick up what is left before they are stopped.
            let sent = log.committed.lock().unwrap().len();
            let deadline = Instant::now() + DRAIN;
            while log.picked.lock().unwrap().len() < sent && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(measured)
        })
    })?;
    let (a, b, e, xid, mut seen_before, mut seen_during) = outcome?;
    seen_before.buffers = Some(b.buffers - a.buffers);
    seen_during.buffers = Some(e.buffers - b.buffers);
    c.reset(admin)?;

    let picked: std::collections::HashMap<i64, Instant> =
        log.picked.into_inner().unwrap().into_iter().collect();
    let committed = log.committed.into_inner().unwrap();
    let latencies: Vec<(Instant, f64)> = committed
        .iter()
        .filter_map(|(id, at)| {
            picked
                .get(id)
                .map(|p| (*at, p.saturating_duration_since(*at).as_secs_f64() * 1000.0))
        })
        .collect();
    let lost = committed.len() - latencies.len();
    let offered = format!(
        "{} jobs/s offered by {PRODUCERS} producers (1 job per transaction) to {WORKERS} workers waiting in jobs_claim(wait => ...), each job completed",
        int(rate)
    );
    let lost = if lost > 0 {
        format!(
            "; {} of {} jobs not picked up {} s after the end",
            int(lost as f64),
            int(committed.len() as f64),
            DRAIN.as_secs()
        )
    } else {
        String::new()
    };
    let mut before = window(BEFORE, c, &a, &b, &latencies).note(format!(
        "{offered}; the {} s before the hold{lost}",
        before_secs.as_secs()
    ));
    before.horizon = Some(seen_before);
    let mut during = window(DURING, c, &b, &e, &latencies).note(format!(
        "{offered}; a transaction (xid {xid}) held open for {} s{lost}",
        hold_secs.as_secs()
    ));
    during.horizon = Some(seen_during);
    Ok((before, during))
}
