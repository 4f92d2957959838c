//! f. WAL bytes and commits per job over a whole lifecycle (enqueue, claim, complete), with
//! batches of 1 (one job per enqueue, per claim and per complete) and of 100 (100 per
//! enqueue call, per claim and per complete call): pg_current_wal_insert_lsn and
//! pg_stat_database.xact_commit before and after, divided by the jobs.

use std::time::Duration;

use anyhow::{ensure, Result};
use postgres::Client;

use super::{attempt, connect_workers, graphile_options, produce, Ctx};
use crate::comparators::graphile::wait_empty;
use crate::comparators::Comparator;
use crate::config::WORKERS;
use crate::db::{self, Span, Window};
use crate::results::Measurement;

pub const VARIANTS: [(&str, i32); 2] = [("batches of 1", 1), ("batches of 100", 100)];

/// Time for exiting sessions to flush their statistics.
const FLUSH: Duration = Duration::from_millis(1500);

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    VARIANTS
        .iter()
        .map(|&(variant, batch)| {
            attempt("f", variant, c.name(), || {
                c.reset(admin)?;
                db::settle(admin, c.table())?;
                let span = lifecycle(ctx, admin, c, batch)?;
                c.reset(admin)?;
                let n = ctx.cfg.scale.wal_jobs;
                let mut m = Measurement::new("f", variant, c.name()).throughput(n, &span);
                m.wal_bytes_per_job = Some(span.wal_bytes as f64 / n as f64);
                m.commits_per_job = Some(span.commits as f64 / n as f64);
                Ok(m)
            })
        })
        .collect()
}

fn lifecycle(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator, batch: i32) -> Result<Span> {
    let n = ctx.cfg.scale.wal_jobs;
    if let Some(g) = c.external() {
        // The worker runs while the jobs are added: the lifecycle is the same, the phases overlap.
        let mut process = g.start(graphile_options(batch, WORKERS, n))?;
        let node_cpu = process.cpu_seconds();
        let window = Window::open(&ctx.server, admin)?;
        let added = produce(ctx, c, Some(n), None, batch as usize)?;
        ensure!(added == n, "enqueued {added} of {n} jobs");
        process.wait_mark(n, Duration::from_secs(600))?;
        wait_empty(admin, Duration::from_secs(60))?;
        let node_cpu = process.cpu_seconds() - node_cpu;
        process.stop()?;
        return window.close_after(FLUSH, &ctx.server, admin, node_cpu);
    }
    let window = Window::open(&ctx.server, admin)?;
    let added = produce(ctx, c, Some(n), None, batch as usize)?;
    ensure!(added == n, "enqueued {added} of {n} jobs");
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    let burned = super::burn(&mut workers, batch, n)?;
    drop(workers);
    ensure!(burned.done == n, "completed {} of {n} jobs", burned.done);
    window.close_after(FLUSH, &ctx.server, admin, 0.0)
}
