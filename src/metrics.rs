//! `jobs_metrics()`: `jobs.queue_stats` in the Prometheus text exposition format.

use std::fmt::Write;

use pgrx::prelude::*;

use crate::spi::{with_client, Statement};

static STATS: Statement = Statement {
    sql: "SELECT queue, paused, queued, scheduled, running, succeeded, failed, cancelled,
                 coalesce(extract(epoch FROM oldest_due_age), 0)::float8, finished_last_minute
            FROM jobs.queue_stats ORDER BY queue",
    args: &[],
};

/// One queue's line of `jobs.queue_stats`.
struct QueueStats {
    queue: String,
    paused: bool,
    by_state: [(&'static str, i64); 6],
    oldest_due_seconds: f64,
    finished_last_minute: i64,
}

/// Per-queue job counts by state, the oldest due job's age and recent throughput, as
/// Prometheus text.
#[pg_extern(volatile, parallel_restricted)]
fn jobs_metrics() -> String {
    let stats = with_client(|client| {
        STATS
            .run(client, &[])
            .iter()
            .map(|row| {
                let count = |i: usize| row.get::<i64>(i).unwrap_or(0);
                QueueStats {
                    queue: row.get(1).unwrap_or_default(),
                    paused: row.get(2).unwrap_or(false),
                    by_state: [
                        ("queued", count(3)),
                        ("scheduled", count(4)),
                        ("running", count(5)),
                        ("succeeded", count(6)),
                        ("failed", count(7)),
                        ("cancelled", count(8)),
                    ],
                    oldest_due_seconds: row.get(9).unwrap_or(0.0),
                    finished_last_minute: count(10),
                }
            })
            .collect::<Vec<_>>()
    });
    render(&stats)
}

fn render(stats: &[QueueStats]) -> String {
    let mut out = String::new();
    let mut family =
        |name: &str, help: &str, kind: &str, lines: &mut dyn Iterator<Item = (String, String)>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in lines {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        };
    family(
        "pg_jobs_jobs",
        "Jobs by queue and state (scheduled: queued but not yet due).",
        "gauge",
        &mut stats.iter().flat_map(|s| {
            s.by_state.iter().map(move |(state, n)| {
                (
                    format!("queue=\"{}\",state=\"{state}\"", s.queue),
                    n.to_string(),
                )
            })
        }),
    );
    family(
        "pg_jobs_oldest_due_age_seconds",
        "Age of the oldest job that is due and still queued.",
        "gauge",
        &mut stats.iter().map(|s| {
            (
                format!("queue=\"{}\"", s.queue),
                s.oldest_due_seconds.to_string(),
            )
        }),
    );
    family(
        "pg_jobs_finished_last_minute",
        "Jobs that finished in the last minute.",
        "gauge",
        &mut stats.iter().map(|s| {
            (
                format!("queue=\"{}\"", s.queue),
                s.finished_last_minute.to_string(),
            )
        }),
    );
    family(
        "pg_jobs_queue_paused",
        "1 when the queue is paused.",
        "gauge",
        &mut stats.iter().map(|s| {
            (
                format!("queue=\"{}\"", s.queue),
                u8::from(s.paused).to_string(),
            )
        }),
    );
    out
}
