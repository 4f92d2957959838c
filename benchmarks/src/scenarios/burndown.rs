//! b. Burn-down: 100,000 queued no-op jobs (vacuumed, checkpointed) drained by 8 workers, one
//! job per claim with one complete per job, then 100 per claim with one batched complete. The
//! queues that can settle and claim in one transaction (pg_jobs's `jobs_complete_and_claim`)
//! burn down the same queue that way too, at 1 and at 100 per claim: one commit per claim
//! (issue 39).

use anyhow::{bail, Result};
use postgres::Client;

use super::{attempt, drain_settling, graphile_options, prepare_queued, Ctx, Settle};
use crate::comparators::Comparator;
use crate::config::WORKERS;
use crate::results::Measurement;

pub const VARIANTS: [(&str, i32); 2] = [("1 per claim", 1), ("100 per claim", 100)];

/// The variants of the queues that complete and claim in one transaction, each beside the
/// variant of [`VARIANTS`] with the same claim size.
pub const ONE_COMMIT: [(&str, i32); 2] = [
    ("1 per claim, one commit per job", 1),
    ("100 per claim, one commit per claim", 100),
];

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    let mut variants: Vec<(&str, i32, Settle)> = VARIANTS
        .iter()
        .map(|&(v, batch)| (v, batch, Settle::Apart))
        .collect();
    if c.one_commit_per_job() {
        variants.extend(
            ONE_COMMIT
                .iter()
                .map(|&(v, batch)| (v, batch, Settle::WithNextClaim)),
        );
    }
    variants
        .into_iter()
        .map(|(variant, batch, settle)| {
            attempt("b", variant, c.name(), || {
                let n = ctx.cfg.scale.burn_jobs;
                prepare_queued(admin, c, n)?;
                let m = burn_down_settling(ctx, admin, c, n, batch, "b", variant, settle)?;
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
    burn_down_settling(ctx, admin, c, n, batch, scenario, variant, Settle::Apart)
}

/// [`burn_down`] whose workers settle as `settle` says.
#[allow(clippy::too_many_arguments)]
pub fn burn_down_settling(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
    n: u64,
    batch: i32,
    scenario: &str,
    variant: &str,
    settle: Settle,
) -> Result<Measurement> {
    let (burned, span) = drain_settling(ctx, admin, c, n, batch, None, settle)?;
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
