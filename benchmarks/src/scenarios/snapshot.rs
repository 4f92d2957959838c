//! e. Held snapshot: the one-per-claim burn-down of b while another session keeps one
//! REPEATABLE READ snapshot open for the whole run, so no row version deleted or updated
//! during the run can be vacuumed or pruned away.

use postgres::Client;

use super::burndown::burn_down;
use super::{attempt, prepare_queued, Ctx};
use crate::comparators::Comparator;
use crate::db;
use crate::results::Measurement;

pub const VARIANT: &str = "1 per claim, snapshot held";

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    vec![attempt("e", VARIANT, c.name(), || {
        let n = ctx.cfg.scale.burn_jobs;
        prepare_queued(admin, c, n)?;
        let mut holder = db::connect(&ctx.cfg.admin_dsn)?;
        holder.batch_execute(&format!(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM {} LIMIT 1",
            c.table()
        ))?;
        let m = burn_down(ctx, admin, c, n, 1, "e", VARIANT);
        holder.batch_execute("ROLLBACK")?;
        drop(holder);
        c.reset(admin)?;
        m
    })]
}
