//! Observing: `jobs_get`, `jobs_list`, `jobs_metrics`, `jobs_worker_status`, and in schema
//! `jobs` the helpers `jobs.backoff_delay` and `jobs.runtime_state`.

use std::fmt::Write;

use pgrx::prelude::*;

use super::args::{check_queue_name, check_range, limits};
use crate::engine::access::{self, Role};
use crate::engine::observe::{self, ListFilter, QueueStats, LIST_STATES};
use crate::engine::tenants;
use crate::pg::datum::JobRow;
use crate::pg::errors::{raise, required, BAD_ARGUMENT};

/// The job with this id, or NULL.
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_get(id: Option<i64>) -> Option<JobRow> {
    access::require(Role::Client, "read jobs");
    observe::get(required(id, "id"), &tenants::scope())
}

/// Jobs newest first, filtered by queue, state and kind; pass the last id of a page as
/// `before_id` to get the next one. `state` is a job state, or `ready` / `scheduled` for the
/// queued jobs that are due / not yet due.
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_list(
    queue: default!(Option<&str>, "NULL"),
    state: default!(Option<&str>, "NULL"),
    kind: default!(Option<&str>, "NULL"),
    limit: default!(Option<i32>, 100),
    before_id: default!(Option<i64>, "NULL"),
) -> SetOfIterator<'static, JobRow> {
    access::require(Role::Client, "read jobs");
    if let Some(queue) = queue {
        check_queue_name(queue, "queue");
    }
    if let Some(state) = state {
        if !LIST_STATES.contains(&state) {
            raise(
                BAD_ARGUMENT,
                format!(
                    "state must be one of {}, got '{state}'",
                    LIST_STATES.join(", ")
                ),
            );
        }
    }
    let limit = required(limit, "limit");
    check_range(limit.into(), "limit", 1, limits::LIST);
    SetOfIterator::new(observe::list(&ListFilter {
        queue,
        state,
        kind,
        limit,
        before_id,
        scope: tenants::scope(),
    }))
}

/// Per-queue job counts by state, the oldest ready job's age and recent throughput, as
/// Prometheus text.
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_metrics() -> String {
    access::require(Role::Client, "read the queues' metrics");
    render_metrics(&observe::queue_stats())
}

fn render_metrics(stats: &[QueueStats]) -> String {
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
        "Jobs by queue and state (ready: queued and due; scheduled: queued, not yet due); the states add up.",
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
        "pg_jobs_oldest_ready_age_seconds",
        "Age of the oldest job that is due and still queued.",
        "gauge",
        &mut stats.iter().map(|s| {
            (
                format!("queue=\"{}\"", s.queue),
                s.oldest_ready_seconds.to_string(),
            )
        }),
    );
    family(
        "pg_jobs_running_past_lease",
        "Running jobs whose lease has passed and that the worker has not reclaimed yet.",
        "gauge",
        &mut stats.iter().map(|s| {
            (
                format!("queue=\"{}\"", s.queue),
                s.running_past_lease.to_string(),
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

/// A timestamptz from microseconds since the PostgreSQL epoch, NULL for 0 (never).
fn timestamp(micros: i64) -> Option<TimestampWithTimeZone> {
    (micros != 0)
        .then(|| TimestampWithTimeZone::try_from(micros).ok())
        .flatten()
}

/// One row per worker: which database it serves, its pid, its last tick and last error.
// pgrx reads the column names from `name!` in the signature, so the type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_worker_status() -> TableIterator<
    'static,
    (
        name!(database, String),
        name!(pid, Option<i32>),
        name!(started_at, Option<TimestampWithTimeZone>),
        name!(last_tick, Option<TimestampWithTimeZone>),
        name!(serving, bool),
        name!(ticks, i64),
        name!(reclaimed, i64),
        name!(purged, i64),
        name!(floors_healed, i64),
        name!(scheduled, i64),
        name!(last_error, Option<String>),
        name!(last_error_at, Option<TimestampWithTimeZone>),
    ),
> {
    access::require(Role::Client, "read the background workers' status");
    TableIterator::new(observe::worker_reports().into_iter().map(|w| {
        (
            w.database,
            w.pid,
            timestamp(w.started_at),
            timestamp(w.last_tick),
            w.serving,
            w.ticks,
            w.reclaimed,
            w.purged,
            w.floors_healed,
            w.scheduled,
            w.last_error,
            timestamp(w.last_error_at),
        )
    }))
}

/// SQL functions in the extension's own schema.
#[pg_schema]
mod jobs {
    use pgrx::prelude::*;

    use crate::api::args::limits;
    use crate::engine::access::{self, Role};
    use crate::engine::backoff;
    use crate::engine::tenants;
    use crate::pg::errors::{raise, BAD_ARGUMENT};

    /// The retry delay for a job that failed attempt `attempt` on a queue with these settings;
    /// `jobs_fail` uses it when no `retry_in` is given.
    #[pg_extern(volatile, parallel_safe)]
    #[search_path(pg_catalog, pg_temp)]
    fn backoff_delay(base: Interval, max: Interval, jitter: f64, attempt: i32) -> Interval {
        let (base_micros, max_micros) = (base.as_micros(), max.as_micros());
        if base_micros < 0 || base_micros > i128::from(limits::DELAY) {
            raise(
                BAD_ARGUMENT,
                format!("base must be at least 0 and at most 100 years, got '{base}'"),
            );
        }
        if max_micros < base_micros || max_micros > i128::from(limits::DELAY) {
            raise(
                BAD_ARGUMENT,
                format!("max must be at least base and at most 100 years, got base '{base}' and max '{max}'"),
            );
        }
        if !(0.0..=1.0).contains(&jitter) {
            raise(
                BAD_ARGUMENT,
                format!("jitter must be between 0 and 1, got {jitter}"),
            );
        }
        if attempt < 1 {
            raise(
                BAD_ARGUMENT,
                format!("attempt must be at least 1, got {attempt}"),
            );
        }
        let micros = backoff::delay_micros(
            base_micros,
            max_micros,
            jitter,
            attempt,
            backoff::random_fraction(),
        );
        // At most 100 years plus the jitter: far inside the interval range.
        Interval::from_micros(micros as i64)
    }

    /// The queue's claim floor and wake-up slot as this server's shared memory holds them, for
    /// diagnostics and tests: no rows without the preload.
    #[allow(clippy::type_complexity)]
    #[pg_extern(volatile, parallel_restricted, security_definer)]
    #[search_path(pg_catalog, pg_temp)]
    fn runtime_state(
        queue: &str,
    ) -> TableIterator<
        'static,
        (
            name!(floor_priority, Option<i16>),
            name!(floor_run_at, Option<TimestampWithTimeZone>),
            name!(floor_id, Option<i64>),
            name!(floor_generation, i64),
            name!(reach_id, Option<i64>),
            name!(waiters, i32),
            name!(wake_generation, i64),
            name!(next_due, Option<TimestampWithTimeZone>),
        ),
    > {
        access::require(Role::Client, "read pg_jobs's shared state");
        crate::api::args::check_queue_name(queue, "queue");
        let Some(state) = crate::engine::observe::runtime_state(queue) else {
            return TableIterator::empty();
        };
        let at = |micros: i64| TimestampWithTimeZone::try_from(micros).ok();
        TableIterator::once((
            state.floor.map(|f| f.priority),
            state.floor.and_then(|f| at(f.run_at)),
            state.floor.map(|f| f.id),
            state.floor_generation as i64,
            state.reach.map(|r| r.id),
            state.waiters as i32,
            state.wake_generation as i64,
            state.next_due.and_then(at),
        ))
    }

    /// The tenant scope of the calling session, for the row-level security policy on
    /// `jobs.job` and the `jobs.queue_stats` view: NULL for every job, an empty array for the
    /// jobs without a tenant, else the tenants `pg_jobs.tenant` names (each checked against the
    /// caller's grants now; an ungranted one raises 42501).
    #[pg_extern(stable, parallel_restricted, security_definer)]
    #[search_path(pg_catalog, pg_temp)]
    fn tenant_scope() -> Option<Vec<String>> {
        tenants::scope().as_array()
    }
}
