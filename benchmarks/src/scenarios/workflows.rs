//! j, workflows (issue 37, "Measured"), pg_jobs only, in one run:
//!
//! * fan-in: `fanin_parents` queued parents burnt down by 8 workers claiming 100 at a time
//!   (`jobs_claim(n => 100, wait => ...)`, so a worker that runs out of jobs sleeps) and
//!   completing each claim's jobs in one `jobs_complete_batch`, once without a child and once
//!   with one child enqueued `after` all of them into a queue of its own, on which one worker
//!   waits in `jobs_claim(wait => ...)`: the two rates, and how long after the last parent's
//!   commit the waiting worker had the child; `fanin_rounds` rounds, the sides in alternating
//!   order;
//! * a chain of `chain_steps` jobs, each `after` the one before, run by 8 workers waiting in
//!   `jobs_claim(n => 1, wait => ...)`: from a step's commit to the next step in a waiting
//!   worker's hands. The worker that settled a step waits until another one has the next, so
//!   every handoff is a wake-up of a sleeping worker, not the settler's own next claim;
//! * signals: a job's handler awaits a signal (`jobs_await`); once the job waits and all 8
//!   workers sleep in their claims, `jobs_signal` commits: from that commit to the job in a
//!   waiting worker's hands.
//!
//! Every time is the server's clock (`clock_timestamp()`), so neither side's client wake-up
//! counts: a settle or signal is sent as `BEGIN; ...; COMMIT; SELECT clock_timestamp()` in one
//! simple-protocol message, which reads the clock right after the commit, before the client
//! hears of it; a claim reads it in its own statement, once it has the job.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use postgres::{Client, NoTls, SimpleQueryMessage, Statement};
use uuid::Uuid;

use super::{attempt, percentile, Ctx};
use crate::comparators::pg_jobs::{PgJobs, QUEUE};
use crate::comparators::Comparator;
use crate::config::WORKERS;
use crate::db::{self, Window};
use crate::format::{int, ms};
use crate::results::Measurement;

/// The scenario's letter in `BENCH_SCENARIOS` and in the report.
pub const SCENARIO: &str = "j";
/// The fan-in's burn-down and its two sides.
pub const FAN_IN: &str = "fan-in: parents burnt down, 8 workers claiming 100";
pub const NO_CHILD: &str = "no child";
pub const ONE_CHILD: &str = "one child after all of them";
/// The latencies, each of the one side `pg_jobs`.
pub const CHILD: &str = "fan-in: the last parent's commit → the child in a waiting worker's hands";
pub const CHAIN: &str = "chain: a step's commit → the next step in a waiting worker's hands";
pub const SIGNAL: &str = "jobs_signal's commit → the awaiting job in a waiting worker's hands";
pub const SIDE: &str = "pg_jobs";
/// The targets of issue 37: the parents with a child burn down at this fraction of the rate
/// without one or more; the latencies' percentiles in milliseconds.
pub const FAN_IN_TARGET: f64 = 0.8;
pub const CHILD_P99_MS: f64 = 5.0;
pub const CHAIN_P50_MS: f64 = 1.0;
pub const CHAIN_P99_MS: f64 = 3.0;
pub const SIGNAL_P50_MS: f64 = 1.0;

/// The queue of the fan-in's child: its waiting worker is not one of the parents' workers.
const CHILD_QUEUE: &str = "bench_merge";
/// A waiting claim's wait: longer than anything it waits for here.
const WAIT: &str = "60 seconds";
/// Jobs per claim of the fan-in's workers.
const CLAIM: i32 = 100;
/// The server's clock in microseconds since the epoch.
const NOW_US: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";
/// No progress for this long means a job was never handed out.
const STALL: Duration = Duration::from_secs(15);

/// Runs the fan-in's rounds, the chain and the signals, and leaves the queues empty.
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let c = PgJobs::new(SIDE, WAIT);
    let mut out = Vec::new();
    let rounds = ctx.cfg.scale.fanin_rounds as u32;
    let mut child_ms = Vec::new();
    for round in 0..rounds {
        eprintln!("  (fan-in round {} of {rounds})", round + 1);
        // Every other round takes the sides in reverse order, so neither always runs first.
        let sides = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with_child in sides {
            let side = if with_child { ONE_CHILD } else { NO_CHILD };
            let mut m = attempt(SCENARIO, FAN_IN, side, || {
                let (m, latency) = fan_in(ctx, admin, &c, with_child)?;
                child_ms.extend(latency);
                Ok(m)
            });
            m.repeat = round;
            out.push(m);
        }
    }
    let parents = int(ctx.cfg.scale.fanin_parents as f64);
    out.push(attempt(SCENARIO, CHILD, SIDE, || {
        ensure!(!child_ms.is_empty(), "no round measured the child");
        let shown: Vec<String> = child_ms.iter().map(|v| ms(*v)).collect();
        Ok(latencies(CHILD, &child_ms).note(format!(
            "{} rounds of {parents} parents, one figure each: {}; the child in a queue of its \
             own, one worker waiting on it in jobs_claim(n => 1, wait => '{WAIT}')",
            child_ms.len(),
            shown.join(", ")
        )))
    }));
    out.push(attempt(SCENARIO, CHAIN, SIDE, || chain(ctx, admin, &c)));
    out.push(attempt(SCENARIO, SIGNAL, SIDE, || signals(ctx, admin, &c)));
    if let Err(e) = clear(admin, &c).and_then(|()| drop_child_queue(admin)) {
        eprintln!("  {SCENARIO}: could not empty the queues: {e:#}");
    }
    out
}

/// A latency figure from samples in milliseconds: p50, p99 and max.
fn latencies(variant: &str, samples: &[f64]) -> Measurement {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut m = Measurement::new(SCENARIO, variant, SIDE);
    m.jobs = sorted.len() as u64;
    m.p50_ms = percentile(&sorted, 50.0);
    m.p99_ms = percentile(&sorted, 99.0);
    m.max_ms = sorted.last().copied();
    m
}

/// Milliseconds from `from` to `to`, both the server's clock in microseconds. A claim may read
/// the clock a little before the settler reads it after its commit (both run on the server's
/// two cores at once): that handoff took no time after the commit, and counts 0.
fn elapsed_ms(from: i64, to: i64) -> f64 {
    ((to - from) as f64 / 1000.0).max(0.0)
}

/// Empties the bench queue and the workflow tables (the comparator's reset empties only
/// `jobs.job`), and makes the child's queue afresh.
fn clear(admin: &mut Client, c: &PgJobs) -> Result<()> {
    c.reset(admin)?;
    drop_child_queue(admin)?;
    admin.batch_execute(&format!(
        "TRUNCATE jobs.job_dependency, jobs.job_await, jobs.signal;
         SELECT jobs_create_queue('{CHILD_QUEUE}', retention => '7 days')"
    ))?;
    Ok(())
}

fn drop_child_queue(admin: &mut Client) -> Result<()> {
    admin.batch_execute(&format!(
        "DELETE FROM jobs.job WHERE queue = '{CHILD_QUEUE}';
         SELECT jobs_drop_queue(name) FROM jobs.queue WHERE name = '{CHILD_QUEUE}'"
    ))?;
    Ok(())
}

/// A session of pg_jobs's workers (the `jobs_worker` role), named so that `pg_stat_activity`
/// tells when it sleeps in a waiting claim, with its statements prepared.
struct Session {
    conn: Client,
    /// The claim: id, lease, whether the job carries a signal, the server's clock.
    claim: Statement,
    /// `jobs_await($1 id, $2 lease, $3 signal)`.
    await_signal: Statement,
    /// `jobs_complete($1 id, $2 lease)`.
    complete: Statement,
}

impl Session {
    /// A session named `name` whose claim takes `n` jobs of `queue`, waiting when `wait`.
    fn open(ctx: &Ctx, c: &PgJobs, name: &str, queue: &str, n: i32, wait: bool) -> Result<Self> {
        let mut conn = c.connect(&ctx.cfg)?;
        conn.batch_execute(&format!("SET application_name = '{name}'"))?;
        let wait = if wait {
            format!(", wait => '{WAIT}'")
        } else {
            String::new()
        };
        let claim = conn.prepare(&format!(
            "SELECT id, lease, signal IS NOT NULL, {NOW_US}
               FROM jobs_claim('{queue}', n => {n}{wait})"
        ))?;
        let await_signal = conn.prepare("SELECT jobs_await($1::bigint, $2::uuid, $3::text)")?;
        let complete = conn.prepare("SELECT jobs_complete($1::bigint, $2::uuid)")?;
        Ok(Session {
            conn,
            claim,
            await_signal,
            complete,
        })
    }

    fn open_many(
        ctx: &Ctx,
        c: &PgJobs,
        name: &str,
        queue: &str,
        n: i32,
        wait: bool,
    ) -> Result<Vec<Self>> {
        (0..WORKERS)
            .map(|_| Session::open(ctx, c, name, queue, n, wait))
            .collect()
    }

    /// Claims: (id, lease, signalled, the server's clock once the claim had the job).
    fn claim(&mut self) -> Result<Vec<(i64, Uuid, bool, i64)>> {
        Ok(self
            .conn
            .query(&self.claim, &[])?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect())
    }

    fn complete(&mut self, id: i64, lease: Uuid) -> Result<()> {
        let outcome: String = self.conn.query_one(&self.complete, &[&id, &lease])?.get(0);
        ensure!(
            outcome == "succeeded",
            "jobs_complete answered {outcome:?} for job {id}"
        );
        Ok(())
    }
}

/// The rows of a simple-protocol message's statements, in order.
fn simple_rows(conn: &mut Client, sql: &str) -> Result<Vec<postgres::SimpleQueryRow>> {
    Ok(conn
        .simple_query(sql)?
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .collect())
}

/// The first column of a simple-protocol row, as a number.
fn number(row: &postgres::SimpleQueryRow) -> Result<i64> {
    let text = row.get(0).context("a NULL where a number was expected")?;
    text.parse()
        .with_context(|| format!("{text:?} is not a number"))
}

/// Runs `call` (a statement answering one number) in a transaction of its own and returns its
/// answer and the server's clock right after the commit: the clock is read in the same message
/// as the COMMIT, before the client hears of it.
fn committed(conn: &mut Client, call: &str) -> Result<(i64, i64)> {
    let rows = simple_rows(conn, &format!("BEGIN; {call}; COMMIT; SELECT {NOW_US}"))?;
    ensure!(
        rows.len() == 2,
        "expected two rows from {call:?}, got {}",
        rows.len()
    );
    Ok((number(&rows[0])?, number(&rows[1])?))
}

/// Completes `jobs` (one `jobs_complete`, or one `jobs_complete_batch` for several) in a
/// transaction of its own; returns the server's clock right after the commit.
fn settle(conn: &mut Client, jobs: &[(i64, Uuid)]) -> Result<i64> {
    let call = if let [(id, lease)] = jobs {
        format!("SELECT (jobs_complete({id}, '{lease}') = 'succeeded')::int")
    } else {
        let ids: Vec<String> = jobs.iter().map(|j| j.0.to_string()).collect();
        let leases: Vec<String> = jobs.iter().map(|j| j.1.to_string()).collect();
        format!(
            "SELECT count(*) FILTER (WHERE outcome = 'succeeded')
               FROM jobs_complete_batch('{{{}}}'::bigint[], '{{{}}}'::uuid[])",
            ids.join(","),
            leases.join(",")
        )
    };
    let (settled, at) = committed(conn, &call)?;
    ensure!(
        settled == jobs.len() as i64,
        "{settled} of {} jobs were completed: a lease was not current",
        jobs.len()
    );
    Ok(at)
}

/// Waits until `ready` (a query answering one boolean) holds, checking every millisecond.
fn wait_until(admin: &mut Client, ready: &str, what: &str) -> Result<()> {
    let started = Instant::now();
    loop {
        if admin.query_one(ready, &[])?.get::<_, bool>(0) {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(10) {
            bail!("{what} did not happen within 10 s");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A query that holds when `n` sessions named `name` sleep in a waiting claim.
fn asleep(name: &str, n: usize) -> String {
    format!(
        "SELECT count(*) = {n} FROM pg_stat_activity
          WHERE application_name = '{name}' AND wait_event_type = 'Extension'"
    )
}

/// A count that only grows, which threads wait for without spinning.
#[derive(Default)]
struct Progress {
    value: Mutex<usize>,
    grew: Condvar,
}

impl Progress {
    /// Raises the count to `v` (if below) and wakes the waiters.
    fn reach(&self, v: usize) {
        let mut value = self.value.lock().unwrap();
        if *value < v {
            *value = v;
            self.grew.notify_all();
        }
    }

    /// Waits until the count is `v` or more, or `stop` is set.
    fn wait_for(&self, v: usize, stop: &AtomicBool) {
        let mut value = self.value.lock().unwrap();
        while *value < v && !stop.load(Ordering::Relaxed) {
            value = self
                .grew
                .wait_timeout(value, Duration::from_millis(10))
                .unwrap()
                .0;
        }
    }
}

/// Runs `step` over and over on every session, each on a thread of its own, while `body`
/// runs; then stops them, cancelling the statement each is in (a waiting claim). A worker's
/// error comes first, then the body's.
fn with_sessions<R>(
    sessions: &mut [Session],
    step: impl Fn(&mut Session, &AtomicBool) -> Result<()> + Sync,
    body: impl FnOnce() -> Result<R>,
) -> Result<R> {
    let tokens: Vec<_> = sessions.iter().map(|s| s.conn.cancel_token()).collect();
    let stop = AtomicBool::new(false);
    let running = AtomicUsize::new(sessions.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter_mut()
            .map(|s| {
                let (stop, running, step) = (&stop, &running, &step);
                scope.spawn(move || -> Result<()> {
                    let outcome = (|| loop {
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        match step(s, stop) {
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
        result
    })
}

/// One side of a fan-in round: the parents loaded, with or without their child, burnt down.
/// Returns the burn-down's figure and, with the child, how long after the last parent's
/// commit the waiting worker had it (ms).
fn fan_in(
    ctx: &Ctx,
    admin: &mut Client,
    c: &PgJobs,
    with_child: bool,
) -> Result<(Measurement, Option<f64>)> {
    let n = ctx.cfg.scale.fanin_parents;
    clear(admin, c)?;
    c.load_queued(admin, n)?;
    let child: Option<i64> = if with_child {
        Some(
            admin
                .query_one(
                    &format!(
                        "SELECT jobs_enqueue('{CHILD_QUEUE}', '{{}}',
                             after => ARRAY(SELECT id FROM jobs.job WHERE queue = '{QUEUE}' ORDER BY id))"
                    ),
                    &[],
                )?
                .get(0),
        )
    } else {
        None
    };
    db::settle(admin, c.table())?;
    let mut workers = Session::open_many(ctx, c, "bench-j-fan-in", QUEUE, CLAIM, true)?;
    let waiter_name = "bench-j-child";
    let mut waiter = match child {
        Some(_) => Some(Session::open(ctx, c, waiter_name, CHILD_QUEUE, 1, true)?),
        None => None,
    };
    let got = AtomicI64::new(0);
    let (span, last_commit) = with_sessions(
        waiter
            .as_mut()
            .map(std::slice::from_mut)
            .unwrap_or_default(),
        |s, _| {
            for (id, lease, _, at) in s.claim()? {
                ensure!(Some(id) == child, "the child's queue handed out job {id}");
                s.complete(id, lease)?;
                got.store(at, Ordering::Relaxed);
            }
            Ok(())
        },
        || {
            if child.is_some() {
                wait_until(
                    admin,
                    &asleep(waiter_name, 1),
                    "the child's worker sleeping",
                )?;
            }
            let window = Window::open(&ctx.server, admin)?;
            let last = burn(&mut workers, n)?;
            let span = window.close(&ctx.server, admin, 0.0)?;
            if child.is_some() {
                let waited = Instant::now();
                while got.load(Ordering::Relaxed) == 0 {
                    ensure!(
                        waited.elapsed() < Duration::from_secs(10),
                        "the child was not in its worker's hands 10 s after the last parent's commit"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Ok((span, last))
        },
    )?;
    let finished: i64 = admin
        .query_one(
            "SELECT count(*) FROM jobs.job WHERE state = 'succeeded'",
            &[],
        )?
        .get(0);
    let expected = n as i64 + i64::from(child.is_some());
    ensure!(
        finished == expected,
        "{finished} jobs succeeded, expected {expected}"
    );
    let side = if with_child { ONE_CHILD } else { NO_CHILD };
    let m = Measurement::new(SCENARIO, FAN_IN, side)
        .throughput(n, &span)
        .note(format!(
            "{} parents{}; jobs_claim(n => {CLAIM}, wait => '{WAIT}'), each claim's jobs \
             completed by one jobs_complete_batch, committed on its own",
            int(n as f64),
            if with_child {
                format!(", one child in {CHILD_QUEUE} after all of them")
            } else {
                String::new()
            }
        ));
    let latency = child.map(|_| elapsed_ms(last_commit, got.load(Ordering::Relaxed)));
    Ok((m, latency))
}

/// The workers claim up to `CLAIM` jobs at a time until `n` are done, each claim's jobs
/// completed in one transaction; returns the server's clock after the last commit. Their
/// claims wait when nothing is claimable, as a pg_jobs worker's do, rather than poll as b's:
/// workers that ran out of jobs sleep instead of taking the two cores from the last settles
/// and from the child's worker.
fn burn(workers: &mut [Session], n: u64) -> Result<i64> {
    let done = AtomicU64::new(0);
    let last = AtomicI64::new(0);
    with_sessions(
        workers,
        |w, _| {
            let jobs: Vec<(i64, Uuid)> = w.claim()?.into_iter().map(|j| (j.0, j.1)).collect();
            if !jobs.is_empty() {
                last.fetch_max(settle(&mut w.conn, &jobs)?, Ordering::Relaxed);
                done.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            }
            Ok(())
        },
        || {
            let mut seen = (0, Instant::now());
            loop {
                let now = done.load(Ordering::Relaxed);
                if now >= n {
                    return Ok(last.load(Ordering::Relaxed));
                }
                if now != seen.0 {
                    seen = (now, Instant::now());
                }
                ensure!(
                    seen.1.elapsed() < STALL,
                    "no job completed for {STALL:?} with {now} of {n} done"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        },
    )
}

/// The chain: its steps enqueued in one transaction, each after the one before, then run by
/// 8 waiting workers; the handoffs' p50, p99 and max.
fn chain(ctx: &Ctx, admin: &mut Client, c: &PgJobs) -> Result<Measurement> {
    let steps = ctx.cfg.scale.chain_steps as usize;
    clear(admin, c)?;
    let ids: Vec<i64> = {
        let mut tx = admin.transaction()?;
        let next = tx.prepare(&format!(
            "SELECT jobs_enqueue('{QUEUE}', jsonb_build_object('step', $1::int),
                                 after => CASE WHEN $2::bigint IS NULL THEN NULL
                                               ELSE ARRAY[$2::bigint] END)"
        ))?;
        let mut ids = Vec::with_capacity(steps);
        for k in 0..steps {
            let id: i64 = tx.query_one(&next, &[&(k as i32), &ids.last()])?.get(0);
            ids.push(id);
        }
        tx.commit()?;
        ids
    };
    db::settle(admin, c.table())?;
    let step_of: HashMap<i64, usize> = ids.iter().enumerate().map(|(k, id)| (*id, k)).collect();
    let claimed_at: Vec<AtomicI64> = (0..steps).map(|_| AtomicI64::new(0)).collect();
    let committed_at: Vec<AtomicI64> = (0..steps).map(|_| AtomicI64::new(0)).collect();
    // Steps claimed so far (the highest claimed plus one), which the settler of the step
    // before waits for without spinning (it would take a core from the worker it waits for),
    // and steps settled.
    let claimed = Progress::default();
    let settled = AtomicUsize::new(0);
    let mut workers = Session::open_many(ctx, c, "bench-j-chain", QUEUE, 1, true)?;
    let started = Instant::now();
    with_sessions(
        &mut workers,
        |s, stop| {
            for (id, lease, _, at) in s.claim()? {
                let k = *step_of
                    .get(&id)
                    .ok_or_else(|| anyhow!("job {id} was claimed, not a step of the chain"))?;
                claimed_at[k].store(at, Ordering::Relaxed);
                claimed.reach(k + 1);
                committed_at[k].store(settle(&mut s.conn, &[(id, lease)])?, Ordering::Relaxed);
                settled.fetch_add(1, Ordering::Relaxed);
                // Until another worker has the next step: each handoff is a wake-up.
                if k + 1 < steps {
                    claimed.wait_for(k + 2, stop);
                }
            }
            Ok(())
        },
        || {
            let mut last = (0, Instant::now());
            loop {
                let now = settled.load(Ordering::Relaxed);
                if now == steps {
                    return Ok(());
                }
                if now != last.0 {
                    last = (now, Instant::now());
                }
                ensure!(
                    last.1.elapsed() < STALL,
                    "the chain stalled at step {now} of {steps}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        },
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let handoffs: Vec<f64> = (1..steps)
        .map(|k| {
            elapsed_ms(
                committed_at[k - 1].load(Ordering::Relaxed),
                claimed_at[k].load(Ordering::Relaxed),
            )
        })
        .collect();
    let mut m = latencies(CHAIN, &handoffs);
    m.jobs = steps as u64;
    m.seconds = seconds;
    m.rate = Some(steps as f64 / seconds);
    Ok(m.note(format!(
        "{} steps, {} handoffs; {WORKERS} workers waiting in jobs_claim(n => 1, wait => \
         '{WAIT}'), each step completed by jobs_complete in a transaction of its own",
        int(steps as f64),
        int(handoffs.len() as f64)
    )))
}

/// The signals: for each, a job whose handler awaits it, then the signal once all workers
/// sleep; the latencies' p50, p99 and max.
fn signals(ctx: &Ctx, admin: &mut Client, c: &PgJobs) -> Result<Measurement> {
    let rounds = ctx.cfg.scale.signals;
    clear(admin, c)?;
    // jobs_worker has the client's powers: the driver enqueues and signals as the workers'
    // role, as an application's webhook handler would.
    let mut driver = c.connect(&ctx.cfg)?;
    let enqueue = driver.prepare(&format!(
        "SELECT jobs_enqueue('{QUEUE}', jsonb_build_object('n', $1::bigint))"
    ))?;
    let name = "bench-j-signal";
    let signal_of = |id: i64| format!("payment-{id}");
    // Job id → the server's clock when a claim had it with its signal; the driver waits for
    // it without spinning.
    let in_hand: Mutex<HashMap<i64, i64>> = Mutex::new(HashMap::new());
    let handed = Condvar::new();
    let mut workers = Session::open_many(ctx, c, name, QUEUE, 1, true)?;
    let samples = with_sessions(
        &mut workers,
        |s, _| {
            for (id, lease, signalled, at) in s.claim()? {
                if signalled {
                    in_hand.lock().unwrap().insert(id, at);
                    handed.notify_all();
                    s.complete(id, lease)?;
                } else {
                    let answer: String = s
                        .conn
                        .query_one(&s.await_signal, &[&id, &lease, &signal_of(id)])?
                        .get(0);
                    ensure!(answer == "waiting", "jobs_await answered {answer:?}");
                }
            }
            Ok(())
        },
        || {
            let mut samples = Vec::new();
            for n in 0..rounds as i64 {
                let id: i64 = driver.query_one(&enqueue, &[&n])?.get(0);
                wait_until(
                    admin,
                    &format!(
                        "SELECT (SELECT state::text = 'waiting' FROM jobs.job WHERE id = {id})
                            AND ({})",
                        asleep(name, WORKERS)
                    ),
                    "the job awaiting its signal with every worker asleep",
                )?;
                let (woken, sent) = committed(
                    &mut driver,
                    &format!(
                        "SELECT jobs_signal('{}', jsonb_build_object('n', {n}))",
                        signal_of(id)
                    ),
                )?;
                ensure!(woken == 1, "jobs_signal woke {woken} jobs, expected 1");
                let waited = Instant::now();
                let mut hands = in_hand.lock().unwrap();
                let got = loop {
                    if let Some(at) = hands.get(&id) {
                        break *at;
                    }
                    ensure!(
                        waited.elapsed() < Duration::from_secs(10),
                        "job {id} was not claimed within 10 s of its signal"
                    );
                    hands = handed
                        .wait_timeout(hands, Duration::from_millis(10))
                        .unwrap()
                        .0;
                };
                drop(hands);
                samples.push(elapsed_ms(sent, got));
            }
            Ok(samples)
        },
    )?;
    Ok(latencies(SIGNAL, &samples).note(format!(
        "{} signals, one at a time, each once its job awaited it (jobs_await) and all \
         {WORKERS} workers slept in jobs_claim(n => 1, wait => '{WAIT}'); jobs_signal with its \
         default keep, in a transaction of its own",
        int(samples.len() as f64)
    )))
}
