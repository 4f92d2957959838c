//! g. Idle: 16 workers wait on an empty queue, each in its queue's natural waiting mode, and
//! for the configured time (30 s at full scale) we count statements per second (pg_stat_statements
//! calls by the load generator's roles, nested statements included: pg_stat_statements.track =
//! 'all' is set for the roles during this scenario), commits per second (pg_stat_database) and
//! server CPU. A baseline run without workers shows what the cluster does on its own (the
//! pg_jobs background worker's tick, autovacuum).

use std::time::Duration;

use anyhow::Result;
use postgres::Client;

use super::{attempt, complete, connect_workers, with_waiting_workers, Ctx};
use crate::comparators::graphile::GwOptions;
use crate::comparators::pg_jobs::PgJobs;
use crate::comparators::Comparator;
use crate::config::{IDLE_WORKERS, LOAD_ROLES};
use crate::db::{self, Span, Window};
use crate::results::Measurement;

pub const VARIANT: &str = "16 waiting workers";
pub const BASELINE: &str = "no workers (baseline)";

/// Time the workers get to settle into waiting before the window opens.
const SETTLE: Duration = Duration::from_secs(3);

fn figures(m: Measurement, span: &Span) -> Measurement {
    let mut m = m;
    m.seconds = span.seconds;
    m.server_cpu_s = Some(span.server_cpu);
    m.client_cpu_s = Some(span.client_cpu);
    m.statements_per_s = Some(span.statements as f64 / span.seconds);
    m.commits_per_s = Some(span.commits as f64 / span.seconds);
    m
}

/// The baseline without workers, then each queue's waiting workers. pg_jobs waits longer
/// than the window, so any statement in it would come from polling inside the wait; its
/// 10-second loop beside it shows the cost of issuing the wait again.
pub fn run(ctx: &Ctx, admin: &mut Client, queues: &[&dyn Comparator]) -> Vec<Measurement> {
    let long_wait = PgJobs::new("pg_jobs", "60 seconds");
    let loop_wait = PgJobs::new("pg_jobs (10 s wait loop)", "10 seconds");
    let mut waiting: Vec<&dyn Comparator> = Vec::new();
    for c in queues {
        if c.name() == "pg_jobs" {
            waiting.push(&long_wait);
            waiting.push(&loop_wait);
        } else {
            waiting.push(*c);
        }
    }
    let mut out = vec![baseline(ctx, admin)];
    for c in waiting {
        out.push(wait(ctx, admin, c));
    }
    out
}

fn baseline(ctx: &Ctx, admin: &mut Client) -> Measurement {
    attempt("g", BASELINE, "-", || {
        db::checkpoint(admin)?;
        std::thread::sleep(SETTLE);
        let window = Window::open(&ctx.server, admin)?;
        std::thread::sleep(Duration::from_secs(ctx.cfg.scale.idle_secs));
        let span = window.close(&ctx.server, admin, 0.0)?;
        Ok(figures(Measurement::new("g", BASELINE, "-"), &span))
    })
}

fn wait(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Measurement {
    attempt("g", VARIANT, c.name(), || {
        c.reset(admin)?;
        db::checkpoint(admin)?;
        track_all(admin, true)?;
        let span = if c.external().is_some() {
            graphile(ctx, admin, c)
        } else {
            sql(ctx, admin, c)
        };
        track_all(admin, false)?;
        let m = figures(Measurement::new("g", VARIANT, c.name()), &span?);
        Ok(m.note(c.waiting_mode()))
    })
}

/// Sets (or resets) pg_stat_statements.track = 'all' for the load generator's roles, so that
/// sessions they open from now on count nested statements too (scenario u uses it as well).
pub fn track_all(admin: &mut Client, on: bool) -> Result<()> {
    for role in LOAD_ROLES {
        admin.batch_execute(&if on {
            format!("ALTER ROLE {role} SET pg_stat_statements.track = 'all'")
        } else {
            format!("ALTER ROLE {role} RESET pg_stat_statements.track")
        })?;
    }
    Ok(())
}

fn watch(ctx: &Ctx, admin: &mut Client, extra_cpu: impl Fn() -> f64) -> Result<Span> {
    std::thread::sleep(SETTLE);
    let cpu0 = extra_cpu();
    let window = Window::open(&ctx.server, admin)?;
    std::thread::sleep(Duration::from_secs(ctx.cfg.scale.idle_secs));
    window.close(&ctx.server, admin, extra_cpu() - cpu0)
}

fn sql(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Span> {
    let mut workers = connect_workers(ctx, c, IDLE_WORKERS)?;
    with_waiting_workers(c, &mut workers, complete, || watch(ctx, admin, || 0.0))?
}

fn graphile(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Span> {
    let g = c.external().expect("Graphile");
    let process = g.start(GwOptions::one_per_claim(IDLE_WORKERS, 0))?;
    let span = watch(ctx, admin, || process.cpu_seconds());
    process.stop()?;
    span
}
