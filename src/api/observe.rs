//! Observing: `jobs_get`, `jobs_list`, `jobs_metrics`, `jobs_totals`, `jobs_worker_status`,
//! and in schema `jobs` the helpers `jobs.backoff_delay` and `jobs.runtime_state`.

use std::fmt::Write;

use pgrx::prelude::*;

use super::args::{check_queue_name, check_range, limits};
use crate::engine::access::{self, Role};
use crate::engine::distribute;
use crate::engine::observe::{
    self, ClientWorker, ListFilter, QueueStats, QueueTotals, WorkerReport, LIST_STATES,
};
use crate::engine::tenants;
use crate::pg::clock::server_now;
use crate::pg::errors::{raise, required, BAD_ARGUMENT};
use crate::pg::srf::{SetOfIterator, TableIterator};
use crate::storage::rows::JobRow;

/// The job with this id, or NULL.
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_get(id: Option<i64>) -> Option<JobRow> {
    access::require_to_read(Role::Client, "read jobs");
    let id = required(id, "id");
    distribute::on_job(id, || observe::get(id, &tenants::scope()))
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
    access::require_to_read(Role::Client, "read jobs");
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

/// Per-queue job counts by state, the oldest ready job's age, running jobs past their lease and
/// recent throughput; jobs completed, failed, retried, released, lost, cancelled and enqueued
/// since the server started; the client workers (`jobs.workers`); and the health of this
/// database's background worker: as Prometheus text. The names are those of
/// clients/postgres_exporter/queries.yaml. A session limited to some
/// tenants sees their jobs only, and no worker health.
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_metrics() -> String {
    access::require_to_read(Role::Client, "read the queues' metrics");
    let scope = tenants::scope();
    let worker = scope
        .is_all()
        .then(|| Health::of(observe::this_database_worker()));
    let mut out = render_metrics(&observe::queue_stats());
    render_totals(&mut out, &observe::totals(&scope));
    render_clients(&mut out, &observe::client_workers());
    if let Some(worker) = worker {
        render_worker(&mut out, &worker);
    }
    out
}

/// Per queue, the jobs settled since the server started (or since shared memory was last
/// reset by a crash restart): completed, failed for good, retried (a failed attempt or an
/// expired lease that runs again), released (handed back by their holder), lost (heartbeat and
/// settle calls whose lease was no longer the job's), cancelled, and the jobs enqueued.
/// Counted when the transaction commits. A session limited to some
/// tenants sees their jobs' counts; a session that sees every tenant also gets a line with a
/// NULL queue when more queues settled jobs than shared memory holds counters for.
// pgrx reads the column names from `name!` in the signature, so the type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted, security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn jobs_totals() -> TableIterator<
    'static,
    (
        name!(queue, Option<String>),
        name!(completed, i64),
        name!(failed, i64),
        name!(retried, i64),
        name!(released, i64),
        name!(lost, i64),
        name!(cancelled, i64),
        name!(enqueued, i64),
    ),
> {
    access::require_to_read(Role::Client, "read the queues' totals");
    let totals = observe::totals(&tenants::scope());
    TableIterator::new(totals.into_iter().map(|t| {
        (
            t.queue,
            counter(t.counts.completed),
            counter(t.counts.failed),
            counter(t.counts.retried),
            counter(t.counts.released),
            counter(t.counts.lost),
            counter(t.counts.cancelled),
            counter(t.counts.enqueued),
        )
    }))
}

/// A shared-memory counter as a bigint (it cannot reach i64::MAX in practice).
fn counter(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A Prometheus label value, escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one metric family: its help, its type and its lines (labels, value).
fn write_family(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    lines: &mut dyn Iterator<Item = (String, String)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in lines {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

fn render_totals(out: &mut String, totals: &[QueueTotals]) {
    let queue_label = |t: &QueueTotals| format!("queue=\"{}\"", t.queue.as_deref().unwrap_or(""));
    for (name, help, pick) in [
        (
            "pg_jobs_completed_total",
            "Jobs that succeeded since the server started (queue=\"\": queues beyond the counters shared memory holds).",
            (|c: &observe::QueueTotals| c.counts.completed) as fn(&QueueTotals) -> u64,
        ),
        (
            "pg_jobs_failed_total",
            "Jobs that failed for good (and were dead-lettered where set) since the server started.",
            |c: &QueueTotals| c.counts.failed,
        ),
        (
            "pg_jobs_retried_total",
            "Failed attempts and expired leases that were scheduled to run again, since the server started.",
            |c: &QueueTotals| c.counts.retried,
        ),
        (
            "pg_jobs_released_total",
            "Jobs their holder handed back without spending the attempt (jobs_release), since the server started.",
            |c: &QueueTotals| c.counts.released,
        ),
        (
            "pg_jobs_lost_total",
            "Heartbeat and settle calls answered lost (their lease was no longer the job's), since the server started.",
            |c: &QueueTotals| c.counts.lost,
        ),
        (
            "pg_jobs_cancelled_total",
            "Queued or running jobs cancelled, since the server started.",
            |c: &QueueTotals| c.counts.cancelled,
        ),
        (
            "pg_jobs_enqueued_total",
            "Jobs enqueued (schedules' slots and dead-letter copies included; not unique duplicates), since the server started.",
            |c: &QueueTotals| c.counts.enqueued,
        ),
    ] {
        write_family(
            out,
            name,
            help,
            "counter",
            &mut totals.iter().map(|t| (queue_label(t), pick(t).to_string())),
        );
    }
}

fn render_clients(out: &mut String, clients: &[ClientWorker]) {
    let labels = |c: &ClientWorker| format!("worker=\"{}\"", label_value(&c.worker));
    for (name, help, pick) in [
        (
            "pg_jobs_client_running",
            "Jobs a client worker runs (jobs.workers: by the worker name its claims gave).",
            (|c: &ClientWorker| c.running.to_string()) as fn(&ClientWorker) -> String,
        ),
        (
            "pg_jobs_client_waiting",
            "Claims of a client worker waiting for work now.",
            |c: &ClientWorker| c.waiting.to_string(),
        ),
        (
            "pg_jobs_client_leases_expiring",
            "Jobs of a client worker whose lease has less than a quarter of its length left, or has passed (its heartbeats are late).",
            |c: &ClientWorker| c.leases_expiring.to_string(),
        ),
        (
            "pg_jobs_client_last_seen_age_seconds",
            "Seconds since a client worker's last claim or heartbeat (0 while a claim of it waits).",
            |c: &ClientWorker| c.last_seen_age_seconds.to_string(),
        ),
    ] {
        write_family(
            out,
            name,
            help,
            "gauge",
            &mut clients.iter().map(|c| (labels(c), pick(c))),
        );
    }
}

/// The background worker's health as metrics show it.
struct Health {
    database: String,
    report: Option<WorkerReport>,
}

impl Health {
    fn of(report: Option<WorkerReport>) -> Health {
        Health {
            database: crate::pg::database::current_database_name(),
            report,
        }
    }
}

/// Seconds from `micros` (PostgreSQL epoch) to now; +Inf for 0 (never).
fn age_seconds(micros: i64, now: i64) -> String {
    if micros == 0 {
        "+Inf".to_owned()
    } else {
        format!("{}", (now - micros).max(0) as f64 / 1e6)
    }
}

fn render_worker(out: &mut String, health: &Health) {
    let labels = format!("database=\"{}\"", label_value(&health.database));
    let now = server_now();
    let report = health.report.as_ref();
    let up = report.is_some_and(|r| r.pid.is_some() && r.serving);
    let mut gauge = |name: &str, help: &str, kind: &str, value: String| {
        write_family(
            out,
            name,
            help,
            kind,
            &mut std::iter::once((labels.clone(), value)),
        );
    };
    gauge(
        "pg_jobs_worker_up",
        "1 when a pg_jobs background worker runs for this database and found the extension at its last tick.",
        "gauge",
        u8::from(up).to_string(),
    );
    gauge(
        "pg_jobs_database_served",
        "1 when pg_jobs is preloaded and pg_jobs.databases names this database, so a background worker serves it; 0: expired leases are reclaimed only by jobs_reclaim().",
        "gauge",
        u8::from(observe::unserved_because().is_none()).to_string(),
    );
    let Some(report) = report else { return };
    gauge(
        "pg_jobs_worker_last_tick_age_seconds",
        "Seconds since the worker's last tick ended (+Inf: none yet); it ticks every pg_jobs.tick.",
        "gauge",
        age_seconds(report.last_tick, now),
    );
    for (name, help, value) in [
        (
            "pg_jobs_worker_ticks_total",
            "Ticks the worker ran since it started.",
            report.ticks,
        ),
        (
            "pg_jobs_worker_reclaimed_total",
            "Jobs with expired leases the worker took back since it started.",
            report.reclaimed,
        ),
        (
            "pg_jobs_worker_purged_total",
            "Finished jobs the worker deleted past their queue's retention since it started.",
            report.purged,
        ),
        (
            "pg_jobs_worker_floors_healed_total",
            "Claim floors the worker found above a due job and reset since it started.",
            report.floors_healed,
        ),
    ] {
        gauge(name, help, "counter", value.to_string());
    }
    gauge(
        "pg_jobs_worker_last_error_age_seconds",
        "Seconds since the worker's last failed tick (+Inf: none since it started).",
        "gauge",
        age_seconds(report.last_error_at, now),
    );
    if let Some(error) = &report.last_error {
        write_family(
            out,
            "pg_jobs_worker_last_error_info",
            "The worker's last tick error, as a label.",
            "gauge",
            &mut std::iter::once((
                format!("{labels},error=\"{}\"", label_value(error)),
                "1".to_owned(),
            )),
        );
    }
}

fn render_metrics(stats: &[QueueStats]) -> String {
    let mut out = String::new();
    let mut family =
        |name: &str, help: &str, kind: &str, lines: &mut dyn Iterator<Item = (String, String)>| {
            write_family(&mut out, name, help, kind, lines)
        };
    family(
        "pg_jobs_queue_jobs",
        "Jobs by queue and state (ready: queued and due; scheduled: queued, not yet due; waiting: for dependencies or a signal); the states add up.",
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
    for (name, help, value) in [
        (
            "pg_jobs_oldest_ready_age_seconds",
            "Age of the oldest job that is due and still queued.",
            (|s: &QueueStats| s.oldest_ready_seconds.to_string()) as fn(&QueueStats) -> String,
        ),
        (
            "pg_jobs_running_past_lease",
            "Running jobs whose lease has passed and that the worker has not reclaimed yet.",
            |s: &QueueStats| s.running_past_lease.to_string(),
        ),
        (
            "pg_jobs_finished_last_minute",
            "Jobs that finished in the last minute.",
            |s: &QueueStats| s.finished_last_minute.to_string(),
        ),
        (
            "pg_jobs_queue_paused",
            "1 when the queue is paused.",
            |s: &QueueStats| u8::from(s.paused).to_string(),
        ),
    ] {
        family(
            name,
            help,
            "gauge",
            &mut stats
                .iter()
                .map(|s| (format!("queue=\"{}\"", s.queue), value(s))),
        );
    }
    out
}

/// A timestamptz from microseconds since the PostgreSQL epoch, NULL for 0 (never).
fn timestamp(micros: i64) -> Option<TimestampWithTimeZone> {
    (micros != 0)
        .then(|| TimestampWithTimeZone::try_from(micros).ok())
        .flatten()
}

/// One row per worker: which database it serves, its pid, its last tick and last error. On a
/// standby the worker runs no tick: its row shows a pid, `serving` false and no ticks.
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
        name!(idempotency_purged, i64),
    ),
> {
    access::require_to_read(Role::Client, "read the background workers' status");
    // A database no worker serves shows as a row of its own, with the reason as its error.
    let reports = observe::worker_reports()
        .into_iter()
        .chain(observe::unserved_report());
    TableIterator::new(reports.map(|w| {
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
            w.idempotency_purged,
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
            name!(freed_heads, Vec<i64>),
        ),
    > {
        access::require_to_read(Role::Client, "read pg_jobs's shared state");
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
            state.freed_heads,
        ))
    }

    /// The claims waiting for work now (`jobs_claim` with `wait`), for the view `jobs.workers`:
    /// each one's backend, worker name, queue and since when it waits. A session limited to
    /// some tenants sees the claims that take only its tenants' jobs; a client without a
    /// tenant sees none (claims are workers'). Empty without the preload.
    #[allow(clippy::type_complexity)]
    #[pg_extern(volatile, parallel_restricted, security_definer)]
    #[search_path(pg_catalog, pg_temp)]
    fn waiting_claims() -> TableIterator<
        'static,
        (
            name!(pid, i32),
            name!(worker, String),
            name!(queue, String),
            name!(since, Option<TimestampWithTimeZone>),
        ),
    > {
        access::require_to_read(Role::Client, "read the waiting claims");
        let claims = crate::engine::observe::waiting_claims(&tenants::scope());
        TableIterator::new(claims.into_iter().map(|c| {
            (
                c.pid,
                c.worker,
                c.queue,
                TimestampWithTimeZone::try_from(c.since).ok(),
            )
        }))
    }

    /// The current minute of the throughput history, for the view `jobs.throughput`: per queue,
    /// the jobs enqueued, completed, failed and retried since the background worker last wrote
    /// the history (within the caller's tenant scope). Empty without the preload.
    #[allow(clippy::type_complexity)]
    #[pg_extern(volatile, parallel_restricted, security_definer)]
    #[search_path(pg_catalog, pg_temp)]
    fn throughput_pending() -> TableIterator<
        'static,
        (
            name!(queue, String),
            name!(minute, Option<TimestampWithTimeZone>),
            name!(enqueued, i64),
            name!(completed, i64),
            name!(failed, i64),
            name!(retried, i64),
        ),
    > {
        access::require_to_read(Role::Client, "read the throughput history");
        let minute = crate::engine::throughput::minute_of(crate::pg::clock::server_now());
        let minute = TimestampWithTimeZone::try_from(minute).ok();
        let pending = crate::engine::throughput::pending(&tenants::scope());
        TableIterator::new(
            pending
                .into_iter()
                .map(move |(queue, [e, c, f, r])| (queue, minute, e, c, f, r)),
        )
    }

    /// The hash `jobs.throughput_minute` stores for a tenant's jobs (0 for jobs without one).
    #[pg_extern(immutable, parallel_safe)]
    #[search_path(pg_catalog, pg_temp)]
    fn tenant_hash(tenant: Option<&str>) -> i64 {
        crate::engine::throughput::tenant_hash(tenant)
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
