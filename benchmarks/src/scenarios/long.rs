//! h. The long burn-down (issue 18): b's 100-per-claim burn-down on 3,000,000 queued jobs, so
//! that it lasts 15 s and more (b's 100,000 jobs take about a second: start-up and the last
//! jobs weigh in it, and autovacuum and checkpoints never do). pg_jobs and the hand-rolled
//! queue, the pair of the target.

use postgres::Client;

use super::burndown::burn_down;
use super::{attempt, prepare_queued, Ctx};
use crate::comparators::Comparator;
use crate::format::int;
use crate::results::Measurement;

pub const VARIANT: &str = "100 per claim, long run";
/// The queues this scenario runs for.
pub const RUNS_FOR: [&str; 2] = ["pg_jobs", "hand-rolled"];

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    if !RUNS_FOR.contains(&c.name()) {
        return Vec::new();
    }
    vec![attempt("h", VARIANT, c.name(), || {
        let n = ctx.cfg.scale.long_jobs;
        prepare_queued(admin, c, n)?;
        let m = burn_down(ctx, admin, c, n, 100, "h", VARIANT)?;
        c.reset(admin)?;
        Ok(m.note(format!(
            "{} queued jobs burnt down by 8 workers",
            int(n as f64)
        )))
    })]
}
