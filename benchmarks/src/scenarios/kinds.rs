//! k. Kinds-filtered claims (issue 18): 200,000 queued jobs of another kind ahead of the jobs
//! of the wanted kind, all in one queue. One session times claims of one job, alternating a
//! claim with `kinds => ARRAY['wanted']` (which must find the wanted jobs behind the others)
//! and a claim without `kinds` (which takes the oldest job), each claim completed at once.
//! pg_jobs only: the other queues have no kinds to filter on. The queue claims by kind
//! (`claims_by_kind`), as a queue with such a backlog should.

use std::time::Instant;

use anyhow::{ensure, Result};
use postgres::Client;

use super::{attempt, percentile, Ctx};
use crate::comparators::pg_jobs::QUEUE;
use crate::comparators::{load_in_chunks, Comparator};
use crate::db;
use crate::format::int;
use crate::results::Measurement;

pub const UNFILTERED: &str = "unfiltered claim";
pub const FILTERED: &str = "kinds-filtered claim";
const WANTED: &str = "wanted";
const OTHER: &str = "other";

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    if c.name() != "pg_jobs" {
        return Vec::new();
    }
    let mut unfiltered = None;
    let filtered = attempt("k", FILTERED, c.name(), || {
        let (f, u) = measure(ctx, admin, c)?;
        unfiltered = Some(u);
        Ok(f)
    });
    let unfiltered = unfiltered.unwrap_or_else(|| {
        Measurement::new("k", UNFILTERED, c.name())
            .missing(filtered.missing.clone().unwrap_or_default())
    });
    vec![unfiltered, filtered]
}

/// Loads `n` queued jobs of `kind`.
fn load(admin: &mut Client, kind: &str, n: u64) -> Result<()> {
    let statement = admin.prepare(&format!(
        "SELECT count(*) FROM jobs_enqueue_batch('{QUEUE}',
             ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g),
             kind => $3::text)"
    ))?;
    load_in_chunks(n, |first, last| {
        admin.query_one(&statement, &[&first, &last, &kind])?;
        Ok(())
    })
}

fn figures(variant: &str, mut times: Vec<f64>, backlog: u64) -> Measurement {
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    times.sort_by(f64::total_cmp);
    let mut m = Measurement::new("k", variant, "pg_jobs");
    m.jobs = times.len() as u64;
    m.seconds = times.iter().sum::<f64>() / 1000.0;
    m.mean_ms = Some(mean);
    m.p50_ms = percentile(&times, 50.0);
    m.p99_ms = percentile(&times, 99.0);
    m.max_ms = times.last().copied();
    m.note(format!(
        "{} queued jobs of kind '{OTHER}' ahead of the '{WANTED}' ones; claims of 1 job from one session, each completed at once",
        int(backlog as f64)
    ))
}

fn measure(
    ctx: &Ctx,
    admin: &mut Client,
    c: &dyn Comparator,
) -> Result<(Measurement, Measurement)> {
    let (backlog, claims) = (ctx.cfg.scale.kinds_backlog, ctx.cfg.scale.kinds_claims);
    c.reset(admin)?;
    admin.execute(
        &format!("SELECT jobs_create_queue('{QUEUE}', claims_by_kind => true)"),
        &[],
    )?;
    load(admin, OTHER, backlog)?;
    load(admin, WANTED, claims)?;
    db::settle(admin, c.table())?;

    let mut conn = c.connect(&ctx.cfg)?;
    let filtered = conn.prepare(&format!(
        "SELECT id, lease, kind FROM jobs_claim('{QUEUE}', n => 1, kinds => ARRAY['{WANTED}'])"
    ))?;
    let unfiltered = conn.prepare(&format!(
        "SELECT id, lease, kind FROM jobs_claim('{QUEUE}', n => 1)"
    ))?;
    let complete = conn.prepare("SELECT jobs_complete($1::bigint, $2::uuid)")?;
    let (mut with_kinds, mut without) = (Vec::new(), Vec::new());
    for _ in 0..claims {
        for (statement, times, want) in [
            (&filtered, &mut with_kinds, WANTED),
            (&unfiltered, &mut without, OTHER),
        ] {
            let started = Instant::now();
            let rows = conn.query(statement, &[])?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            ensure!(
                rows.len() == 1,
                "a claim returned {} jobs instead of 1",
                rows.len()
            );
            let (id, lease, kind): (i64, uuid::Uuid, String) =
                (rows[0].get(0), rows[0].get(1), rows[0].get(2));
            ensure!(
                kind == want,
                "a claim returned a job of kind {kind:?}, expected {want:?}"
            );
            conn.query_one(&complete, &[&id, &lease])?;
        }
    }
    c.reset(admin)?;
    Ok((
        figures(FILTERED, with_kinds, backlog),
        figures(UNFILTERED, without, backlog),
    ))
}
