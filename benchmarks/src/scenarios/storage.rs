//! y. Storage proportional to live work (issue 39): how big `jobs.job` and its indexes grow
//! over a long run at a steady rate, against their size holding the live jobs alone, and
//! whether the run's throughput holds up as it grows.
//!
//! The baseline: the empty queue loaded with 100,000 queued jobs, vacuumed; its heap
//! (`pg_table_size`: heap, TOAST, free-space and visibility maps) and index bytes. Then the
//! queue is emptied again and 2,000,000 jobs run through it at a steady 5,000 jobs/s: 8
//! producers enqueue 100 jobs per call on one schedule, 8 workers wait in `jobs_claim(n =>
//! 100, wait => ...)` and complete what they claim in one batched call; finished jobs are kept
//! for the queue's retention (7 days, so none is purged in the run) and autovacuum runs at its
//! defaults. The sizes are sampled through the run; the figure is their largest ÷ the
//! baseline. Throughput: jobs completed per second in the run's first window and its last one
//! (a minute each, or a fifth of a shorter run) while the producers still ran.
//!
//! The small scale runs 200,000 jobs against 10,000 live (the same proportion);
//! `BENCH_STORAGE_JOBS`, `BENCH_STORAGE_LIVE` and `BENCH_STORAGE_RATE` set the sizes. The
//! report says when a run was not the full size.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use postgres::Client;

use super::{attempt, connect_workers, sessions, with_waiting_workers_n, Ctx};
use crate::comparators::{payload, Claimed, Comparator, Worker};
use crate::config::{Scale, PRODUCERS, WORKERS};
use crate::db::{self, Window};
use crate::format::int;
use crate::results::{Measurement, Storage};

pub const SCENARIO: &str = "y";
pub const VARIANT: &str = "steady run";
/// Jobs per enqueue call and per claim.
pub const BATCH: usize = 100;
/// The longest first and last window.
const WINDOW: Duration = Duration::from_secs(60);
/// Samples per window.
const SAMPLES_PER_WINDOW: u32 = 6;
/// How long the workers get to finish what was enqueued before they are stopped.
const DRAIN: Duration = Duration::from_secs(60);

/// Runs the scenario on pg_jobs.
pub fn run(ctx: &Ctx, admin: &mut Client, queues: &[&dyn Comparator]) -> Vec<Measurement> {
    let Some(c) = queues.iter().copied().find(|c| c.name() == "pg_jobs") else {
        return Vec::new();
    };
    vec![attempt(SCENARIO, VARIANT, c.name(), || {
        measure(ctx, admin, c)
    })]
}

/// Whether the scale's sizes are issue 39's: 2,000,000 jobs against 100,000 live.
pub fn full_size(scale: &Scale) -> bool {
    scale.storage_jobs >= 2_000_000 && scale.storage_live >= 100_000
}

/// The heap and index bytes of `table`, with its autovacuum count and dead tuples.
fn sizes(admin: &mut Client, table: &str) -> Result<(i64, i64, i64, i64)> {
    let row = admin.query_one(
        "SELECT pg_table_size($1::text::regclass), pg_indexes_size($1::text::regclass),
                coalesce((SELECT autovacuum_count FROM pg_stat_user_tables
                           WHERE relid = $1::text::regclass), 0),
                coalesce((SELECT n_dead_tup FROM pg_stat_user_tables
                           WHERE relid = $1::text::regclass), 0)",
        &[&table],
    )?;
    Ok((row.get(0), row.get(1), row.get(2), row.get(3)))
}

/// The run's length at the scale's rate, its first and last windows' length, and how often it
/// is sampled.
fn timing(scale: &Scale) -> (Duration, Duration, Duration) {
    let run = Duration::from_secs_f64(scale.storage_jobs as f64 / scale.storage_rate);
    let window = WINDOW.min(run / 5).max(Duration::from_secs(1));
    (run, window, window / SAMPLES_PER_WINDOW)
}

/// Jobs per second between sample `a` and sample `b` of (seconds since the start, jobs
/// counted).
fn rate(samples: &[(f64, u64)], a: usize, b: usize) -> f64 {
    let (ta, ca) = samples[a];
    let (tb, cb) = samples[b];
    if tb > ta {
        (cb - ca) as f64 / (tb - ta)
    } else {
        0.0
    }
}

fn measure(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Measurement> {
    let scale = &ctx.cfg.scale;
    let (n, live, offered) = (scale.storage_jobs, scale.storage_live, scale.storage_rate);
    let (length, window, interval) = timing(scale);
    let table = c.table();

    // The baseline: the live jobs alone.
    c.reset(admin)?;
    c.load_queued(admin, live)?;
    db::settle(admin, table)?;
    let (baseline_table, baseline_index, _, _) = sizes(admin, table)?;
    c.reset(admin)?;
    db::settle(admin, table)?;
    let (_, _, base_autovacuums, _) = sizes(admin, table)?;

    let mut producers = sessions(ctx, c, PRODUCERS)?
        .into_iter()
        .map(|conn| c.producer(conn))
        .collect::<Result<Vec<_>>>()?;
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    let enqueued = AtomicU64::new(0);
    let completed = AtomicU64::new(0);
    let next = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let handle = |w: &mut dyn Worker, jobs: &[Claimed]| -> Result<()> {
        w.complete(jobs)?;
        completed.fetch_add(jobs.len() as u64, Ordering::Relaxed);
        Ok(())
    };
    let outcome = with_waiting_workers_n(c, &mut workers, BATCH as i32, handle, || {
        std::thread::scope(|s| -> Result<_> {
            // Let every worker settle into waiting before the first job.
            std::thread::sleep(Duration::from_secs(1));
            let start = Instant::now();
            let window_open = Window::open(&ctx.server, admin)?;
            let threads: Vec<_> = producers
                .iter_mut()
                .map(|p| {
                    let (enqueued, next, stop) = (&enqueued, &next, &stop);
                    s.spawn(move || -> Result<()> {
                        loop {
                            // Each producer takes the next batch of the one schedule.
                            let first = next.fetch_add(BATCH as u64, Ordering::Relaxed);
                            if first >= n || stop.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                            let due = start + Duration::from_secs_f64(first as f64 / offered);
                            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(wait);
                            }
                            let last = (first + BATCH as u64).min(n);
                            let payloads: Vec<_> = (first..last).map(payload).collect();
                            p.enqueue_batch(&payloads)?;
                            enqueued.fetch_add(last - first, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            let sampled = (|| -> Result<_> {
                // (seconds, jobs completed) and (seconds, jobs enqueued) at each sample.
                let mut samples: Vec<(f64, u64)> = vec![(0.0, 0)];
                let mut sent: Vec<(f64, u64)> = vec![(0.0, 0)];
                let (mut max_table, mut max_index) = (0i64, 0i64);
                let mut next_sample = start + interval;
                // A run that falls far behind its schedule is cut off at three times its
                // length: the figures say how far it got.
                let cutoff = start + length * 3 + Duration::from_secs(10);
                loop {
                    let producing = threads.iter().any(|t| !t.is_finished());
                    let now = Instant::now();
                    if producing && now < next_sample && now < cutoff {
                        std::thread::sleep((next_sample - now).min(Duration::from_millis(100)));
                        continue;
                    }
                    next_sample += interval;
                    let (t, i, _, _) = sizes(admin, table)?;
                    (max_table, max_index) = (max_table.max(t), max_index.max(i));
                    let t = start.elapsed().as_secs_f64();
                    samples.push((t, completed.load(Ordering::Relaxed)));
                    sent.push((t, enqueued.load(Ordering::Relaxed)));
                    if !producing || now >= cutoff {
                        return Ok((samples, sent, max_table, max_index));
                    }
                }
            })();
            stop.store(true, Ordering::Relaxed);
            for t in threads {
                t.join()
                    .map_err(|_| anyhow!("a producer thread panicked"))??;
            }
            let (samples, sent, max_table, max_index) = sampled?;
            let done = completed.load(Ordering::Relaxed);
            let span = window_open.close(&ctx.server, admin, 0.0)?;
            // The workers finish what is left before they are stopped.
            let deadline = Instant::now() + DRAIN;
            while completed.load(Ordering::Relaxed) < enqueued.load(Ordering::Relaxed)
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok((samples, sent, max_table, max_index, done, span))
        })
    })?;
    let (samples, sent_samples, max_table, max_index, done, span) = outcome?;
    let (end_table, end_index, autovacuums, dead) = sizes(admin, table)?;
    let (sent, finished) = (
        enqueued.load(Ordering::Relaxed),
        completed.load(Ordering::Relaxed),
    );
    c.reset(admin)?;
    if samples.len() < 3 {
        bail!("the run was too short to compare its first window with its last");
    }
    // Windows of as many samples as fit in `window`, at most half the run each.
    let k = ((window.as_secs_f64() / interval.as_secs_f64()).round() as usize)
        .clamp(1, (samples.len() - 1) / 2);
    let last = samples.len() - 1;
    let storage = Storage {
        run_jobs: n,
        live,
        baseline_table_bytes: baseline_table,
        baseline_index_bytes: baseline_index,
        max_table_bytes: max_table.max(end_table),
        max_index_bytes: max_index.max(end_index),
        end_table_bytes: end_table,
        end_index_bytes: end_index,
        first_rate: rate(&samples, 0, k),
        last_rate: rate(&samples, last - k, last),
        window_secs: samples[k].0 - samples[0].0,
        first_enqueued_rate: rate(&sent_samples, 0, k),
        last_enqueued_rate: rate(&sent_samples, last - k, last),
        autovacuums: autovacuums - base_autovacuums,
        end_dead_tuples: dead,
        full_size: full_size(scale),
    };
    let mut m = Measurement::new(SCENARIO, VARIANT, c.name()).throughput(done, &span);
    m.offered_rate = Some(offered);
    m.storage = Some(storage);
    let behind = if finished < sent || sent < n {
        format!(
            "; {} of {} jobs enqueued, {} completed {} s after the producers stopped",
            int(sent as f64),
            int(n as f64),
            int(finished as f64),
            DRAIN.as_secs()
        )
    } else {
        String::new()
    };
    Ok(m.note(format!(
        "{} jobs at {} jobs/s offered by {PRODUCERS} producers ({BATCH} per call) to {WORKERS} workers waiting in jobs_claim(n => {BATCH}, wait => ...) and completing in one batched call; finished jobs kept (7-day retention), autovacuum at its defaults{behind}",
        int(n as f64),
        int(offered)
    )))
}

#[cfg(test)]
mod tests {
    use super::{full_size, rate, timing};
    use crate::config::Scale;
    use std::time::Duration;

    #[test]
    fn the_full_scale_runs_two_million_jobs_with_minute_windows() {
        let full = Scale::full();
        assert!(full_size(&full));
        assert!(!full_size(&Scale::small()));
        let (run, window, interval) = timing(&full);
        assert_eq!(run, Duration::from_secs(400));
        assert_eq!(window, Duration::from_secs(60));
        assert_eq!(interval, Duration::from_secs(10));
        // A short run's windows are a fifth of it.
        let (run, window, _) = timing(&Scale::small());
        assert_eq!(
            (run, window),
            (Duration::from_secs(40), Duration::from_secs(8))
        );
    }

    #[test]
    fn a_window_rate_is_the_jobs_completed_between_its_samples() {
        let samples = [(0.0, 0), (10.0, 50_000), (20.0, 90_000)];
        assert_eq!(rate(&samples, 0, 1), 5_000.0);
        assert_eq!(rate(&samples, 1, 2), 4_000.0);
        assert_eq!(rate(&samples, 2, 2), 0.0);
    }
}
