//! The scenarios and what they share: the list of them ([`ALL`]), the run context, and the
//! two building blocks every throughput scenario uses — producers that enqueue from 8
//! sessions, and workers that burn a queue down from 8 sessions (or, for Graphile Worker, its
//! own worker process). Each returns its figures as [`Measurement`]s; the report renders them.

pub mod backlog;
pub mod burndown;
pub mod clients;
pub mod enqueue;
pub mod flow;
pub mod horizon;
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
pub mod storage;
pub mod vacuum;
pub mod wal;
pub mod workflows;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use postgres::{Client, NoTls};

use crate::comparators::graphile::{wait_empty, GwOptions};
use crate::comparators::{payload, Claimed, Comparator, Producer, Worker};
use crate::config::{Config, PRODUCERS, WORKERS};
use crate::cpu::ServerCpu;
use crate::db::{self, Span, Window};
use crate::results::Measurement;

/// How a scenario runs over the queues of the run.
pub enum Runs {
    /// Once for each queue, `BENCH_REPEATS` times, every other time with the queues in reverse
    /// order, so that the report shows its run-to-run noise and no queue always runs first.
    EachQueueRepeated(fn(&Ctx, &mut Client, &dyn Comparator) -> Vec<Measurement>),
    /// Once for each queue.
    EachQueue(fn(&Ctx, &mut Client, &dyn Comparator) -> Vec<Measurement>),
    /// Once, given every queue of the run: the scenario picks those it measures (and repeats
    /// itself when it must).
    Once(fn(&Ctx, &mut Client, &[&dyn Comparator]) -> Vec<Measurement>),
}

/// A scenario: its letter in `BENCH_SCENARIOS` and in the report, its title, and how it runs.
pub struct Scenario {
    pub letter: char,
    pub title: &'static str,
    pub runs: Runs,
    /// The one queue the scenario measures, when it measures only that one: it is skipped
    /// when the run leaves that queue out (`BENCH_COMPARATORS`).
    pub only: Option<&'static str>,
}

const fn each(letter: char, title: &'static str, f: PerQueue) -> Scenario {
    Scenario {
        letter,
        title,
        runs: Runs::EachQueue(f),
        only: None,
    }
}

const fn repeated(letter: char, title: &'static str, f: PerQueue) -> Scenario {
    Scenario {
        letter,
        title,
        runs: Runs::EachQueueRepeated(f),
        only: None,
    }
}

const fn once(letter: char, title: &'static str, f: AllQueues) -> Scenario {
    Scenario {
        letter,
        title,
        runs: Runs::Once(f),
        only: None,
    }
}

const fn pg_jobs_only(letter: char, title: &'static str, f: AllQueues) -> Scenario {
    Scenario {
        letter,
        title,
        runs: Runs::Once(f),
        only: Some("pg_jobs"),
    }
}

type PerQueue = fn(&Ctx, &mut Client, &dyn Comparator) -> Vec<Measurement>;
type AllQueues = fn(&Ctx, &mut Client, &[&dyn Comparator]) -> Vec<Measurement>;

/// Every scenario, in the order a run takes them. A new scenario is a file of this folder with
/// a `run` function, its `pub mod` line above, and one line here.
pub const ALL: [Scenario; 21] = [
    once(
        'p',
        "pgbench: the machine's commit-rate ceiling",
        pgbench::run,
    ),
    repeated('a', "enqueue", enqueue::run),
    repeated('b', "burn-down", burndown::run),
    repeated('c', "pickup latency", latency::run),
    each('d', "backlog", backlog::run),
    each('e', "held snapshot", snapshot::run),
    each('f', "WAL and commits per job", wal::run),
    each('h', "long burn-down", long::run),
    each('k', "kinds-filtered claims", kinds::run),
    each('w', "scaling curve", scaling::run),
    pg_jobs_only('r', "roles and tenants cost", roles::run),
    once('g', "idle", idle::run),
    once('l', "client libraries", clients::run),
    once('i', "idempotency records", idempotency::run),
    once('v', "dead rows held back while workers wait", vacuum::run),
    pg_jobs_only(
        'o',
        "a transaction held open under steady traffic",
        horizon::run,
    ),
    pg_jobs_only('t', "schedules", schedules::run),
    pg_jobs_only('u', "flow control", flow::run),
    once('s', "soak", soak::run),
    pg_jobs_only('y', "storage over a long steady run", storage::run),
    pg_jobs_only('j', "workflows: fan-in, chains and signals", workflows::run),
];

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

impl Burned {
    /// The figure of a burn-down: its jobs in the span, and the empty claims of the queues
    /// claimed from here (an external worker process does not tell).
    pub fn measurement(
        &self,
        scenario: &str,
        variant: &str,
        c: &dyn Comparator,
        span: &Span,
    ) -> Measurement {
        let mut m = Measurement::new(scenario, variant, c.name()).throughput(self.done, span);
        if c.external().is_none() {
            m.empty_claims = Some(self.empty_claims);
        }
        m
    }
}

/// A worker whose claim came back empty waits this long before it claims again. Spinning
/// instead would steal the 2 cores from the workers finishing the last jobs, and penalise
/// queues whose empty claims cost more; a real worker would back off far longer.
const EMPTY_BACKOFF: Duration = Duration::from_millis(1);

/// No completed job for this long means the queue lost jobs or wedged.
const STALL: Duration = Duration::from_secs(15);

/// How the workers of a burn-down settle what they claimed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settle {
    /// A claim in one transaction, the complete in another: two commits per claim.
    Apart,
    /// The complete of what a worker finished and the claim of its next jobs in one call and
    /// one transaction ([`Worker::complete_and_claim`]): one commit per claim. A worker with
    /// nothing in hand claims on its own.
    WithNextClaim,
}

/// Runs the workers on threads until `target` jobs are done. A claim that returns nothing is
/// retried after a short back-off (and counted when jobs were surely left), as a worker would
/// poll again.
pub fn burn(workers: &mut [Box<dyn Worker>], batch: i32, target: u64) -> Result<Burned> {
    burn_settling(workers, batch, target, Settle::Apart)
}

/// [`burn`] whose workers settle as `settle` says.
pub fn burn_settling(
    workers: &mut [Box<dyn Worker>],
    batch: i32,
    target: u64,
    settle: Settle,
) -> Result<Burned> {
    let done = AtomicU64::new(0);
    let empty_claims = AtomicU64::new(0);
    let started = Instant::now();
    let last_progress_ms = AtomicU64::new(0);
    let in_hand = (workers.len() as u64) * batch.max(1) as u64;
    // A claim that brought nothing: counted when jobs were surely left; an error when nothing
    // was completed for too long.
    let came_back_empty = |so_far: u64| -> Result<()> {
        if target.saturating_sub(so_far) > in_hand {
            empty_claims.fetch_add(1, Ordering::Relaxed);
        }
        let now = started.elapsed().as_millis() as u64;
        if now.saturating_sub(last_progress_ms.load(Ordering::Relaxed)) > STALL.as_millis() as u64 {
            bail!(
                "no job completed for {STALL:?} with {} of {target} done: claims return nothing",
                done.load(Ordering::Relaxed)
            );
        }
        Ok(())
    };
    let completed = |n: usize| {
        done.fetch_add(n as u64, Ordering::Relaxed);
        last_progress_ms.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
    };
    let outcomes: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .map(|w| {
                let (done, came_back_empty, completed) = (&done, &came_back_empty, &completed);
                s.spawn(move || -> Result<()> {
                    let mut held: Vec<Claimed> = Vec::new();
                    loop {
                        if !held.is_empty() {
                            // Settle::WithNextClaim: finish what is in hand, take the next.
                            let next = w.complete_and_claim(&held, batch)?;
                            completed(held.len());
                            if next.is_empty() {
                                came_back_empty(done.load(Ordering::Relaxed))?;
                            }
                            held = next;
                            continue;
                        }
                        let so_far = done.load(Ordering::Relaxed);
                        if so_far >= target {
                            return Ok(());
                        }
                        let jobs = w.claim(batch)?;
                        if jobs.is_empty() {
                            came_back_empty(so_far)?;
                            std::thread::sleep(EMPTY_BACKOFF);
                            continue;
                        }
                        match settle {
                            Settle::Apart => {
                                w.complete(&jobs)?;
                                completed(jobs.len());
                            }
                            Settle::WithNextClaim => held = jobs,
                        }
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
    drain_settling(ctx, admin, c, expected, batch, limit, Settle::Apart)
}

/// [`drain`] whose workers settle as `settle` says (only queues consumed from this process).
pub fn drain_settling(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    expected: u64,
    batch: i32,
    limit: Option<u64>,
    settle: Settle,
) -> Result<(Burned, Span)> {
    if settle == Settle::WithNextClaim && !c.one_commit_per_job() {
        bail!("{} cannot complete and claim in one transaction", c.name());
    }
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
    let burned = burn_settling(&mut workers, batch, limit.unwrap_or(expected), settle)?;
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
    produce_with(ctx, c, &|conn| c.producer(conn), total, duration, batch)
}

/// [`produce`] with producers made by `make` over each of the comparator's sessions: the same
/// work enqueued through other statements (for instance with unique keys).
pub fn produce_with(
    ctx: &Ctx,
    c: &dyn Comparator,
    make: &dyn Fn(Client) -> Result<Box<dyn Producer>>,
    total: Option<u64>,
    duration: Option<Duration>,
    batch: usize,
) -> Result<u64> {
    let mut producers = sessions(ctx, c, PRODUCERS)?
        .into_iter()
        .map(make)
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
    with_waiting_workers_n(c, workers, 1, handle, body)
}

/// [`with_waiting_workers`] whose workers ask for up to `n` jobs per waiting claim.
pub fn with_waiting_workers_n<R>(
    c: &dyn Comparator,
    workers: &mut [Box<dyn Worker>],
    n: i32,
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
                        let step = w.wait_claim(n).and_then(|jobs| handle(w.as_mut(), &jobs));
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
