//! d. Backlog: the one-per-claim burn-down rate of b when the table is small or big.
//! - small: rounds of 1,000 queued jobs, each burnt down (the rate over all rounds);
//! - queued: 1,000,000 jobs queued, of which a fixed 50,000 are burnt down;
//! - finished: 1,000,000 finished jobs kept in the table, 50,000 queued and burnt down (not
//!   applicable to queues that delete finished jobs: pgmq, Graphile Worker).

use std::time::Duration;

use anyhow::Result;
use postgres::Client;

use super::{attempt, connect_workers, drain, prepare_queued, Burned, Ctx};
use crate::comparators::graphile::{prepare_load, wait_empty, Graphile, GwOptions};
use crate::comparators::Comparator;
use crate::config::{SMALL_BACKLOG, WORKERS};
use crate::db::{self, Span, Window};
use crate::format::int;
use crate::results::Measurement;

pub const SMALL: &str = "1,000 queued";
pub const QUEUED: &str = "1,000,000 queued";
pub const FINISHED: &str = "1,000,000 finished";

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    vec![
        attempt("d", SMALL, c.name(), || small(ctx, admin, c)),
        attempt("d", QUEUED, c.name(), || queued(ctx, admin, c)),
        attempt("d", FINISHED, c.name(), || finished(ctx, admin, c)),
    ]
}

fn small(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Measurement> {
    let rounds = ctx.cfg.scale.backlog_rounds;
    c.reset(admin)?;
    db::settle(admin, c.table())?;
    let mut total = Span::default();
    let mut burned = Burned::default();
    if let Some(g) = c.external() {
        (burned.done, total) = graphile_rounds(ctx, admin, g, rounds)?;
    } else {
        let mut workers = connect_workers(ctx, c, WORKERS)?;
        for _ in 0..rounds {
            c.load_queued(admin, SMALL_BACKLOG)?;
            let window = Window::open(&ctx.server, admin)?;
            let round = super::burn(&mut workers, 1, SMALL_BACKLOG)?;
            total.add(window.close(&ctx.server, admin, 0.0)?);
            burned.done += round.done;
            burned.empty_claims += round.empty_claims;
        }
    }
    c.reset(admin)?;
    Ok(burned.measurement("d", SMALL, c, &total).note(format!(
        "{rounds} rounds of {} queued jobs",
        int(SMALL_BACKLOG as f64)
    )))
}

/// Graphile: one worker process kept running; each round adds 1,000 jobs in one transaction
/// and times from its commit until the table is empty again.
fn graphile_rounds(
    ctx: &Ctx,
    admin: &mut Client,
    g: &Graphile,
    rounds: u64,
) -> Result<(u64, Span)> {
    let mut process = g.start(GwOptions::one_per_claim(WORKERS, SMALL_BACKLOG))?;
    let load = prepare_load(admin)?;
    let mut total = Span::default();
    for round in 0..rounds {
        let first = (round * SMALL_BACKLOG + 1) as i64;
        let last = first + SMALL_BACKLOG as i64 - 1;
        admin.batch_execute("BEGIN")?;
        admin.query_one(&load, &[&first, &last])?;
        let node_cpu = process.cpu_seconds();
        let window = Window::open(&ctx.server, admin)?;
        admin.batch_execute("COMMIT")?;
        process.wait_mark((round + 1) * SMALL_BACKLOG, Duration::from_secs(120))?;
        wait_empty(admin, Duration::from_secs(60))?;
        total.add(window.close(&ctx.server, admin, process.cpu_seconds() - node_cpu)?);
    }
    process.stop()?;
    Ok((rounds * SMALL_BACKLOG, total))
}

fn queued(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Measurement> {
    let (large, burn) = (ctx.cfg.scale.backlog_large, ctx.cfg.scale.backlog_burn);
    prepare_queued(admin, c, large)?;
    let (burned, span) = drain(ctx, admin, c, large, 1, Some(burn))?;
    c.reset(admin)?;
    Ok(burned.measurement("d", QUEUED, c, &span).note(format!(
        "{} of {} queued jobs burnt down",
        int(burned.done as f64),
        int(large as f64)
    )))
}

fn finished(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Measurement> {
    let (large, burn) = (ctx.cfg.scale.backlog_large, ctx.cfg.scale.backlog_burn);
    c.reset(admin)?;
    if !c.load_finished(admin, large)? {
        return Ok(Measurement::new("d", FINISHED, c.name())
            .missing("not applicable: finished jobs are deleted, none stay in the table"));
    }
    c.load_queued(admin, burn)?;
    db::settle(admin, c.table())?;
    let (burned, span) = drain(ctx, admin, c, burn, 1, None)?;
    let left = c.pending(admin)?;
    c.reset(admin)?;
    anyhow::ensure!(left == 0, "{left} jobs left after the burn-down");
    Ok(burned.measurement("d", FINISHED, c, &span).note(format!(
        "{} queued jobs burnt down beside {} finished ones",
        int(burned.done as f64),
        int(large as f64)
    )))
}
