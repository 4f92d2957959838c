//! u. Flow control (issue 11, its measured part), pg_jobs only: what unique keys, groups and a
//! rate limit cost next to the same work without them.
//!
//! - Enqueue from 8 sessions for a fixed time (a's producers), one job per transaction and
//!   1,000 per call: plain, and with a distinct `unique_key` per job (keys sent by the
//!   client, as an application would). Target: unique ≥ 0.8× plain.
//! - Burn-down by 8 workers (b's workers), 1 and 100 per claim (w's sizes: 20,000 and 100,000
//!   jobs at full scale): the jobs spread over 1,000 groups of a queue with
//!   `group_concurrency => 1`, and the same number of jobs without groups. Target: grouped ≥
//!   0.7× ungrouped.
//! - Rate limit: a queue limited to 1,000 jobs/s (burst 10) with more jobs queued than the
//!   window can take, 8 workers in `jobs_claim(n => 10, wait => '60 seconds')`, each claim's
//!   jobs completed at once. The admitted rate over the steady window must be within 3% of the limit. Then the
//!   limit drops to one token every 10,000 s while the same workers keep waiting with jobs
//!   queued: pg_stat_statements (track = 'all' for the workers' role, so statements run inside
//!   a waiting claim count too) must record no statement from them, i.e. waiters don't poll.
//!
//! Every part runs `BENCH_REPEATS` times, the two sides in alternating order, so each target
//! shows its run-to-run noise.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use postgres::{Client, Statement};
use serde_json::Value;

use super::burndown::burn_down;
use super::idle::track_all;
use super::{attempt, connect_workers, produce, produce_with, with_waiting_workers_n, Ctx};
use crate::comparators::pg_jobs::{PgJobs, QUEUE};
use crate::comparators::{load_in_chunks, Claimed, Comparator, Producer, Worker};
use crate::config::WORKERS;
use crate::db::{self, Span, Window};
use crate::format::int;
use crate::results::Measurement;

/// The scenario's letter in `BENCH_SCENARIOS` and in the report.
pub const SCENARIO: &str = "u";
/// Enqueue variants: label and jobs per call.
pub const ENQUEUE: [(&str, usize); 2] = [
    ("enqueue, 1 per transaction", 1),
    ("enqueue, 1,000 per call", 1000),
];
/// The enqueue sides.
pub const PLAIN: &str = "plain";
pub const UNIQUE: &str = "distinct unique keys";
/// Burn-down variants: label and jobs per claim.
pub const BURN: [(&str, i32); 2] = [
    ("burn-down, 1 per claim", 1),
    ("burn-down, 100 per claim", 100),
];
/// The burn-down sides.
pub const UNGROUPED: &str = "no groups";
pub const GROUPED: &str = "1,000 groups, concurrency 1";
/// Groups the grouped burn-down spreads its jobs over.
pub const GROUPS: u64 = 1000;
/// The rate-limited variants and their one side.
pub const RATE: &str = "rate limit 1,000/s, 8 waiting workers";
pub const QUIET: &str = "rate limit admitting nothing, 8 waiting workers, jobs queued";
pub const LIMITED: &str = "pg_jobs";
/// The rate limit under test, in jobs per second.
pub const LIMIT: f64 = 1000.0;
/// Its burst: small, so the burst at the start weighs nothing next to the steady rate.
const BURST: f64 = 10.0;
/// The limit of the quiet phase: one token every 10,000 s. The bucket keeps the fraction of a
/// token it held when the limit was lowered, and that token comes due (1 - fraction) / limit
/// later: at one token every 100 s it fell into the 30-second window in one run of two (a
/// statement or three and one job admitted, from the bucket, not from polling); now the odds
/// are about 1 in 200.
const QUIET_LIMIT: f64 = 0.0001;
/// The waiting claim's wait: longer than the quiet phase, so every statement in its window
/// would come from polling inside a wait, not from a wait that ran out.
const WAIT: &str = "60 seconds";
/// Jobs a rate-limited worker asks for per waiting claim: with one job per claim (two commits
/// per job) a loaded 2-core machine tops out near the limit itself (about 600 jobs/s in a
/// small run), and the figure would be the machine's, not the limiter's.
const CLAIM: i32 = 10;
/// Time the rate-limited workers run before the steady window opens (the burst goes out).
const WARM_UP: Duration = Duration::from_secs(2);
/// How long no job may have been admitted after the limit is lowered before the quiet window
/// opens (tokens in hand or reserved go out first).
const SETTLE: Duration = Duration::from_secs(3);
/// The targets of issue 11.
pub const UNIQUE_TARGET: f64 = 0.8;
pub const GROUPS_TARGET: f64 = 0.7;
pub const RATE_TOLERANCE: f64 = 0.03;

/// Runs every part `BENCH_REPEATS` times and returns their measurements, tagged with their
/// repetition; the queue is left without rate limit whatever failed.
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let c = PgJobs::new(LIMITED, WAIT);
    let mut out = Vec::new();
    for repeat in 0..ctx.cfg.repeats {
        if ctx.cfg.repeats > 1 {
            eprintln!("  (run {} of {})", repeat + 1, ctx.cfg.repeats);
        }
        let tag = |mut m: Measurement| {
            m.repeat = repeat;
            m
        };
        // Every other run takes the sides in reverse order, so neither always runs first.
        let order = |sides: [&'static str; 2]| {
            if repeat % 2 == 0 {
                sides
            } else {
                [sides[1], sides[0]]
            }
        };
        for (variant, batch) in ENQUEUE {
            for side in order([PLAIN, UNIQUE]) {
                out.push(tag(attempt(SCENARIO, variant, side, || {
                    enqueue(ctx, admin, &c, batch, variant, side)
                })));
            }
        }
        for (variant, batch) in BURN {
            for side in order([UNGROUPED, GROUPED]) {
                out.push(tag(attempt(SCENARIO, variant, side, || {
                    burn(ctx, admin, &c, batch, variant, side)
                })));
            }
        }
        let mut quiet = None;
        let rate = attempt(SCENARIO, RATE, LIMITED, || {
            let (rate, q) = rate_limited(ctx, admin, &c)?;
            quiet = Some(q);
            Ok(rate)
        });
        let quiet = quiet.unwrap_or_else(|| {
            Measurement::new(SCENARIO, QUIET, LIMITED)
                .missing(rate.missing.clone().unwrap_or_default())
        });
        eprintln!(
            "  {SCENARIO} · {QUIET} · {LIMITED}: {}",
            quiet.missing.clone().unwrap_or_else(|| format!(
                "{:.2} statements/s, {} jobs admitted",
                quiet.statements_per_s.unwrap_or(f64::NAN),
                quiet.jobs
            ))
        );
        out.push(tag(rate));
        out.push(tag(quiet));
    }
    // The later scenarios use the same queue: leave it without limit and empty.
    if let Err(e) = clear_limit(admin).and_then(|()| c.reset(admin)) {
        eprintln!("  {SCENARIO}: could not clear the queue's rate limit: {e:#}");
    }
    out
}

/// Enqueues with `batch` jobs per call for the scale's enqueue time, from 8 sessions.
fn enqueue(
    ctx: &Ctx,
    admin: &mut Client,
    c: &PgJobs,
    batch: usize,
    variant: &str,
    side: &str,
) -> Result<Measurement> {
    c.reset(admin)?;
    db::checkpoint(admin)?;
    let duration = Some(Duration::from_secs(ctx.cfg.scale.enqueue_secs));
    let window = Window::open(&ctx.server, admin)?;
    let jobs = if side == UNIQUE {
        produce_with(ctx, c, &UniqueProducer::prepare, None, duration, batch)?
    } else {
        produce(ctx, c, None, duration, batch)?
    };
    let span = window.close(&ctx.server, admin, 0.0)?;
    // Every key was distinct, so every job must be in, holding its key.
    let keyed: i64 = admin
        .query_one(
            "SELECT count(*) FROM jobs.job WHERE unique_key IS NOT NULL",
            &[],
        )?
        .get(0);
    let want = if side == UNIQUE { jobs as i64 } else { 0 };
    ensure!(
        keyed == want,
        "{keyed} jobs hold a unique key after {jobs} enqueues ({side}), expected {want}"
    );
    c.reset(admin)?;
    Ok(Measurement::new(SCENARIO, variant, side).throughput(jobs, &span))
}

/// The key of the job with payload `{"n": n}`: distinct for every job of a run.
fn unique_key(payload: &Value) -> String {
    format!("order:{}", payload["n"])
}

/// A producer enqueueing into pg_jobs's bench queue with a unique key per job, sent by the
/// client beside the payload.
pub struct UniqueProducer {
    conn: Client,
    one: Statement,
    many: Statement,
}

impl UniqueProducer {
    /// Prepares the keyed enqueues on `conn`.
    pub fn prepare(mut conn: Client) -> Result<Box<dyn Producer>> {
        let one = conn.prepare(&format!(
            "SELECT jobs_enqueue('{QUEUE}', $1::jsonb, unique_key => $2::text)"
        ))?;
        let many = conn.prepare(&format!(
            "SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}', $1::jsonb[], unique_keys => $2::text[])"
        ))?;
        Ok(Box::new(UniqueProducer { conn, one, many }))
    }
}

impl Producer for UniqueProducer {
    fn enqueue(&mut self, payload: &Value) -> Result<i64> {
        let key = unique_key(payload);
        Ok(self.conn.query_one(&self.one, &[payload, &key])?.get(0))
    }

    fn enqueue_batch(&mut self, payloads: &[Value]) -> Result<()> {
        let keys: Vec<String> = payloads.iter().map(unique_key).collect();
        self.conn.execute(&self.many, &[&payloads, &keys])?;
        Ok(())
    }

    fn session(&mut self) -> &mut Client {
        &mut self.conn
    }
}

/// Loads `n` queued jobs, job k in group k mod 1,000, so every group's head is near the front.
pub fn load_grouped(admin: &mut Client, n: u64) -> Result<()> {
    let statement = admin.prepare(&format!(
        "SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}',
             ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g ORDER BY g),
             group_keys => ARRAY(SELECT 'group:' || (g % {GROUPS}) FROM generate_series($1::bigint, $2::bigint) g ORDER BY g))"
    ))?;
    load_in_chunks(n, |first, last| {
        admin.query_one(&statement, &[&first, &last])?;
        Ok(())
    })
}

/// Burns down the scale's b-sized queue, grouped or not, with `batch` jobs per claim.
fn burn(
    ctx: &Ctx,
    admin: &mut Client,
    c: &PgJobs,
    batch: i32,
    variant: &str,
    side: &str,
) -> Result<Measurement> {
    // w's sizes: big enough for a steady rate, small enough at 1 per claim on a busy machine.
    let n = if batch == 1 {
        ctx.cfg.scale.scaling_jobs_1
    } else {
        ctx.cfg.scale.scaling_jobs_100
    };
    c.reset(admin)?;
    let groups = if side == GROUPED {
        admin.execute(
            &format!("SELECT jobs_create_queue('{QUEUE}', group_concurrency => 1)"),
            &[],
        )?;
        load_grouped(admin, n)?;
        GROUPS.min(n) as i64
    } else {
        c.load_queued(admin, n)?;
        0
    };
    let found: i64 = admin
        .query_one(
            "SELECT count(DISTINCT group_key) FROM jobs.job WHERE state = 'queued'",
            &[],
        )?
        .get(0);
    ensure!(
        found == groups,
        "the queue holds {found} groups before the burn-down, expected {groups}"
    );
    db::settle(admin, c.table())?;
    let mut m = burn_down(ctx, admin, c, n, batch, SCENARIO, variant)?;
    c.reset(admin)?;
    m.comparator = side.to_owned();
    Ok(if groups > 0 {
        m.note(format!(
            "{} jobs, {} per group",
            int(n as f64),
            int((n / GROUPS.min(n)) as f64)
        ))
    } else {
        m.note(format!("{} jobs", int(n as f64)))
    })
}

fn set_limit(admin: &mut Client, rate: f64, burst: f64) -> Result<()> {
    admin.execute(
        &format!(
            "SELECT jobs_create_queue('{QUEUE}', rate_limit => $1::float8, rate_burst => $2::float8)"
        ),
        &[&rate, &burst],
    )?;
    Ok(())
}

/// Takes the rate limit off the bench queue (0 clears both settings).
fn clear_limit(admin: &mut Client) -> Result<()> {
    set_limit(admin, 0.0, 0.0)
}

/// The steady window at 1,000 jobs/s, then the quiet window where nothing is admitted.
fn rate_limited(ctx: &Ctx, admin: &mut Client, c: &PgJobs) -> Result<(Measurement, Measurement)> {
    let secs = ctx.cfg.scale.flow_rate_secs;
    // More than the warm-up and the window can take at the limit: the queue never runs dry,
    // so the limiter alone sets the rate.
    let n = LIMIT as u64 * (secs + 10);
    c.reset(admin)?;
    set_limit(admin, LIMIT, BURST)?;
    c.load_queued(admin, n)?;
    db::settle(admin, c.table())?;
    // Set for the roles before their sessions connect, so they count nested statements too.
    track_all(admin, true)?;
    let outcome = (|| {
        let mut workers = connect_workers(ctx, c, WORKERS)?;
        let admitted = AtomicU64::new(0);
        let handle = |w: &mut dyn Worker, jobs: &[Claimed]| {
            w.complete(jobs)?;
            admitted.fetch_add(jobs.len() as u64, Ordering::Relaxed);
            Ok(())
        };
        with_waiting_workers_n(c, &mut workers, CLAIM, handle, || {
            std::thread::sleep(WARM_UP);
            let before = admitted.load(Ordering::Relaxed);
            let window = Window::open(&ctx.server, admin)?;
            std::thread::sleep(Duration::from_secs(secs));
            let steady = admitted.load(Ordering::Relaxed) - before;
            let span = window.close(&ctx.server, admin, 0.0)?;
            let left = c.pending(admin)?;
            ensure!(
                left > WORKERS as i64,
                "only {left} jobs were left after the steady window: the queue ran dry, so the \
                 rate is not the limiter's"
            );
            let rate = per_second(
                Measurement::new(SCENARIO, RATE, LIMITED).throughput(steady, &span),
                &span,
            )
            .note(format!(
                "rate_limit {}/s, rate_burst {BURST}; window of {secs} s opened {} s after the \
                 workers started; {} jobs queued at the start; workers in jobs_claim(n => {CLAIM}, \
                 wait => '{WAIT}'), each claim's jobs completed at once",
                int(LIMIT),
                WARM_UP.as_secs(),
                int(n as f64)
            ));

            set_limit(admin, QUIET_LIMIT, 1.0)?;
            // Tokens reserved or left in the bucket at the change still go out: the window
            // opens once none has for SETTLE (or after 5 × SETTLE, counting what still comes).
            let lowered = Instant::now();
            let mut last = (admitted.load(Ordering::Relaxed), Instant::now());
            while last.1.elapsed() < SETTLE && lowered.elapsed() < 5 * SETTLE {
                std::thread::sleep(Duration::from_millis(100));
                let now = admitted.load(Ordering::Relaxed);
                if now != last.0 {
                    last = (now, Instant::now());
                }
            }
            let settled = lowered.elapsed().as_secs_f64();
            let before = admitted.load(Ordering::Relaxed);
            let window = Window::open(&ctx.server, admin)?;
            std::thread::sleep(Duration::from_secs(ctx.cfg.scale.idle_secs));
            let quiet_jobs = admitted.load(Ordering::Relaxed) - before;
            let span = window.close(&ctx.server, admin, 0.0)?;
            let mut quiet = per_second(Measurement::new(SCENARIO, QUIET, LIMITED), &span);
            quiet.jobs = quiet_jobs;
            let quiet = quiet.note(format!(
                "rate_limit lowered to {QUIET_LIMIT}/s (a token every {:.0} s), rate_burst 1, \
                 {settled:.1} s before the window (the last job admitted {} s or more before \
                 it); {} jobs still queued",
                1.0 / QUIET_LIMIT,
                SETTLE.as_secs(),
                int(left as f64)
            ));
            Ok((rate, quiet))
        })?
    })();
    track_all(admin, false)?;
    clear_limit(admin)?;
    c.reset(admin)?;
    outcome
}

/// Adds the window's length, server and client CPU, statements and commits per second.
fn per_second(mut m: Measurement, span: &Span) -> Measurement {
    m.seconds = span.seconds;
    m.server_cpu_s = Some(span.server_cpu);
    m.client_cpu_s = Some(span.client_cpu);
    m.statements_per_s = Some(span.statements as f64 / span.seconds);
    m.commits_per_s = Some(span.commits as f64 / span.seconds);
    m
}
