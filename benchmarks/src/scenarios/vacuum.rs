//! v. Dead rows held back while workers wait (issue 19): 16 workers wait on an empty queue,
//! each in its queue's natural waiting mode, while another session updates rows of an
//! unrelated busy table for a few seconds; then `VACUUM (VERBOSE)` of that table reports how
//! many dead row versions it could not remove yet. A waiting statement that holds a snapshot
//! (its backend's xmin) keeps every row version deleted after that snapshot was taken, in
//! every table of the database; one that holds none keeps nothing. The baseline runs the same
//! updates and VACUUM with no workers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use postgres::{Client, NoTls};

use super::{attempt, complete, connect_workers, with_waiting_workers, Ctx};
use crate::comparators::graphile::GwOptions;
use crate::comparators::Comparator;
use crate::config::{IDLE_WORKERS, LOAD_ROLES};
use crate::results::Measurement;

pub const VARIANT: &str = "16 waiting workers";
pub const BASELINE: &str = "no workers (baseline)";
const TABLE: &str = "public.bench_busy";
/// Time the workers get to settle into their wait before the updates start; short enough
/// that a 10-second wait begun then is still running when VACUUM runs.
const SETTLE: Duration = Duration::from_secs(2);
/// Rows per updating transaction, and the pause between transactions.
const ROWS_PER_UPDATE: i64 = 100;
const UPDATE_PAUSE: Duration = Duration::from_millis(10);

/// What one VACUUM found.
#[derive(Debug, Default)]
struct Outcome {
    made: u64,
    kept: u64,
    oldest_snapshot_s: Option<f64>,
}

/// The baseline without workers, then each queue's waiting workers.
pub fn run(ctx: &Ctx, admin: &mut Client, queues: &[&dyn Comparator]) -> Vec<Measurement> {
    let mut out = vec![baseline(ctx, admin)];
    for c in queues {
        out.push(waiting(ctx, admin, *c));
    }
    out
}

fn baseline(ctx: &Ctx, admin: &mut Client) -> Measurement {
    attempt("v", BASELINE, "-", || {
        create_table(ctx, admin)?;
        let o = update_and_vacuum(ctx, admin)?;
        Ok(figures(Measurement::new("v", BASELINE, "-"), &o, ctx))
    })
}

fn waiting(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Measurement {
    attempt("v", VARIANT, c.name(), || {
        c.reset(admin)?;
        create_table(ctx, admin)?;
        let o = if let Some(g) = c.external() {
            let process = g.start(GwOptions::one_per_claim(IDLE_WORKERS, 0))?;
            let o = wait_then(ctx, admin);
            process.stop()?;
            o?
        } else {
            let mut workers = connect_workers(ctx, c, IDLE_WORKERS)?;
            with_waiting_workers(c, &mut workers, complete, || wait_then(ctx, admin))??
        };
        let m = figures(Measurement::new("v", VARIANT, c.name()), &o, ctx);
        Ok(m.note(c.waiting_mode()))
    })
}

fn figures(mut m: Measurement, o: &Outcome, ctx: &Ctx) -> Measurement {
    m.dead_rows_made = Some(o.made);
    m.dead_rows_kept = Some(o.kept);
    m.oldest_snapshot_s = o.oldest_snapshot_s;
    m.seconds = ctx.cfg.scale.vacuum_secs as f64;
    m
}

fn wait_then(ctx: &Ctx, admin: &mut Client) -> Result<Outcome> {
    std::thread::sleep(SETTLE);
    update_and_vacuum(ctx, admin)
}

/// A fresh busy table, vacuumed, with autovacuum off so that only our VACUUM removes rows.
fn create_table(ctx: &Ctx, admin: &mut Client) -> Result<()> {
    admin.batch_execute(&format!(
        "DROP TABLE IF EXISTS {TABLE};
         CREATE TABLE {TABLE} (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0)
           WITH (autovacuum_enabled = false);
         INSERT INTO {TABLE} (id) SELECT g FROM generate_series(1, {}) g;",
        ctx.cfg.scale.vacuum_rows
    ))?;
    // A statement of its own: VACUUM cannot run inside the implicit transaction of a batch.
    admin.batch_execute(&format!("VACUUM (ANALYZE) {TABLE}"))?;
    Ok(())
}

/// Updates rows of the busy table for the configured time, then VACUUMs it at once; returns
/// the dead row versions made and those VACUUM reported as not yet removable.
fn update_and_vacuum(ctx: &Ctx, admin: &mut Client) -> Result<Outcome> {
    let rows = ctx.cfg.scale.vacuum_rows as i64;
    let mut updater = ctx.connect()?;
    let update = updater.prepare(&format!(
        "UPDATE {TABLE} SET n = n + 1 WHERE id BETWEEN $1::bigint AND $2::bigint"
    ))?;
    let mut made = 0u64;
    let mut first = 1i64;
    let end = Instant::now() + Duration::from_secs(ctx.cfg.scale.vacuum_secs);
    while Instant::now() < end {
        let last = (first + ROWS_PER_UPDATE - 1).min(rows);
        made += updater.execute(&update, &[&first, &last])?;
        first = if last >= rows { 1 } else { last + 1 };
        std::thread::sleep(UPDATE_PAUSE);
    }
    drop(updater);
    // The oldest snapshot any load-generator session holds right now (the updater is gone).
    let roles: Vec<&str> = LOAD_ROLES.to_vec();
    let oldest: Option<f64> = admin
        .query_one(
            "SELECT extract(epoch FROM max(now() - coalesce(xact_start, query_start)))::float8
               FROM pg_stat_activity
              WHERE usename = ANY($1::text[]) AND backend_xmin IS NOT NULL",
            &[&roles],
        )?
        .get(0);
    let kept = vacuum_verbose(ctx)?;
    Ok(Outcome {
        made,
        kept,
        oldest_snapshot_s: oldest,
    })
}

/// Runs VACUUM (VERBOSE) on the busy table from a session of its own and reads "N are dead but
/// not yet removable" from the report it sends as INFO messages.
fn vacuum_verbose(ctx: &Ctx) -> Result<u64> {
    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&messages);
    let mut config: postgres::Config = ctx.cfg.admin_dsn.parse()?;
    config.notice_callback(move |notice| sink.lock().unwrap().push(notice.message().to_owned()));
    let mut conn = config
        .connect(NoTls)
        .with_context(|| format!("connecting to {}", ctx.cfg.admin_dsn))?;
    conn.batch_execute(&format!("VACUUM (VERBOSE) {TABLE}"))?;
    drop(conn);
    let messages = messages.lock().unwrap();
    not_removable(&messages).with_context(|| {
        format!(
            "VACUUM (VERBOSE) printed no \"are dead but not yet removable\" count; it said: {}",
            messages.join(" / ")
        )
    })
}

/// The "N are dead but not yet removable" count of VACUUM (VERBOSE)'s report (PostgreSQL 15:
/// "tuples: 0 removed, 10000 remain, 2500 are dead but not yet removable").
fn not_removable(messages: &[String]) -> Option<u64> {
    messages
        .iter()
        .flat_map(|m| m.lines())
        .filter_map(|line| line.trim().strip_prefix("tuples: "))
        .flat_map(|rest| rest.split(", "))
        .find(|part| part.ends_with("are dead but not yet removable"))
        .and_then(|part| part.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::not_removable;

    #[test]
    fn reads_the_not_removable_count_from_vacuum_verbose() {
        let report = "vacuuming \"bench.public.bench_busy\"\n\
            pages: 0 removed, 64 remain, 64 scanned (100.00% of total)\n\
            tuples: 120 removed, 10000 remain, 25300 are dead but not yet removable\n\
            removable cutoff: 1234, which was 17 XIDs old when operation ended";
        assert_eq!(not_removable(&["other".into(), report.into()]), Some(25300));
        let clean = "tuples: 5 removed, 10 remain, 0 are dead but not yet removable";
        assert_eq!(not_removable(&[clean.into()]), Some(0));
        assert_eq!(
            not_removable(&["tuples: 5 removed, 10 remain".into()]),
            None
        );
    }
}
