//! The scenarios of issue 4 §3 and what they share: the run context, the measurement record,
//! and the two building blocks every throughput scenario uses — producers that enqueue from
//! 8 sessions, and workers that burn a queue down from 8 sessions (or, for Graphile Worker, its
//! own worker process).

pub mod backlog;
pub mod burndown;
pub mod clients;
pub mod enqueue;
pub mod idempotency;
pub mod idle;
pub mod kinds;
pub mod latency;
pub mod long;
pub mod pgbench;
pub mod roles;
pub mod scaling;
pub mod schedules;
pub mod snapshot;
pub mod soak;
pub mod vacuum;
pub mod wal;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use postgres::{Client, NoTls};
use serde::{Deserialize, Serialize};

use crate::comparators::graphile::{wait_empty, GwOptions};
use crate::comparators::{payload, Claimed, Comparator, Worker};
use crate::config::{Config, PRODUCERS, WORKERS};
use crate::cpu::ServerCpu;
use crate::db::{self, Span, Window};

/// What every scenario needs.
pub struct Ctx {
    pub cfg: Config,
    pub server: ServerCpu,
}

impl Ctx {
    pub fn connect(&self) -> Result<Client> {
        db::connect(&self.cfg.dsn)
    }
}

/// One figure of the report: a scenario, a variant of it, a comparator, and what was measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Measurement {
    pub scenario: String,
    pub variant: String,
    pub comparator: String,
    pub jobs: u64,
    pub seconds: f64,
    /// Jobs per second.
    pub rate: Option<f64>,
    /// Server CPU seconds in the window (all processes of the bench cluster).
    pub server_cpu_s: Option<f64>,
    /// Load-generator CPU seconds in the window (this process, plus Node for Graphile).
    pub client_cpu_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub wal_bytes_per_job: Option<f64>,
    pub commits_per_job: Option<f64>,
    pub statements_per_s: Option<f64>,
    pub commits_per_s: Option<f64>,
    /// Claims that came back empty although due jobs were surely queued.
    pub empty_claims: Option<u64>,
    pub note: Option<String>,
    /// Why there is no figure: not applicable, or the error that stopped it.
    pub missing: Option<String>,
    /// Which repetition of its scenario this is (0 for scenarios that run once): the report
    /// averages repetitions and shows their spread as the run-to-run noise.
    #[serde(default)]
    pub repeat: u32,
    /// w: workers that burnt the queue down.
    #[serde(default)]
    pub workers: Option<u32>,
    /// k: mean time per claim.
    #[serde(default)]
    pub mean_ms: Option<f64>,
    /// v: dead row versions the updates made, and those VACUUM could not remove.
    #[serde(default)]
    pub dead_rows_made: Option<u64>,
    #[serde(default)]
    pub dead_rows_kept: Option<u64>,
    /// v: age of the oldest snapshot a worker session held when VACUUM ran, in seconds.
    #[serde(default)]
    pub oldest_snapshot_s: Option<f64>,
    /// s: jobs per second the producers were asked to enqueue.
    #[serde(default)]
    pub offered_rate: Option<f64>,
    /// s: pickup p99 over the soak's first and last tenth (a minute each at full scale).
    #[serde(default)]
    pub first_p99_ms: Option<f64>,
    #[serde(default)]
    pub last_p99_ms: Option<f64>,
    /// s: one sample per interval of the soak.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<soak::Sample>,
}

impl Measurement {
    pub fn new(scenario: &str, variant: &str, comparator: &str) -> Measurement {
        Measurement {
            scenario: scenario.into(),
            variant: variant.into(),
            comparator: comparator.into(),
            ..Measurement::default()
        }
    }

    /// A throughput figure: `jobs` done in the span.
    pub fn throughput(mut self, jobs: u64, span: &Span) -> Measurement {
        self.jobs = jobs;
        self.seconds = span.seconds;
        self.rate = Some(jobs as f64 / span.seconds.max(1e-9));
        self.server_cpu_s = Some(span.server_cpu);
        self.client_cpu_s = Some(span.client_cpu);
        self
    }

    /// A burn-down figure; empty claims are recorded for the queues claimed from here.
    pub fn burned(self, burned: &Burned, c: &dyn Comparator, span: &Span) -> Measurement {
        let mut m = self.throughput(burned.done, span);
        if c.external().is_none() {
            m.empty_claims = Some(burned.empty_claims);
        }
        m
    }

    pub fn note(mut self, note: impl Into<String>) -> Measurement {
        self.note = Some(note.into());
        self
    }

    /// Puts `note` in front of the note the measurement already has.
    pub fn note_first(mut self, note: impl Into<String>) -> Measurement {
        let note = note.into();
        self.note = Some(match self.note.take() {
            Some(old) => format!("{note}; {old}"),
            None => note,
        });
        self
    }

    pub fn missing(mut self, why: impl Into<String>) -> Measurement {
        self.missing = Some(why.into());
        self
    }

    /// Server CPU seconds per 1,000 jobs.
    pub fn server_cpu_per_1000(&self) -> Option<f64> {
        let cpu = self.server_cpu_s?;
        (self.jobs > 0).then(|| cpu * 1000.0 / self.jobs as f64)
    }

    pub fn client_cpu_per_1000(&self) -> Option<f64> {
        let cpu = self.client_cpu_s?;
        (self.jobs > 0).then(|| cpu * 1000.0 / self.jobs as f64)
    }
}

/// Runs one measurement, logging progress; an error becomes a measurement that says why it
/// is missing, so one failing comparator does not stop the suite.
pub fn attempt(
    scenario: &str,
    variant: &str,
    comparator: &str,
    body: impl FnOnce() -> Result<Measurement>,
) -> Measurement {
    let started = Instant::now();
    eprint!("  {scenario} · {variant} · {comparator} ... ");
    match body() {
        Ok(m) => {
            let mut shown = Vec::new();
            if let Some(rate) = m.rate {
                shown.push(format!("{rate:.0}/s"));
            }
            if let (Some(p50), Some(p99)) = (m.p50_ms, m.p99_ms) {
                shown.push(format!("p50 {p50:.2} ms, p99 {p99:.2} ms"));
            }
            if let Some(wal) = m.wal_bytes_per_job {
                shown.push(format!("{wal:.0} WAL bytes/job"));
            }
            if let (Some(kept), Some(made)) = (m.dead_rows_kept, m.dead_rows_made) {
                shown.push(format!("{kept} of {made} dead rows not removable"));
            }
            if let Some(mean) = m.mean_ms {
                shown.push(format!("mean {mean:.2} ms"));
            }
            if let Some(st) = m.statements_per_s {
                shown.push(format!("{st:.1} statements/s"));
            }
            if let Some(why) = &m.missing {
                shown.push(why.clone());
            }
            eprintln!(
                "{} ({:.0} s)",
                shown.join(", "),
                started.elapsed().as_secs_f64()
            );
            m
        }
        Err(e) => {
            eprintln!("FAILED: {e:#}");
            Measurement::new(scenario, variant, comparator).missing(format!("error: {e:#}"))
        }
    }
}

/// Empties the comparator's queue, loads `n` queued jobs, vacuums and checkpoints.
pub fn prepare_queued(admin: &mut Client, c: &dyn Comparator, n: u64) -> Result<()> {
    c.reset(admin)?;
    c.load_queued(admin, n)?;
    db::settle(admin, c.table())
}

/// Opens `n` sessions the way the comparator's producers and workers log in.
pub fn sessions(ctx: &Ctx, c: &dyn Comparator, n: usize) -> Result<Vec<Client>> {
    (0..n).map(|_| c.connect(&ctx.cfg)).collect()
}

/// Opens one worker per session.
pub fn connect_workers(ctx: &Ctx, c: &dyn Comparator, n: usize) -> Result<Vec<Box<dyn Worker>>> {
    sessions(ctx, c, n)?
        .into_iter()
        .map(|conn| c.worker(conn))
        .collect()
}

/// What [`burn`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Burned {
    pub done: u64,
    /// Claims that returned nothing while more jobs than the workers could hold at once were
    /// still to do: due jobs the claim should have found.
    pub empty_claims: u64,
}

/// A worker whose claim came back empty waits this long before it claims again. Spinning
/// instead would steal the 2 cores from the workers finishing the last jobs, and penalise
/// queues whose empty claims cost more; a real worker would back off far longer.
const EMPTY_BACKOFF: Duration = Duration::from_millis(1);

/// No completed job for this long means the queue lost jobs or wedged.
const STALL: Duration = Duration::from_secs(15);

/// Runs the workers on threads until `target` jobs are done. A claim that returns nothing is
/// retried after a short back-off (and counted when jobs were surely left), as a worker would
/// poll again.
pub fn burn(workers: &mut [Box<dyn Worker>], batch: i32, target: u64) -> Result<Burned> {
    let done = AtomicU64::new(0);
    let empty_claims = AtomicU64::new(0);
    let started = Instant::now();
    let last_progress_ms = AtomicU64::new(0);
    let in_hand = (workers.len() as u64) * batch.max(1) as u64;
    let outcomes: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                let (done, empty_claims, last_progress_ms) = (&done, &empty_claims, &last_progress_ms);
                s.spawn(move || -> Result<()> {
                    loop {
                        let so_far = done.load(Ordering::Relaxed);
                        if so_far >= target {
                            return Ok(());
                        }
                        let jobs = w.claim(batch)?;
                        if jobs.is_empty() {
                            if target - so_far > in_hand {
                                empty_claims.fetch_add(1, Ordering::Relaxed);
                            }
                            let now = started.elapsed().as_millis() as u64;
                            if now.saturating_sub(last_progress_ms.load(Ordering::Relaxed)) > STALL.as_millis() as u64 {
                                bail!(
                                    "no job completed for {STALL:?} with {} of {target} done: claims return nothing",
                                    done.load(Ordering::Relaxed)
                                );
                            }
                            std::thread::sleep(EMPTY_BACKOFF);
                            continue;
                        }
                        w.complete(&jobs)?;
                        done.fetch_add(jobs.len() as u64, Ordering::Relaxed);
                        last_progress_ms.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a worker thread panicked")))
            })
            .collect()
    });
    outcomes.into_iter().collect::<Result<()>>()?;
    Ok(Burned {
        done: done.into_inner(),
        empty_claims: empty_claims.into_inner(),
    })
}

/// Burns down an already loaded queue of `expected` jobs with 8 workers taking `batch` jobs
/// per claim, until all or `limit` jobs are done; returns what was done and the window.
pub fn drain(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    expected: u64,
    batch: i32,
    limit: Option<u64>,
) -> Result<(Burned, Span)> {
    if let Some(g) = c.external() {
        let target = limit.unwrap_or(expected);
        let opts = graphile_options(batch, WORKERS, target);
        let mut process = g.start(opts)?;
        process.wait_for("FIRST", Duration::from_secs(60))?;
        let node_cpu = process.cpu_seconds();
        let window = Window::open(&ctx.server, admin)?;
        process.wait_mark(target, Duration::from_secs(600 + target / 100))?;
        if limit.is_none() {
            wait_empty(admin, Duration::from_secs(60))?;
        }
        let span = window.close(&ctx.server, admin, process.cpu_seconds() - node_cpu)?;
        process.stop()?;
        let burned = Burned {
            done: target,
            empty_claims: 0,
        };
        return Ok((burned, span));
    }
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    let window = Window::open(&ctx.server, admin)?;
    let burned = burn(&mut workers, batch, limit.unwrap_or(expected))?;
    let span = window.close(&ctx.server, admin, 0.0)?;
    Ok((burned, span))
}

/// Graphile Worker's setting for a claim batch: its defaults for 1, its local queue and
/// batched completion otherwise.
pub fn graphile_options(batch: i32, concurrency: usize, mark_every: u64) -> GwOptions {
    if batch <= 1 {
        GwOptions::one_per_claim(concurrency, mark_every)
    } else {
        GwOptions::batched(concurrency, batch, mark_every)
    }
}

/// Enqueues from 8 sessions: `total` jobs, or as many as fit in `duration`; `batch` jobs per
/// call (1: jobs_enqueue and its likes, one transaction per job). Returns the jobs enqueued.
pub fn produce(
    ctx: &Ctx,
    c: &dyn Comparator,
    total: Option<u64>,
    duration: Option<Duration>,
    batch: usize,
) -> Result<u64> {
    let mut producers = sessions(ctx, c, PRODUCERS)?
        .into_iter()
        .map(|conn| c.producer(conn))
        .collect::<Result<Vec<_>>>()?;
    let deadline = duration.map(|d| Instant::now() + d);
    let next = AtomicU64::new(0);
    let outcomes: Vec<Result<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = producers
            .iter_mut()
            .map(|p| {
                let next = &next;
                s.spawn(move || -> Result<u64> {
                    let mut mine = 0;
                    loop {
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            return Ok(mine);
                        }
                        let first = next.fetch_add(batch as u64, Ordering::Relaxed);
                        let count = match total {
                            Some(t) if first >= t => return Ok(mine),
                            Some(t) => (t - first).min(batch as u64),
                            None => batch as u64,
                        };
                        if batch == 1 {
                            p.enqueue(&payload(first))?;
                        } else {
                            let payloads: Vec<_> = (first..first + count).map(payload).collect();
                            p.enqueue_batch(&payloads)?;
                        }
                        mine += count;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a producer thread panicked")))
            })
            .collect()
    });
    outcomes.into_iter().sum()
}

/// How long waiting worker number i waits (i × this) before its first wait, so that polling
/// workers poll evenly spread over their interval.
pub fn stagger(c: &dyn Comparator, workers: usize) -> Duration {
    c.poll_interval()
        .map_or(Duration::ZERO, |p| p / workers.max(1) as u32)
}

/// Percentile (0..=100) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    Some(sorted[rank.min(sorted.len() - 1)])
}

/// What waiting workers do with the jobs a claim brought: complete them.
pub fn complete(w: &mut dyn Worker, jobs: &[Claimed]) -> Result<()> {
    w.complete(jobs)
}

/// Runs `workers` in their queue's natural way of waiting for work (`wait_claim(1)`, then
/// `handle` what came, e.g. [`complete`]) on threads of their own, started `stagger` apart for
/// polling queues, while `body` runs. Then stops them, cancelling the statements they wait in
/// (or settle in), and returns what `body` returned.
pub fn with_waiting_workers<R>(
    c: &dyn Comparator,
    workers: &mut [Box<dyn Worker>],
    handle: impl Fn(&mut dyn Worker, &[Claimed]) -> Result<()> + Sync,
    body: impl FnOnce() -> R,
) -> Result<R> {
    let tokens: Vec<_> = workers.iter().map(|w| w.cancel_token()).collect();
    let stop = AtomicBool::new(false);
    let running = AtomicUsize::new(workers.len());
    let stagger = stagger(c, workers.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .enumerate()
            .map(|(i, w)| {
                let (stop, running, handle) = (&stop, &running, &handle);
                s.spawn(move || -> Result<()> {
                    std::thread::sleep(stagger * i as u32);
                    let outcome = (|| loop {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        let step = w.wait_claim(1).and_then(|jobs| handle(w.as_mut(), &jobs));
                        match step {
                            Ok(()) => {}
                            // Stopping cancels whatever statement the worker is in.
                            Err(e) if stop.load(Ordering::Relaxed) && db::is_cancel(&e) => {
                                return Ok(())
                            }
                            Err(e) => return Err(e),
                        }
                    })();
                    running.fetch_sub(1, Ordering::Relaxed);
                    outcome
                })
            })
            .collect();
        let result = body();
        stop.store(true, Ordering::Relaxed);
        while running.load(Ordering::Relaxed) > 0 {
            for token in &tokens {
                let _ = token.cancel_query(NoTls);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for h in handles {
            h.join()
                .map_err(|_| anyhow!("a worker thread panicked"))??;
        }
        Ok(result)
    })
}
