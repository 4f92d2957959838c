//! One tick of the background worker, in its own transaction: what the worker does, in order.

use pgrx::pg_sys;
use pgrx::PgTryBuilder;

use crate::engine::tenants::TenantScope;
use crate::engine::workflows::signals;
use crate::engine::{claim, distribute, groups, idempotency, purge, reclaim, schedules, two_phase};
use crate::pg::clock::server_now;
use crate::pg::extension::LIBRARY_VERSION;
use crate::pg::subtransaction::in_subtransaction;
use crate::runtime::shmem::shared;
use crate::runtime::{floor, freed_heads};
use crate::storage::{with_client, Statement};

/// Reclaim statements per tick, so one tick stays short however far behind it is: with
/// `reclaim::BATCH` jobs each, at most 10,000 jobs a tick.
pub const RECLAIM_BATCHES: usize = 10;

static EXTENSION_EXISTS: Statement = Statement {
    name: "worker/extension_exists",
    sql: include_str!("extension_exists.sql"),
    params: &[],
    columns: &["installed"],
};

static TICK_SETTINGS: Statement = Statement {
    name: "worker/tick_settings",
    sql: include_str!("tick_settings.sql"),
    params: &[],
    columns: &["lock_timeout", "statement_timeout"],
};

/// What one successful tick did.
pub struct TickReport {
    /// Whether the extension exists in the database, with this library's version.
    pub serving: bool,
    /// The installed version, when the extension exists with another version than this
    /// library's: the tick did nothing (README "Upgrading").
    pub outdated: Option<String>,
    /// Jobs reclaimed.
    pub reclaimed: usize,
    /// Finished jobs purged.
    pub purged: usize,
    /// Claim floors found unsound and reset.
    pub floors_healed: usize,
    /// Expired idempotency records purged.
    pub idempotency_purged: usize,
    /// Jobs enqueued for schedules' slots.
    pub scheduled: usize,
    /// Why the schedules' step failed (rolled back alone; the rest of the tick commits).
    pub schedule_error: Option<String>,
    /// Waiting jobs whose marks the tick cleared because shared memory lost their freed heads
    /// (the first tick after a start or a crash restart; `engine::groups::sweep_stranded`).
    pub stranded_cleared: usize,
    /// Why clearing them failed (rolled back alone; a later tick or claim tries again).
    pub sweep_error: Option<String>,
}

/// Runs one tick in its own transaction; an ERROR rolls the tick back and is returned.
/// `started_at` is when this worker started (server clock).
pub fn run(started_at: i64) -> Result<TickReport, String> {
    run_transaction(|| tick(started_at))
}

/// Runs `work` in a transaction of its own, committed when it returns and rolled back on an
/// ERROR, whose message is returned.
fn run_transaction<R>(work: impl FnOnce() -> R) -> Result<R, String> {
    // SAFETY: the standard transaction bracket of a background worker.
    unsafe {
        pg_sys::SetCurrentStatementStartTimestamp();
        pg_sys::StartTransactionCommand();
        pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        pg_sys::pgstat_report_activity(
            pg_sys::BackendState::STATE_RUNNING,
            c"pg_jobs tick".as_ptr(),
        );
    }
    let outcome = PgTryBuilder::new(std::panic::AssertUnwindSafe(|| Ok(work())))
        .catch_others(|error| Err(error_message(error)))
        .execute();
    // SAFETY: closes the transaction opened above, committing or rolling back.
    unsafe {
        match outcome {
            Ok(_) => {
                pg_sys::PopActiveSnapshot();
                pg_sys::CommitTransactionCommand();
            }
            Err(_) => pg_sys::AbortCurrentTransaction(),
        }
        // A background worker must flush its own statistics: without them autovacuum would
        // never hear of the rows reclaim and purge leave dead.
        pg_sys::pgstat_report_stat(false);
        pg_sys::pgstat_report_activity(pg_sys::BackendState::STATE_IDLE, std::ptr::null());
    }
    outcome
}

/// The work of one tick, inside its transaction.
fn tick(started_at: i64) -> TickReport {
    with_client(|client| {
        let installed = EXTENSION_EXISTS.first::<String>(client, &[], "installed");
        // The library of a newer (or older) version than the SQL definitions would run its
        // statements against tables they do not describe: idle until ALTER EXTENSION UPDATE.
        let outdated = installed
            .as_ref()
            .filter(|version| version.as_str() != LIBRARY_VERSION)
            .cloned();
        let serving = installed.is_some() && outdated.is_none();
        if !serving {
            return TickReport {
                serving,
                outdated,
                reclaimed: 0,
                purged: 0,
                floors_healed: 0,
                idempotency_purged: 0,
                scheduled: 0,
                schedule_error: None,
                stranded_cleared: 0,
                sweep_error: None,
            };
        }
        TICK_SETTINGS.run(client, &[]);
        if let Some(shared) = shared() {
            floor::forget_reaches(shared.floor_cells());
        }

        let mut jobs = JobSteps::default();
        let (scheduled, schedule_error) = if crate::pg::citus::distributed() {
            // On a Citus cluster (docs/src/internals/citus.md) the steps on jobs run once for
            // each shard on this node, on the shard's tables; the schedules on the coordinator.
            distribute::on_each_local_shard(|| {
                jobs.reclaim_and_heal(client);
                jobs.purge(client);
                jobs.sweep_and_wake(client);
            });
            let scheduled = if distribute::on_coordinator() {
                schedule_step(client, started_at)
            } else {
                (0, None)
            };
            purge_node_tables(&mut jobs, client);
            scheduled
        } else {
            jobs.reclaim_and_heal(client);
            // Each due schedule slot once: its job and the schedule's progress commit together.
            let scheduled = schedule_step(client, started_at);
            jobs.purge(client);
            purge_node_tables(&mut jobs, client);
            jobs.sweep_and_wake(client);
            scheduled
        };
        let JobSteps {
            reclaimed,
            floors_healed,
            purged,
            idempotency_purged,
            stranded_cleared,
            sweep_error,
        } = jobs;
        TickReport {
            serving,
            outdated: None,
            reclaimed,
            purged,
            floors_healed,
            idempotency_purged,
            scheduled,
            schedule_error,
            stranded_cleared,
            sweep_error,
        }
    })
}

/// What a tick does to jobs (on each shard of this node, on a Citus cluster), and its counts.
#[derive(Default)]
struct JobSteps {
    reclaimed: usize,
    floors_healed: usize,
    purged: usize,
    idempotency_purged: usize,
    stranded_cleared: usize,
    sweep_error: Option<String>,
}

impl JobSteps {
    /// Rule 5: expired leases back to queued (or failed), within a tick of expiring, and awaits
    /// whose timeout passed; then no due job may wait below a claim floor for longer than a
    /// tick, whatever made it claimable.
    fn reclaim_and_heal(&mut self, client: &pgrx::spi::SpiClient<'_>) {
        for _ in 0..RECLAIM_BATCHES {
            let batch = reclaim::reclaim_batch(client, &TenantScope::All);
            self.reclaimed += batch;
            if batch < reclaim::BATCH {
                break;
            }
        }
        // Awaits whose timeout passed go back to the queue (engine::workflows::signals), in
        // bounded batches as the reclaim.
        for _ in 0..RECLAIM_BATCHES {
            if signals::fire_timeouts(client, &TenantScope::All) < signals::BATCH {
                break;
            }
        }
        self.floors_healed += claim::heal_floors(client);
    }

    /// Retention.
    fn purge(&mut self, client: &pgrx::spi::SpiClient<'_>) {
        self.purged += purge::sweep(client);
    }

    /// The sweep of stranded group heads, last of the steps in subtransactions (a later one
    /// rolled back would forget the sweep), then the wake-up backstop.
    fn sweep_and_wake(&mut self, client: &pgrx::spi::SpiClient<'_>) {
        let (cleared, error) = sweep_step(client);
        self.stranded_cleared += cleared;
        self.sweep_error = self.sweep_error.take().or(error);
        claim::wake_due_waiters(client);
    }
}

/// Expired idempotency records, orphaned prepared-transaction records and expired signals, of
/// this node's own tables.
fn purge_node_tables(jobs: &mut JobSteps, client: &pgrx::spi::SpiClient<'_>) {
    jobs.idempotency_purged += idempotency::purge_expired(client);
    two_phase::purge_orphans(client);
    signals::purge_expired(client);
}

/// Enqueues the due slots of schedules in a subtransaction of the tick: a failure there is
/// rolled back alone and reported, so it cannot hold back reclaim and purge.
fn schedule_step(client: &pgrx::spi::SpiClient<'_>, started_at: i64) -> (usize, Option<String>) {
    step_alone(|| schedules::run_for_worker(client, server_now(), started_at))
}

/// Once per database after shared memory was made: clears the marks of the waiting jobs whose
/// freed heads it lost, so that settles may hand heads over again and no claim pays for it (a
/// waiting claim's empty attempt would roll its sweep back, and sweep again at every wake-up).
/// Nothing when a claim is sweeping meanwhile.
fn sweep_step(client: &pgrx::spi::SpiClient<'_>) -> (usize, Option<String>) {
    if !freed_heads::sweep_needed() {
        return (0, None);
    }
    step_alone(|| groups::sweep_stranded(client).unwrap_or(0))
}

/// Runs `step` in a subtransaction of the tick, rolled back alone on an ERROR, whose message
/// is returned beside the default answer.
fn step_alone<T: Default>(step: impl FnOnce() -> T) -> (T, Option<String>) {
    PgTryBuilder::new(std::panic::AssertUnwindSafe(|| {
        (in_subtransaction(|| (step(), true)), None)
    }))
    .catch_others(|error| (T::default(), Some(error_message(error))))
    .execute()
}

/// The message of an ERROR caught in the tick.
fn error_message(error: pg_sys::panic::CaughtError) -> String {
    match error {
        pg_sys::panic::CaughtError::PostgresError(report)
        | pg_sys::panic::CaughtError::ErrorReport(report)
        | pg_sys::panic::CaughtError::RustPanic {
            ereport: report, ..
        } => report.message().to_owned(),
    }
}

/// When the worker stops cleanly (SIGTERM): records the time, so the next worker counts the
/// schedules' slots from then on as missed (`catch_up`) rather than as due while it was up.
pub fn stopping() {
    let _ = run_transaction(|| {
        with_client(|client| {
            let installed = EXTENSION_EXISTS.first::<String>(client, &[], "installed");
            if installed.as_deref() == Some(LIBRARY_VERSION) {
                TICK_SETTINGS.run(client, &[]);
                schedules::worker_stopping(client);
            }
        })
    });
}

/// Writes what this database counted since the last write into minute `minute` of the
/// throughput history (and drops the minutes older than 24 hours), in a transaction of its
/// own; returns what it wrote, to be marked written now that the transaction committed.
/// Nothing while the database lacks the extension at this library's version.
pub fn flush_throughput(minute: i64) -> Result<Vec<crate::runtime::totals::Unflushed>, String> {
    run_transaction(|| {
        with_client(|client| {
            let installed = EXTENSION_EXISTS.first::<String>(client, &[], "installed");
            if installed.as_deref() != Some(LIBRARY_VERSION) {
                return Vec::new();
            }
            TICK_SETTINGS.run(client, &[]);
            crate::engine::throughput::write(client, minute, server_now())
        })
    })
}
