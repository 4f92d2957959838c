//! What observers see: single jobs, pages of jobs, per-queue statistics, the totals of jobs
//! settled since the server started, the background workers' status, the client workers and
//! their waiting claims and, for diagnostics, a queue's shared state.

use std::sync::atomic::Ordering;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::{self, INT4OID, INT8OID, TEXTARRAYOID, TEXTOID};
use pgrx::spi::SpiClient;

use crate::engine::model::Position;
use crate::engine::tenants::TenantScope;
use crate::pg::database::current_database_name;
use crate::runtime::floor;
use crate::runtime::freed_heads;
use crate::runtime::shmem::shared;
use crate::runtime::totals::{self, Counts, Visible};
use crate::runtime::waiting_claims;
use crate::runtime::wakeup;
use crate::storage::rows::JobRow;
use crate::storage::{statement, with_client, Statement};

static GET: Statement = statement!(observe/get(id: INT8OID, tenants: TEXTARRAYOID) -> (job));

static LIST: Statement = statement!(
    observe/list(queue: TEXTOID, state: TEXTOID, kind: TEXTOID, limit: INT4OID, before_id: INT8OID,
        tenants: TEXTARRAYOID) -> (job)
);

static STATS: Statement = statement!(
    observe/stats()
        -> (queue, paused, ready, scheduled, running, succeeded, failed, cancelled,
            running_past_lease, oldest_ready_seconds, finished_last_minute, waiting)
);

static QUEUE_NAMES: Statement = statement!(observe/queue_names() -> (queue));

static CLIENTS: Statement = statement!(
    observe/clients() -> (worker, running, waiting, leases_expiring, last_seen_age_seconds)
);

/// The states `jobs_list` filters on: every job state, plus `ready` and `scheduled` (queued
/// jobs that are due, and not yet due), as `jobs.queue_stats` counts them.
pub const LIST_STATES: [&str; 8] = [
    "queued",
    "ready",
    "scheduled",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "waiting",
];

/// The job with this id, if any (within the caller's tenant scope).
pub fn get(id: i64, scope: &TenantScope) -> Option<JobRow> {
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| {
        GET.collect::<JobRow>(client, &[id.into(), scope.param()], "job", context)
            .pop()
    })
}

/// What `jobs_list` filters on, checked.
pub struct ListFilter<'a> {
    /// Only this queue's jobs.
    pub queue: Option<&'a str>,
    /// Only jobs in this state (one of [`LIST_STATES`]).
    pub state: Option<&'a str>,
    /// Only jobs of this kind.
    pub kind: Option<&'a str>,
    /// At most this many.
    pub limit: i32,
    /// Only jobs with a smaller id (the last id of the previous page).
    pub before_id: Option<i64>,
    /// Only jobs the caller may see.
    pub scope: TenantScope,
}

/// Jobs newest first, as `filter` selects them.
pub fn list(filter: &ListFilter<'_>) -> Vec<JobRow> {
    // SAFETY: reading the current context pointer (the caller's, which outlives SPI).
    let context = unsafe { pg_sys::CurrentMemoryContext };
    with_client(|client| {
        let args: [DatumWithOid; 6] = [
            filter.queue.into(),
            filter.state.into(),
            filter.kind.into(),
            filter.limit.into(),
            filter.before_id.into(),
            filter.scope.param(),
        ];
        LIST.collect::<JobRow>(client, &args, "job", context)
    })
}

/// One queue's line of `jobs.queue_stats`.
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Jobs by state: ready, scheduled, running, succeeded, failed, cancelled, waiting (they
    /// add up to the queue's jobs).
    pub by_state: [(&'static str, i64); 7],
    /// Running jobs whose lease has passed (not yet reclaimed).
    pub running_past_lease: i64,
    /// Age of the oldest ready job, in seconds (0 without one).
    pub oldest_ready_seconds: f64,
    /// Jobs that finished in the last minute.
    pub finished_last_minute: i64,
}

/// Every queue's statistics, in queue order.
pub fn queue_stats() -> Vec<QueueStats> {
    with_client(read_queue_stats)
}

fn read_queue_stats(client: &SpiClient<'_>) -> Vec<QueueStats> {
    STATS
        .run(client, &[])
        .iter()
        .map(|row| {
            let count = |column: &str| row.get::<i64>(column).unwrap_or(0);
            QueueStats {
                queue: row.expect("queue"),
                paused: row.get("paused").unwrap_or(false),
                by_state: [
                    ("ready", count("ready")),
                    ("scheduled", count("scheduled")),
                    ("running", count("running")),
                    ("succeeded", count("succeeded")),
                    ("failed", count("failed")),
                    ("cancelled", count("cancelled")),
                    ("waiting", count("waiting")),
                ],
                running_past_lease: count("running_past_lease"),
                oldest_ready_seconds: row.get("oldest_ready_seconds").unwrap_or(0.0),
                finished_last_minute: count("finished_last_minute"),
            }
        })
        .collect()
}

/// One queue's jobs settled since the server started, as far as the caller may see them.
pub struct QueueTotals {
    /// The queue; `None` for the queues beyond what shared memory holds counters for.
    pub queue: Option<String>,
    /// Completed, failed for good, and retried.
    pub counts: Counts,
}

/// The totals of this database's queues within `scope`, in queue order (the overflow line
/// last): every existing queue, counted or not, and dropped queues that settled jobs. A
/// scope limited to some tenants sums only their jobs, and is not shown the overflow line,
/// which mixes every tenant's. Empty without shared memory.
pub fn totals(scope: &TenantScope) -> Vec<QueueTotals> {
    if shared().is_none() {
        return Vec::new();
    }
    let visible = match scope {
        TenantScope::All => Visible::All,
        TenantScope::Untenanted => Visible::Untenanted,
        TenantScope::Tenants(tenants) => Visible::Tenants(tenants),
    };
    let mut lines: Vec<QueueTotals> = totals::read(visible)
        .into_iter()
        .map(|(queue, counts)| QueueTotals { queue, counts })
        .collect();
    let queues: Vec<String> = with_client(|client| {
        QUEUE_NAMES
            .run(client, &[])
            .iter()
            .map(|row| row.expect("queue"))
            .collect()
    });
    for queue in queues {
        if !lines.iter().any(|l| l.queue.as_deref() == Some(&queue)) {
            lines.push(QueueTotals {
                queue: Some(queue),
                counts: Counts::default(),
            });
        }
    }
    // Queues by name, the overflow line (None) last.
    lines.sort_by(|a, b| (a.queue.is_none(), &a.queue).cmp(&(b.queue.is_none(), &b.queue)));
    lines
}

/// One background worker's status.
pub struct WorkerReport {
    /// The database it serves.
    pub database: String,
    /// Its pid while it runs.
    pub pid: Option<i32>,
    /// When it started (0: unknown).
    pub started_at: i64,
    /// When its last tick finished (0: none yet).
    pub last_tick: i64,
    /// Whether the extension existed in its database at the last tick.
    pub serving: bool,
    /// Ticks since it started.
    pub ticks: i64,
    /// Jobs it reclaimed since it started.
    pub reclaimed: i64,
    /// Jobs it purged since it started.
    pub purged: i64,
    /// Claim floors it found unsound and reset since it started.
    pub floors_healed: i64,
    /// Expired idempotency records it purged since it started.
    pub idempotency_purged: i64,
    /// Jobs enqueued for schedules' slots.
    pub scheduled: i64,
    /// The last tick error, if any.
    pub last_error: Option<String>,
    /// When the last tick failed (0: never).
    pub last_error_at: i64,
}

/// Every configured worker's status; empty without shared memory.
pub fn worker_reports() -> Vec<WorkerReport> {
    let Some(shared) = shared() else {
        return Vec::new();
    };
    shared
        .workers()
        .iter()
        .filter(|w| !w.database().is_empty())
        .map(|w| {
            let pid = w.pid.load(Ordering::Acquire);
            WorkerReport {
                database: w.database(),
                pid: (pid != 0).then_some(pid),
                started_at: w.started_at.load(Ordering::Acquire),
                last_tick: w.last_tick.load(Ordering::Acquire),
                serving: w.serving.load(Ordering::Acquire) != 0,
                ticks: w.ticks.load(Ordering::Acquire) as i64,
                reclaimed: w.reclaimed.load(Ordering::Acquire) as i64,
                purged: w.purged.load(Ordering::Acquire) as i64,
                floors_healed: w.floors_healed.load(Ordering::Acquire) as i64,
                idempotency_purged: w.idempotency_purged.load(Ordering::Acquire) as i64,
                scheduled: w.scheduled.load(Ordering::Acquire) as i64,
                last_error: w.last_error(),
                last_error_at: w.last_error_at.load(Ordering::Acquire),
            }
        })
        .collect()
}

/// Why no background worker serves this database, when none does: pg_jobs is not preloaded,
/// or `pg_jobs.databases` does not name the database. Then nothing reclaims expired leases but
/// `jobs_reclaim()`, and no schedule runs.
pub fn unserved_because() -> Option<String> {
    let database = current_database_name();
    if shared().is_none() {
        return Some(
            "pg_jobs is not in shared_preload_libraries: no background worker runs (expired leases are reclaimed only by jobs_reclaim(), schedules run only through jobs_run_schedules())"
                .to_owned(),
        );
    }
    if crate::config::settings::configured_databases().contains(&database) {
        return None;
    }
    Some(format!(
        "pg_jobs.databases does not name database {database}: no background worker serves it (expired leases are reclaimed only by jobs_reclaim(), schedules run only through jobs_run_schedules()); run ALTER SYSTEM SET pg_jobs.databases = '<the databases, {database} among them>' and restart the server"
    ))
}

/// A worker report for this database when no worker serves it ([`unserved_because`]): no pid,
/// not serving, the reason as its last error.
pub fn unserved_report() -> Option<WorkerReport> {
    let reason = unserved_because()?;
    Some(WorkerReport {
        database: current_database_name(),
        pid: None,
        started_at: 0,
        last_tick: 0,
        serving: false,
        ticks: 0,
        reclaimed: 0,
        purged: 0,
        floors_healed: 0,
        idempotency_purged: 0,
        scheduled: 0,
        last_error: Some(reason),
        last_error_at: 0,
    })
}

/// The status of the worker serving this database, if one is configured for it.
pub fn this_database_worker() -> Option<WorkerReport> {
    let database = current_database_name();
    worker_reports()
        .into_iter()
        .find(|w| w.database == database)
}

/// A queue's state in shared memory, for diagnostics and tests.
pub struct RuntimeState {
    /// The claim floor, when known.
    pub floor: Option<Position>,
    /// The generation of the floor cell.
    pub floor_generation: u64,
    /// The claim reach, when valid.
    pub reach: Option<Position>,
    /// Claims waiting on the queue's wake-up slot (queues sharing it included).
    pub waiters: u32,
    /// The slot's wake-up generation.
    pub wake_generation: u64,
    /// The earliest delayed job the slot knows of.
    pub next_due: Option<i64>,
    /// The queue's freed heads that claims may take now (job ids, in claim order).
    pub freed_heads: Vec<i64>,
}

/// The queue's state in shared memory; `None` without shared memory.
pub fn runtime_state(queue: &str) -> Option<RuntimeState> {
    let slot = wakeup::slot(queue)?;
    let floor = floor::view(slot.floor(), queue);
    let wake = wakeup::view(slot);
    Some(RuntimeState {
        floor: floor.key,
        floor_generation: floor.generation,
        reach: floor.reach,
        waiters: wake.waiters,
        wake_generation: wake.generation,
        next_due: wake.next_due,
        freed_heads: freed_heads::available(queue),
    })
}

/// The claims waiting for work now that `scope` may see (see `jobs.waiting_claims`).
pub fn waiting_claims(scope: &TenantScope) -> Vec<waiting_claims::WaitingClaim> {
    let visible = match scope {
        TenantScope::All => waiting_claims::Visible::All,
        TenantScope::Untenanted => waiting_claims::Visible::Nothing,
        TenantScope::Tenants(tenants) => waiting_claims::Visible::Tenants(tenants),
    };
    waiting_claims::read(visible)
}

/// One client worker's line of `jobs.workers`, as metrics show it.
pub struct ClientWorker {
    /// The worker name its claims gave.
    pub worker: String,
    /// Jobs it runs.
    pub running: i64,
    /// Claims of it waiting for work.
    pub waiting: i64,
    /// Its jobs whose lease has less than a quarter of its length left, or has passed.
    pub leases_expiring: i64,
    /// Seconds since its last claim or heartbeat (0 while a claim of it waits).
    pub last_seen_age_seconds: f64,
}

/// Every client worker the caller may see, by name.
pub fn client_workers() -> Vec<ClientWorker> {
    with_client(|client| {
        CLIENTS
            .run(client, &[])
            .iter()
            .map(|row| ClientWorker {
                worker: row.expect("worker"),
                running: row.get("running").unwrap_or(0),
                waiting: row.get("waiting").unwrap_or(0),
                leases_expiring: row.get("leases_expiring").unwrap_or(0),
                last_seen_age_seconds: row.get("last_seen_age_seconds").unwrap_or(0.0),
            })
            .collect()
    })
}
