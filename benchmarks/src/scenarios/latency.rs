//! c. Pickup latency: one job every 10 ms for the configured time (30 s at full scale) to 8
//! waiting workers, each in its queue's natural waiting mode. Latency runs from the moment the
//! enqueue's COMMIT returned to the client to the moment the job is in a worker's hands
//! (claim returned; for Graphile Worker, the task started — stamped by the Node process).

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use postgres::Client;

use super::{attempt, connect_workers, percentile, with_waiting_workers, Ctx};
use crate::comparators::graphile::{Graphile, GwOptions};
use crate::comparators::{payload, Claimed, Comparator, Producer, Worker};
use crate::config::{LATENCY_INTERVAL_MS, WORKERS};
use crate::db::{self, Span, Window};
use crate::results::Measurement;

pub const VARIANT: &str = "1 job / 10 ms";

pub fn run(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Vec<Measurement> {
    vec![attempt("c", VARIANT, c.name(), || {
        c.reset(admin)?;
        db::settle(admin, c.table())?;
        let (mut latencies, sent, span) = match c.external() {
            Some(g) => graphile(ctx, admin, c, g)?,
            None => sql(ctx, admin, c)?,
        };
        c.reset(admin)?;
        latencies.sort_by(f64::total_cmp);
        let mut m =
            Measurement::new("c", VARIANT, c.name()).throughput(latencies.len() as u64, &span);
        m.p50_ms = percentile(&latencies, 50.0);
        m.p99_ms = percentile(&latencies, 99.0);
        m.max_ms = latencies.last().copied();
        let lost = sent - latencies.len() as u64;
        m = m.note(format!(
            "{}{}",
            c.waiting_mode(),
            if lost > 0 {
                format!("; {lost} of {sent} jobs not picked up in time")
            } else {
                String::new()
            }
        ));
        Ok(m)
    })]
}

/// Sends one job every interval for the configured time; calls `sent(id)` right after each
/// enqueue's commit returned.
fn send(ctx: &Ctx, producer: &mut dyn Producer, mut sent: impl FnMut(i64)) -> Result<u64> {
    let interval = Duration::from_millis(LATENCY_INTERVAL_MS);
    let count = ctx.cfg.scale.latency_secs * 1000 / LATENCY_INTERVAL_MS;
    let start = Instant::now();
    for k in 0..count {
        let due = start + interval * k as u32;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let id = producer.enqueue(&payload(k))?;
        sent(id);
    }
    Ok(count)
}

type Latencies = (Vec<f64>, u64, Span);

fn sql(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator) -> Result<Latencies> {
    let mut workers = connect_workers(ctx, c, WORKERS)?;
    let mut producer = c.producer(c.connect(&ctx.cfg)?)?;
    let picked: Mutex<Vec<(i64, Instant)>> = Mutex::new(Vec::new());
    let mut committed: Vec<(i64, Instant)> = Vec::new();
    let record_pick = |w: &mut dyn Worker, jobs: &[Claimed]| {
        let at = Instant::now();
        picked
            .lock()
            .unwrap()
            .extend(jobs.iter().map(|j| (j.id, at)));
        w.complete(jobs)
    };
    let (sent, span) = with_waiting_workers(c, &mut workers, record_pick, || {
        // Let every worker settle into waiting before the first job.
        std::thread::sleep(Duration::from_secs(1));
        let window = Window::open(&ctx.server, admin)?;
        let sent = send(ctx, producer.as_mut(), |id| {
            committed.push((id, Instant::now()))
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while picked.lock().unwrap().len() < committed.len() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let span = window.close(&ctx.server, admin, 0.0);
        anyhow::Ok((sent?, span?))
    })??;

    let picked: std::collections::HashMap<i64, Instant> =
        picked.into_inner().unwrap().into_iter().collect();
    let latencies = committed
        .iter()
        .filter_map(|(id, at)| {
            picked
                .get(id)
                .map(|p| p.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    Ok((latencies, sent, span))
}

fn wall_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn graphile(ctx: &Ctx, admin: &mut Client, c: &dyn Comparator, g: &Graphile) -> Result<Latencies> {
    let mut process = g.start(GwOptions {
        stamp: true,
        ..GwOptions::one_per_claim(WORKERS, 0)
    })?;
    let mut producer = c.producer(c.connect(&ctx.cfg)?)?;
    std::thread::sleep(Duration::from_secs(1));
    let node_cpu = process.cpu_seconds();
    let window = Window::open(&ctx.server, admin)?;
    let mut committed: Vec<(i64, i64)> = Vec::new();
    let sent = send(ctx, producer.as_mut(), |id| {
        committed.push((id, wall_micros()))
    })?;
    process.collect_picks(committed.len(), Duration::from_secs(10));
    let span = window.close(&ctx.server, admin, process.cpu_seconds() - node_cpu)?;
    let picks: std::collections::HashMap<i64, i64> = process.picks.iter().copied().collect();
    process.stop()?;
    let latencies = committed
        .iter()
        .filter_map(|(id, at)| picks.get(id).map(|p| (p - at).max(0) as f64 / 1000.0))
        .collect();
    Ok((latencies, sent, span))
}
