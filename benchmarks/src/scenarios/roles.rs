//! r. Roles and tenants cost (issue 10): what the `SECURITY DEFINER` functions' role checks and
//! the tenant scope cost a producer and a worker. a's enqueue (1 per transaction, 1,000 per
//! call) and b's burn-down (1 per claim, 100 per claim; at 100 five times b's jobs, so that
//! each side runs for seconds, not moments), each side as
//! the extension's owner (a superuser session, no tenant set: every role check passes at once
//! and no tenant filter applies) and as the role granted `jobs_worker` with
//! `SET pg_jobs.tenant` at session start (the role is granted the tenant; the jobs carry it).
//! Each repetition runs each variant as a block of four, A B B A: two pairs, the second in the
//! first's reverse order, so that drift on a shared machine (which moved one side's figure by
//! 15–20% from one measurement to the next) falls on both sides alike within the block, and
//! each side is measured twice as often as a plain pair. Which login is A alternates from
//! variant to variant and from repetition to repetition. The report judges the ratio of the
//! sides' mean rates (jobs_worker + tenant ÷ owner) against 0.95.

use anyhow::{ensure, Result};
use postgres::Client;

use super::burndown::burn_down;
use super::enqueue::enqueue_for;
use super::{attempt, burndown, enqueue, prepare_queued, Ctx};
use crate::comparators::pg_jobs::{Login, PgJobs};
use crate::comparators::Comparator;
use crate::config::{LOAD_ROLE, WORKER_ROLE};
use crate::db;
use crate::results::Measurement;

/// The tenant the `jobs_worker` sessions act for.
pub const TENANT: &str = "acme";
/// The two ways of logging in that are compared.
pub const OWNER: &str = "pg_jobs as owner";
pub const WORKER: &str = "pg_jobs as jobs_worker + tenant";
/// The least jobs_worker + tenant ÷ owner rate the issue accepts.
pub const TARGET: f64 = 0.95;

/// What one variant does: a's enqueue with this many jobs per call, or b's burn-down with
/// this many jobs per claim.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    Enqueue(usize),
    BurnDown(i32),
}

/// The variants, in the order they run: a's two, then b's two.
pub const VARIANTS: [(&str, Work); 4] = [
    (
        "a. enqueue, 1 per transaction",
        Work::Enqueue(enqueue::VARIANTS[0].1),
    ),
    (
        "a. enqueue, 1,000 per call",
        Work::Enqueue(enqueue::VARIANTS[1].1),
    ),
    (
        "b. burn-down, 1 per claim",
        Work::BurnDown(burndown::VARIANTS[0].1),
    ),
    (
        "b. burn-down, 100 per claim",
        Work::BurnDown(burndown::VARIANTS[1].1),
    ),
];

/// Pairs each repetition measures of each variant: A B, then B A.
pub const PAIRS_PER_REPETITION: u32 = 2;

/// Runs the scenario's `BENCH_REPEATS` repetitions (pg_jobs only, whatever the queues of the
/// run).
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    let repeats = ctx.cfg.repeats;
    let mut out = Vec::new();
    for repeat in 0..repeats {
        eprintln!("  (run {} of {repeats})", repeat + 1);
        out.extend(repetition(ctx, admin, repeat));
    }
    out
}

/// Runs every variant for both logins, in the order `repeat` gives (see the module's doc).
/// Each measurement is numbered as a repetition of its own (`repeat` ×
/// [`PAIRS_PER_REPETITION`] + its pair), so that the report's noise shows every pair.
fn repetition(ctx: &Ctx, admin: &mut Client, repeat: u32) -> Vec<Measurement> {
    let owner = PgJobs::logged_in(OWNER, "10 seconds", Login::Owner);
    let worker = PgJobs::logged_in(WORKER, "10 seconds", Login::WorkerForTenant(TENANT));
    if let Err(e) = prepare_logins(ctx, admin, &owner, &worker) {
        eprintln!("  r · the logins are not what the scenario compares: {e:#}");
        return VARIANTS
            .iter()
            .flat_map(|(variant, _)| {
                [OWNER, WORKER]
                    .map(|c| Measurement::new("r", variant, c).missing(format!("error: {e:#}")))
            })
            .collect();
    }
    let mut out = Vec::new();
    for (i, &(variant, work)) in VARIANTS.iter().enumerate() {
        for (number, as_owner) in block(repeat, i) {
            let c = if as_owner { &owner } else { &worker };
            let mut m = attempt("r", variant, c.name(), || {
                measure(ctx, admin, c, variant, work)
            });
            m.repeat = number;
            out.push(m);
        }
    }
    out
}

/// The measurements of variant `variant` in repetition `repeat`, in the order they run: each
/// one's number and whether it runs as the owner. A B, then B A.
fn block(repeat: u32, variant: usize) -> Vec<(u32, bool)> {
    let a = owner_first(repeat, variant);
    (0..PAIRS_PER_REPETITION)
        .flat_map(|pair| {
            let number = repeat * PAIRS_PER_REPETITION + pair;
            let first = if pair % 2 == 0 { a } else { !a };
            [(number, first), (number, !first)]
        })
        .collect()
}

/// Whether the owner runs before the worker in variant `variant` of repetition `repeat`: every
/// other variant, and the other way round in every other repetition.
fn owner_first(repeat: u32, variant: usize) -> bool {
    (repeat as usize + variant).is_multiple_of(2)
}

fn measure(
    ctx: &Ctx,
    admin: &mut Client,
    c: &PgJobs,
    variant: &str,
    work: Work,
) -> Result<Measurement> {
    let m = match work {
        Work::Enqueue(batch) => {
            c.reset(admin)?;
            db::checkpoint(admin)?;
            let m = enqueue_for(ctx, admin, c, batch, "r", variant)?;
            c.check_tenant(admin, m.jobs)?;
            m
        }
        Work::BurnDown(batch) => {
            let n = burn_down_jobs(ctx, batch);
            prepare_queued(admin, c, n)?;
            let m = burn_down(ctx, admin, c, n, batch, "r", variant)?;
            c.check_tenant(admin, n)?;
            m
        }
    };
    c.reset(admin)?;
    Ok(m.note(login_note(c)))
}

/// Jobs each burn-down side works through: b's count, five times as many at 100 per claim,
/// where b's count lasts about 3 seconds and the pairs' ratios varied by ±13% from one
/// repetition to the next (0.89×, 1.05×, 0.81× in one run); five times as long, one pair
/// compares more than the moment each side ran at.
fn burn_down_jobs(ctx: &Ctx, batch: i32) -> u64 {
    if batch >= 100 {
        ctx.cfg.scale.burn_jobs * 5
    } else {
        ctx.cfg.scale.burn_jobs
    }
}

fn login_note(c: &PgJobs) -> String {
    match c.tenant() {
        Some(tenant) => format!(
            "as {WORKER_ROLE} (granted jobs_worker and tenant '{tenant}'), SET pg_jobs.tenant = '{tenant}'"
        ),
        None => format!("as {LOAD_ROLE} (superuser, the extension's owner), no tenant set"),
    }
}

/// Grants the tenant, then checks from one session of each login that it is what it says:
/// the owner a superuser owning the extension with no tenant set, the worker a role with
/// jobs_worker's privileges but neither a superuser's nor jobs_admin's, acting for the tenant.
fn prepare_logins(ctx: &Ctx, admin: &mut Client, owner: &PgJobs, worker: &PgJobs) -> Result<()> {
    admin.execute(
        "SELECT jobs_grant_tenant($1::text, $2::text)",
        &[&WORKER_ROLE, &TENANT],
    )?;
    for c in [owner, worker] {
        let mut session = c.connect(&ctx.cfg)?;
        let row = session.query_one(
            "SELECT current_user::text,
                    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
                    pg_has_role(current_user, 'jobs_worker', 'USAGE'),
                    pg_has_role(current_user, 'jobs_admin', 'USAGE'),
                    coalesce(current_setting('pg_jobs.tenant', true), ''),
                    (SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'pg_jobs')",
            &[],
        )?;
        let (user, superuser, worker_role, admin_role, tenant, ext_owner): (
            String,
            bool,
            bool,
            bool,
            String,
            String,
        ) = (
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            row.get(4),
            row.get(5),
        );
        match c.tenant() {
            None => ensure!(
                superuser && user == ext_owner && tenant.is_empty(),
                "the owner's session is {user} (superuser: {superuser}, tenant {tenant:?}) but \
                 the extension belongs to {ext_owner}: benchmarks/run creates it as {LOAD_ROLE}"
            ),
            Some(want) => ensure!(
                !superuser && worker_role && !admin_role && tenant == want,
                "the worker's session is {user} (superuser: {superuser}, jobs_worker: \
                 {worker_role}, jobs_admin: {admin_role}, tenant {tenant:?}): it must be a \
                 plain role granted jobs_worker acting for tenant {want:?}"
            ),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{block, owner_first, PAIRS_PER_REPETITION, VARIANTS};

    #[test]
    fn the_order_alternates_between_variants_and_repetitions() {
        for variant in 0..VARIANTS.len() {
            // Over two repetitions each login runs first once.
            assert_ne!(owner_first(0, variant), owner_first(1, variant));
            if variant > 0 {
                // Within a repetition, consecutive variants start with different logins.
                assert_ne!(owner_first(0, variant - 1), owner_first(0, variant));
            }
        }
        let firsts = (0..VARIANTS.len()).filter(|&v| owner_first(0, v)).count();
        assert_eq!(firsts * 2, VARIANTS.len());
    }

    #[test]
    fn each_block_runs_a_b_b_a_with_numbers_of_its_own() {
        let mut numbers = Vec::new();
        for repeat in 0..3 {
            for variant in 0..VARIANTS.len() {
                let b = block(repeat, variant);
                let sides: Vec<bool> = b.iter().map(|&(_, owner)| owner).collect();
                let a = owner_first(repeat, variant);
                assert_eq!(sides, [a, !a, !a, a]);
                // Each pair holds both logins under one number, the number of no other pair.
                for pair in b.chunks(2) {
                    assert_eq!(pair[0].0, pair[1].0);
                    assert_ne!(pair[0].1, pair[1].1);
                    if variant == 0 {
                        numbers.push(pair[0].0);
                    }
                }
            }
        }
        let expected: Vec<u32> = (0..3 * PAIRS_PER_REPETITION).collect();
        assert_eq!(numbers, expected);
    }
}
