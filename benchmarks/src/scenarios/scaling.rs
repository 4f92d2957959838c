//! w. Scaling curve: the burn-down of b by 1, 2, 4, 8, 16 and 32 workers, 1 and 100 jobs per
//! claim, for pg_jobs and the hand-rolled queue. Every point starts from a freshly loaded,
//! vacuumed and checkpointed queue.

use postgres::Client;

use super::{attempt, burn, connect_workers, prepare_queued, Ctx};
use crate::comparators::Comparator;
use crate::db::Window;
use crate::results::Measurement;

pub const WORKER_COUNTS: [u32; 6] = [1, 2, 4, 8, 16, 32];
pub const VARIANTS: [(&str, i32); 2] = [("1 per claim", 1), ("100 per claim", 100)];
/// The queues this scenario runs for.
pub const RUNS_FOR: [&str; 2] = ["pg_jobs", "hand-rolled"];

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    if !RUNS_FOR.contains(&c.name()) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (variant, batch) in VARIANTS {
        let n = if batch == 1 {
            ctx.cfg.scale.scaling_jobs_1
        } else {
            ctx.cfg.scale.scaling_jobs_100
        };
        for workers in WORKER_COUNTS {
            let label = format!("{variant}, {workers} workers");
            let mut m = attempt("w", &label, c.name(), || {
                prepare_queued(admin, c, n)?;
                let mut pool = connect_workers(ctx, c, workers as usize)?;
                let window = Window::open(&ctx.server, admin)?;
                let burned = burn(&mut pool, batch, n)?;
                let span = window.close(&ctx.server, admin, 0.0)?;
                drop(pool);
                let left = c.pending(admin)?;
                c.reset(admin)?;
                anyhow::ensure!(left == 0, "{left} jobs left after the burn-down");
                Ok(burned.measurement("w", variant, c, &span))
            });
            m.variant = variant.into();
            m.workers = Some(workers);
            out.push(m);
        }
    }
    out
}
