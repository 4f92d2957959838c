//! The machine's commit-rate ceiling: `pgbench -N` (one-row updates, no branch/teller
//! updates), 8 clients, prepared statements, on a database of its own (scale 10).

use std::process::Command;

use anyhow::{bail, Context, Result};
use postgres::Client;

use super::{attempt, Ctx};
use crate::comparators::Comparator;
use crate::db::{self, Window};
use crate::results::Measurement;

pub const VARIANT: &str = "-N, 8 clients";
pub const DB: &str = "bench_pgbench";

/// Runs `pgbench -N` once (the queues of the run play no part).
pub fn run(ctx: &Ctx, admin: &mut Client, _: &[&dyn Comparator]) -> Vec<Measurement> {
    vec![attempt("p", VARIANT, "pgbench", || one(ctx, admin))]
}

fn pgbench(ctx: &Ctx, args: &[&str]) -> Result<String> {
    let output = Command::new(&ctx.cfg.pgbench)
        .args([
            "-h",
            &ctx.cfg.socket_dir,
            "-p",
            &ctx.cfg.port,
            "-U",
            "postgres",
        ])
        .args(args)
        .arg(DB)
        .output()
        .with_context(|| format!("running {}", ctx.cfg.pgbench.display()))?;
    if !output.status.success() {
        bail!(
            "pgbench {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn one(ctx: &Ctx, admin: &mut Client) -> Result<Measurement> {
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&DB])?
        .is_some();
    if !exists {
        admin.batch_execute(&format!("CREATE DATABASE {DB}"))?;
    }
    pgbench(ctx, &["-i", "-q", "-s", "10"])?;
    db::checkpoint(admin)?;
    let secs = ctx.cfg.scale.pgbench_secs.to_string();
    let window = Window::open(&ctx.server, admin)?;
    let out = pgbench(
        ctx,
        &["-N", "-c", "8", "-j", "2", "-M", "prepared", "-T", &secs],
    )?;
    let span = window.close(&ctx.server, admin, 0.0)?;
    let tps: f64 = out
        .lines()
        .find(|l| l.starts_with("tps = "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no tps in pgbench's output:\n{out}"))?;
    let transactions: u64 = out
        .lines()
        .find(|l| l.starts_with("number of transactions actually processed"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.split('/').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut m = Measurement::new("p", VARIANT, "pgbench").throughput(transactions, &span);
    m.rate = Some(tps);
    Ok(m.note("transactions per second (each: 1 UPDATE, 1 SELECT, 1 INSERT), server CPU per 1,000 transactions"))
}
