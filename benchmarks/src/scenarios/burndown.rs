//! b. Burn-down: 100,000 queued no-op jobs (vacuumed, checkpointed) drained by 8 workers, one
//! job per claim with one complete per job, then 100 per claim with one batched complete.

use anyhow::{bail, Result};
use postgres::Client;

use super::{attempt, drain, graphile_options, prepare_queued, Ctx};
use crate::comparators::Comparator;
use crate::config::WORKERS;
use crate::results::Measurement;

pub const VARIANTS: [(&str, i32); 2] = [("1 per claim", 1), ("100 per claim", 100)];

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    VARIANTS
        .iter()
        .map(|&(variant, batch)| {
            attempt("b", variant, c.name(), || {
                let n = ctx.cfg.scale.burn_jobs;
                prepare_queued(admin, c, n)?;
                let m = burn_down(ctx, admin, c, n, batch, "b", variant)?;
                c.reset(admin)?;
                Ok(m)
            })
        })
        .collect()
}

/// Drains `n` loaded jobs and checks none is left.
pub fn burn_down(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    n: u64,
    batch: i32,
    scenario: &str,
    variant: &str,
) -> Result<Measurement> {
    let (burned, span) = drain(ctx, admin, c, n, batch, None)?;
    let left = c.pending(admin)?;
    if left != 0 || burned.done != n {
        bail!(
            "burn-down ended with {} of {n} jobs done and {left} pending",
            burned.done
        );
    }
    let mut m = burned.measurement(scenario, variant, c, &span);
    if c.external().is_some() {
        m = m.note(graphile_options(batch, WORKERS, 0).describe());
    }
    Ok(m)
}
