//! a. Enqueue: 8 sessions enqueue for a fixed time, one job per transaction, then 1,000 jobs
//! per call; jobs per second and server CPU per 1,000 jobs.

use std::time::Duration;

use anyhow::Result;
use postgres::Client;

use super::{attempt, produce, Ctx};
use crate::comparators::Comparator;
use crate::db::{self, Window};
use crate::results::Measurement;

pub const VARIANTS: [(&str, usize); 2] = [("1 per transaction", 1), ("1,000 per call", 1000)];

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    VARIANTS
        .iter()
        .map(|&(variant, batch)| {
            attempt("a", variant, c.name(), || {
                c.reset(admin)?;
                db::checkpoint(admin)?;
                let m = enqueue_for(ctx, admin, c, batch, "a", variant)?;
                c.reset(admin)?;
                Ok(m)
            })
        })
        .collect()
}

/// Enqueues from 8 sessions for the scenario's time, `batch` jobs per call, into the emptied
/// queue; the jobs stay in the table (the caller may inspect them, then resets).
pub fn enqueue_for(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    batch: usize,
    scenario: &str,
    variant: &str,
) -> Result<Measurement> {
    let duration = Duration::from_secs(ctx.cfg.scale.enqueue_secs);
    let window = Window::open(&ctx.server, admin)?;
    let jobs = produce(ctx, c, None, Some(duration), batch)?;
    let span = window.close(&ctx.server, admin, 0.0)?;
    Ok(Measurement::new(scenario, variant, c.name()).throughput(jobs, &span))
}
