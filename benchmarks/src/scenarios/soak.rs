//! s. Soak (issue 18): producers and waiting workers together for 10 minutes at about 70% of
//! the capacity measured just before, in the same run, with 5% of jobs failing once and
//! retried a second later, finished jobs purged after a minute, and autovacuum at its
//! defaults. Every 10 seconds: throughput, pickup p50/p99, dead tuples, and the sizes of the
//! table and each of its indexes. pg_jobs and the hand-rolled queue run at the same rate.
//!
//! Capacity is the completion rate of the same traffic with producers and workers flat out,
//! except that producers hold back while more than [`CAPACITY_BACKLOG`] jobs are queued: the
//! rate at which the queue keeps up with its producers, not a burn-down rate (which has no
//! producers competing for the cores). The soak runs at [`LOAD`] of the lower of the
//! soaked queues' capacities, so both get the same work and neither is overloaded.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use postgres::Client;

use super::{attempt, connect_workers, percentile, sessions, with_waiting_workers, Ctx};
use crate::comparators::{payload, Claimed, Comparator, Worker};
use crate::config::{PRODUCERS, WORKERS};
use crate::db::{self, Window};
use crate::format::int;
use crate::results::{Measurement, Sample};

pub const CAPACITY: &str = "capacity";
pub const SOAK: &str = "soak";
/// The queues soaked: the hand-rolled queue is the baseline issue 18 names.
pub const SOAKED: [&str; 2] = ["pg_jobs", "hand-rolled"];
/// Fraction of the measured capacity the soak offers.
pub const LOAD: f64 = 0.7;
/// Producers measuring capacity pause while more jobs than this are queued.
pub const CAPACITY_BACKLOG: u64 = 1_000;
/// Traffic before the measurement window opens (then the table is analyzed).
pub const WARM_UP: Duration = Duration::from_secs(5);
/// One job in this many fails on its first attempt...
pub const FAIL_EVERY: i64 = 20;
/// ...and is retried this long after.
pub const RETRY_IN: Duration = Duration::from_secs(1);

/// Runs the capacity measurement for every soaked queue, then the soak of each at the same
/// rate. Queues other than [`SOAKED`] are not soaked.
pub fn run(ctx: &Ctx, admin: &mut Client, comparators: &[&dyn Comparator]) -> Vec<Measurement> {
    let soaked: Vec<&dyn Comparator> = comparators
        .iter()
        .copied()
        .filter(|c| SOAKED.contains(&c.name()))
        .collect();
    let mut out = Vec::new();
    let secs = Duration::from_secs(ctx.cfg.scale.capacity_secs);
    for c in &soaked {
        out.push(attempt("s", CAPACITY, c.name(), || {
            let (m, _) = traffic(ctx, admin, *c, Pace::Bounded(CAPACITY_BACKLOG), secs)?;
            Ok(m.note_first(format!(
                "{PRODUCERS} producers (1 job per transaction, paused while more than {} jobs are queued) and {WORKERS} waiting workers, flat out for {} s after {} s of warm-up",
                int(CAPACITY_BACKLOG as f64),
                secs.as_secs(),
                WARM_UP.as_secs()
            )))
        }));
    }
    let capacity = out
        .iter()
        .filter(|m| m.missing.is_none())
        .filter_map(|m| m.rate)
        .min_by(f64::total_cmp);
    let Some(capacity) = capacity.filter(|_| out.iter().all(|m| m.missing.is_none())) else {
        for c in &soaked {
            out.push(
                Measurement::new("s", SOAK, c.name())
                    .missing("not run: the capacity of every soaked queue must be measured first"),
            );
        }
        return out;
    };
    let rate = LOAD * capacity;
    let secs = Duration::from_secs(ctx.cfg.scale.soak_secs);
    for c in &soaked {
        out.push(attempt("s", SOAK, c.name(), || {
            let (mut m, _) = traffic(ctx, admin, *c, Pace::Rate(rate), secs)?;
            m.offered_rate = Some(rate);
            Ok(m.note_first(format!(
                "{} jobs/s offered ({:.0}% of the lower capacity, {}/s) by {PRODUCERS} producers to {WORKERS} waiting workers for {} s after {} s of warm-up; 1 job in {FAIL_EVERY} fails once and is retried {} s later; finished jobs purged after {} s",
                int(rate),
                LOAD * 100.0,
                int(capacity),
                secs.as_secs(),
                WARM_UP.as_secs(),
                RETRY_IN.as_secs(),
                ctx.cfg.scale.soak_retention_secs
            )))
        }));
    }
    out
}

/// How producers pace themselves.
#[derive(Clone, Copy, Debug)]
pub enum Pace {
    /// Flat out while at most this many jobs are enqueued and not completed.
    Bounded(u64),
    /// This many jobs per second in all, on a fixed schedule (a producer that falls behind
    /// catches up at once, as real traffic would not wait).
    Rate(f64),
}

/// Pickup bookkeeping: when each job's enqueue committed, and picks that came before the
/// producer noted its commit (the claim can return before the producer's thread runs again).
#[derive(Default)]
struct Pickups {
    committed: HashMap<i64, Instant>,
    early: HashMap<i64, Instant>,
    /// Latencies of first pickups in the current interval, in ms.
    latencies: Vec<f64>,
}

impl Pickups {
    fn committed(&mut self, id: i64, at: Instant) {
        if let Some(picked) = self.early.remove(&id) {
            self.latencies
                .push(picked.saturating_duration_since(at).as_secs_f64() * 1000.0);
        } else {
            self.committed.insert(id, at);
        }
    }

    fn picked(&mut self, id: i64, at: Instant) {
        if let Some(committed) = self.committed.remove(&id) {
            self.latencies
                .push(at.saturating_duration_since(committed).as_secs_f64() * 1000.0);
        } else {
            self.early.insert(id, at);
        }
    }
}

/// Counters shared by producers, workers and the sampler.
#[derive(Default)]
struct Shared {
    enqueued: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    pickups: Mutex<Pickups>,
    /// Jobs failed once; their next pickup is the retry.
    failed_once: Mutex<HashSet<i64>>,
}

impl Shared {
    fn backlog(&self) -> u64 {
        self.enqueued
            .load(Ordering::Relaxed)
            .saturating_sub(self.completed.load(Ordering::Relaxed))
    }

    /// What a soak worker does with a claimed job: the first attempt of one job in
    /// [`FAIL_EVERY`] fails, everything else completes.
    fn handle(&self, w: &mut dyn Worker, jobs: &[Claimed]) -> Result<()> {
        let at = Instant::now();
        for job in jobs {
            let retry = self.failed_once.lock().unwrap().contains(&job.id);
            if retry {
                w.complete(std::slice::from_ref(job))?;
                self.completed.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.pickups.lock().unwrap().picked(job.id, at);
            if job.id % FAIL_EVERY == 0 {
                self.failed_once.lock().unwrap().insert(job.id);
                w.fail(job, RETRY_IN)?;
                self.failed.fetch_add(1, Ordering::Relaxed);
            } else {
                w.complete(std::slice::from_ref(job))?;
                self.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// Size and vacuum figures of a table at one moment.
struct TableStats {
    dead: i64,
    live: i64,
    autovacuums: i64,
    table_bytes: i64,
    index_bytes: Vec<(String, i64)>,
}

fn table_stats(admin: &mut Client, table: &str) -> Result<TableStats> {
    let row = admin.query_one(
        "SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0), coalesce(s.autovacuum_count, 0),
                pg_relation_size(r.relid)
           FROM (SELECT $1::text::regclass AS relid) r
           LEFT JOIN pg_stat_user_tables s ON s.relid = r.relid",
        &[&table],
    )?;
    let indexes = admin
        .query(
            "SELECT i.indexrelid::regclass::text, pg_relation_size(i.indexrelid)
               FROM pg_index i WHERE i.indrelid = $1::text::regclass ORDER BY 1",
            &[&table],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    Ok(TableStats {
        dead: row.get(0),
        live: row.get(1),
        autovacuums: row.get(2),
        table_bytes: row.get(3),
        index_bytes: indexes,
    })
}

/// Runs producers and waiting workers for `duration`, sampling every interval, then lets the
/// workers finish what was enqueued. Returns the whole run as a measurement (rate = jobs
/// completed per second in the window) and the samples (also in the measurement).
pub fn traffic(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    pace: Pace,
    duration: Duration,
) -> Result<(Measurement, Vec<Sample>)> {
    let scale = &ctx.cfg.scale;
    c.reset(admin)?;
    let keep = Duration::from_secs(scale.soak_retention_secs);
    let janitor_sql = c.set_retention(admin, keep)?;
    db::settle(admin, c.table())?;
    let variant = match pace {
        Pace::Bounded(_) => CAPACITY,
        Pace::Rate(_) => SOAK,
    };
    let interval = Duration::from_secs(scale.soak_sample_secs);
    let shared = Shared::default();
    let stop_producers = AtomicBool::new(false);
    let mut producers = sessions(ctx, c, PRODUCERS)?
        .into_iter()
        .map(|conn| c.producer(conn))
        .collect::<Result<Vec<_>>>()?;
    let mut janitor = match &janitor_sql {
        Some(sql) => {
            let mut conn = ctx.connect()?;
            let statement = conn.prepare(sql)?;
            Some((conn, statement))
        }
        None => None,
    };
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    let next = AtomicU64::new(0);
    let handle = |w: &mut dyn Worker, jobs: &[Claimed]| shared.handle(w, jobs);

    let outcome = with_waiting_workers(c, &mut workers, handle, || -> Result<_> {
        std::thread::scope(|s| -> Result<_> {
            // Let the workers settle into waiting before the first job.
            std::thread::sleep(Duration::from_secs(1));
            let start = Instant::now();
            let producer_threads: Vec<_> = producers
                .iter_mut()
                .map(|p| {
                    let (shared, next, stop) = (&shared, &next, &stop_producers);
                    s.spawn(move || -> Result<()> {
                        while !stop.load(Ordering::Relaxed) {
                            match pace {
                                Pace::Bounded(bound) => {
                                    if shared.backlog() >= bound {
                                        std::thread::sleep(Duration::from_millis(1));
                                        continue;
                                    }
                                }
                                Pace::Rate(rate) => {
                                    // Each producer takes the next slot of the schedule.
                                    let k = next.fetch_add(1, Ordering::Relaxed);
                                    let due = start + Duration::from_secs_f64(k as f64 / rate);
                                    if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                        std::thread::sleep(wait);
                                    }
                                    if stop.load(Ordering::Relaxed) {
                                        break;
                                    }
                                }
                            }
                            let k = shared.enqueued.load(Ordering::Relaxed);
                            let id = p.enqueue(&payload(k))?;
                            let at = Instant::now();
                            shared.enqueued.fetch_add(1, Ordering::Relaxed);
                            shared.pickups.lock().unwrap().committed(id, at);
                        }
                        Ok(())
                    })
                })
                .collect();

            // Let the table fill for a while and give the planner its statistics (as
            // autovacuum would within its first minute), so that no queue is measured with
            // plans made for the empty table the run starts from.
            std::thread::sleep(WARM_UP);
            admin.batch_execute(&format!("ANALYZE {}", c.table()))?;
            let (base_done, base_enq) = (
                shared.completed.load(Ordering::Relaxed),
                shared.enqueued.load(Ordering::Relaxed),
            );
            let base_autovacuums = table_stats(admin, c.table())?.autovacuums;
            let start = Instant::now();
            let window = Window::open(&ctx.server, admin)?;
            let mut samples = Vec::new();
            let mut per_sample: Vec<Vec<f64>> = Vec::new();
            let (mut last_done, mut last_enq) = (base_done, base_enq);
            let mut last_cpu = ctx.server.seconds();
            let mut last_at = Instant::now();
            let mut last_janitor = Instant::now();
            let mut next_sample = start + interval;
            let end = start + duration;
            while Instant::now() < end {
                if producer_threads.iter().any(|t| t.is_finished()) {
                    break; // a producer failed: stop and report its error below
                }
                if let Some((conn, statement)) = janitor.as_mut() {
                    if last_janitor.elapsed() >= Duration::from_secs(1) {
                        last_janitor = Instant::now();
                        conn.execute(&*statement, &[&keep.as_secs_f64()])?;
                    }
                }
                let now = Instant::now();
                if now < next_sample {
                    std::thread::sleep((next_sample - now).min(Duration::from_millis(100)));
                    continue;
                }
                next_sample += interval;
                let done = shared.completed.load(Ordering::Relaxed);
                let enq = shared.enqueued.load(Ordering::Relaxed);
                let mut latencies = std::mem::take(&mut shared.pickups.lock().unwrap().latencies);
                latencies.sort_by(f64::total_cmp);
                let stats = table_stats(admin, c.table())?;
                let cpu = ctx.server.seconds();
                let secs = last_at.elapsed().as_secs_f64();
                samples.push(Sample {
                    t: start.elapsed().as_secs_f64(),
                    rate: (done - last_done) as f64 / secs,
                    enqueued_rate: (enq - last_enq) as f64 / secs,
                    p50_ms: percentile(&latencies, 50.0),
                    p99_ms: percentile(&latencies, 99.0),
                    backlog: enq.saturating_sub(done),
                    dead_tuples: stats.dead,
                    live_tuples: stats.live,
                    autovacuums: stats.autovacuums - base_autovacuums,
                    table_bytes: stats.table_bytes,
                    index_bytes: stats.index_bytes,
                    server_cpu: (cpu - last_cpu) / secs,
                });
                per_sample.push(latencies);
                (last_done, last_enq, last_cpu, last_at) = (done, enq, cpu, Instant::now());
            }
            stop_producers.store(true, Ordering::Relaxed);
            for t in producer_threads {
                t.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))??;
            }
            let done = shared.completed.load(Ordering::Relaxed) - base_done;
            let span = window.close(&ctx.server, admin, 0.0)?;
            // The workers finish what is left (retries included) before they are stopped.
            let deadline = Instant::now() + Duration::from_secs(30);
            while shared.backlog() > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok((samples, per_sample, done, span))
        })
    })?;
    let (samples, per_sample, done, span) = outcome?;
    if let Some(sql) = &janitor_sql {
        admin.execute(sql.as_str(), &[&keep.as_secs_f64()])?;
    }
    let left = shared.backlog();
    c.reset(admin)?;
    let sorted = |parts: &[Vec<f64>]| {
        let mut all: Vec<f64> = parts.concat();
        all.sort_by(f64::total_cmp);
        all
    };
    let latencies = sorted(&per_sample);
    let tenth =
        ((per_sample.len() as f64 / 10.0).round() as usize).clamp(1, per_sample.len().max(1));
    let mut m = Measurement::new("s", variant, c.name()).throughput(done, &span);
    if !per_sample.is_empty() {
        m.first_p99_ms = percentile(&sorted(&per_sample[..tenth]), 99.0);
        m.last_p99_ms = percentile(&sorted(&per_sample[per_sample.len() - tenth..]), 99.0);
    }
    m.p50_ms = percentile(&latencies, 50.0);
    m.p99_ms = percentile(&latencies, 99.0);
    m.max_ms = latencies.last().copied();
    m.samples = samples.clone();
    if left > 0 {
        // Fell behind: the figures stand, and say so.
        m = m.note(format!(
            "{} enqueued jobs were still not completed 30 s after the end",
            int(left as f64)
        ));
    }
    Ok((m, samples))
}
