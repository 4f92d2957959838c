//! The background worker: one per database in `pg_jobs.databases`. Every `pg_jobs.tick` it
//! reclaims expired leases, purges finished jobs past their queue's retention (sweeping the
//! table a window at a time), and wakes
//! claims waiting on queues whose delayed jobs came due. A database without the extension is
//! skipped until `CREATE EXTENSION pg_jobs` runs there. A failing tick is logged, recorded in
//! `jobs_worker_status()` and retried at the next tick; the postmaster restarts a worker that
//! dies.

use std::sync::atomic::Ordering;
use std::time::Duration;

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;

use crate::guc;
use crate::operate::reclaim_batch;
use crate::shmem::{self, WorkerStatus, MAX_DATABASES};
use crate::spi::{server_now, with_client, Statement};
use crate::wakeup;

/// Jobs per reclaim statement.
const BATCH: i32 = 1000;
/// Reclaim statements per tick, so one tick stays short however far behind it is.
const BATCHES_PER_TICK: usize = 10;

static EXTENSION_EXISTS: Statement = Statement {
    sql: "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pg_jobs')",
    args: &[],
};

static TICK_SETTINGS: Statement = Statement {
    // A tick must not queue behind DDL (and make every claim queue behind it); it gives up
    // and retries at the next tick instead.
    sql: "SELECT pg_catalog.set_config('lock_timeout', '1s', true),
                 pg_catalog.set_config('statement_timeout', '60s', true)",
    args: &[],
};

static PURGE: Statement = Statement {
    sql: include_str!("../sql/purge.sql"),
    args: &[pg_sys::INT8OID, pg_sys::INT4OID],
};

/// Jobs the retention sweep looks at per statement. A tick sweeps one window, and goes on to
/// the next (up to the cap) only while windows have jobs to purge: an idle sweep costs a
/// millisecond a tick, and a table that fills with expired jobs faster than that is swept
/// faster.
const PURGE_WINDOW: i32 = 2_000;
const PURGE_WINDOWS_PER_TICK: usize = 20;

thread_local! {
    /// The last job id the retention sweep looked at.
    static PURGE_POSITION: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

static QUEUES: Statement = Statement {
    sql: "SELECT name FROM jobs.queue WHERE NOT paused",
    args: &[],
};

static EARLIEST_DUE: Statement = Statement {
    sql: include_str!("../sql/claim_probe.sql"),
    args: &[pg_sys::TEXTOID],
};

/// The databases named in `pg_jobs.databases`.
fn configured_databases() -> Vec<String> {
    guc::DATABASES
        .get()
        .map(|list| {
            list.to_string_lossy()
                .split(',')
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// Registers one worker per configured database; called from `_PG_init` while preloading.
pub fn register() {
    let databases = configured_databases();
    if databases.len() > MAX_DATABASES {
        pgrx::warning!(
            "pg_jobs.databases names {} databases; the worker serves only the first {MAX_DATABASES}",
            databases.len()
        );
    }
    for (index, database) in databases.iter().take(MAX_DATABASES).enumerate() {
        BackgroundWorkerBuilder::new(&format!("pg_jobs worker for {database}"))
            .set_type("pg_jobs worker")
            .set_library("pg_jobs")
            .set_function("pg_jobs_worker_main")
            .set_argument(Some(pg_sys::Datum::from(index)))
            .set_extra(database)
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(Duration::from_secs(1)))
            .load();
    }
}

/// What one successful tick did.
struct TickReport {
    serving: bool,
    reclaimed: usize,
    purged: usize,
}

/// The worker's entry point.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_jobs_worker_main(argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = BackgroundWorker::get_extra().to_owned();
    let status = shmem::shared().map(|s| &s.workers[argument.value() % MAX_DATABASES]);
    if let Some(status) = status {
        status.set_database(&database);
        // SAFETY: MyProcPid is set for the life of the process.
        status
            .pid
            .store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
        status.started_at.store(server_now(), Ordering::Release);
        status.ticks.store(0, Ordering::Release);
    }
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    pgrx::log!("pg_jobs worker started for database {database}");

    while BackgroundWorker::wait_latch(Some(Duration::from_millis(guc::TICK_MS.get() as u64))) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the standard way for a background worker to reload its settings.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let outcome = run_tick();
        let Some(status) = status else { continue };
        status.ticks.fetch_add(1, Ordering::AcqRel);
        match outcome {
            Ok(report) => {
                status
                    .serving
                    .store(u32::from(report.serving), Ordering::Release);
                status
                    .reclaimed
                    .fetch_add(report.reclaimed as u64, Ordering::AcqRel);
                status
                    .purged
                    .fetch_add(report.purged as u64, Ordering::AcqRel);
            }
            Err(message) => {
                pgrx::log!("pg_jobs worker for database {database}: tick failed, retrying next tick: {message}");
                status.set_last_error(&message);
                status.last_error_at.store(server_now(), Ordering::Release);
            }
        }
        status.last_tick.store(server_now(), Ordering::Release);
    }

    // Leave with status 1 so the postmaster starts us again unless it is shutting down:
    // pg_terminate_backend on the worker restarts it rather than stopping the queue for good.
    if let Some(status) = status {
        status.pid.store(0, Ordering::Release);
    }
    // SAFETY: ends the process the way Postgres expects.
    unsafe { pg_sys::proc_exit(1) };
}

/// Runs one tick in its own transaction; an ERROR rolls the tick back and is returned.
fn run_tick() -> Result<TickReport, String> {
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
    let outcome = PgTryBuilder::new(|| Ok(tick()))
        .catch_others(|error| {
            Err(match error {
                pg_sys::panic::CaughtError::PostgresError(report)
                | pg_sys::panic::CaughtError::ErrorReport(report)
                | pg_sys::panic::CaughtError::RustPanic {
                    ereport: report, ..
                } => report.message().to_owned(),
            })
        })
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
fn tick() -> TickReport {
    with_client(|client| {
        let serving = EXTENSION_EXISTS.first::<bool>(client, &[]).unwrap_or(false);
        if !serving {
            return TickReport {
                serving,
                reclaimed: 0,
                purged: 0,
            };
        }
        TICK_SETTINGS.run(client, &[]);
        if let Some(shared) = crate::shmem::shared() {
            crate::floor::forget_reaches(&shared.slots);
        }

        let mut reclaimed = 0;
        for _ in 0..BATCHES_PER_TICK {
            let batch = reclaim_batch(client, BATCH);
            reclaimed += batch;
            if batch < BATCH as usize {
                break;
            }
        }

        // The purge sweeps the table in id order, a window at a time, from where the last tick
        // stopped; a restart just starts the sweep over.
        let mut purged = 0;
        for _ in 0..PURGE_WINDOWS_PER_TICK {
            let rows = PURGE.run(
                client,
                &[PURGE_POSITION.with(|p| p.get()).into(), PURGE_WINDOW.into()],
            );
            let row = rows.first().expect("purge.sql returns one row");
            let purged_here = row.get::<i64>(2).unwrap_or(0) as usize;
            purged += purged_here;
            match row.get::<i64>(1) {
                Some(last) => PURGE_POSITION.with(|p| p.set(last)),
                None => {
                    PURGE_POSITION.with(|p| p.set(0));
                    break;
                }
            }
            if purged_here == 0 {
                break;
            }
        }

        // Waiting claims time their own sleep to the delayed jobs they know of; this catches
        // the rest (jobs made due by other means, waits that began before a job was enqueued
        // in a transaction that has not told them).
        let now = server_now();
        let queues: Vec<String> = QUEUES
            .run(client, &[])
            .iter()
            .filter_map(|row| row.get(1))
            .collect();
        for queue in queues.iter().filter(|q| wakeup::has_waiters(q)) {
            let earliest = EARLIEST_DUE
                .run(client, &[queue.as_str().into()])
                .first()
                .and_then(|row| row.get::<TimestampWithTimeZone>(2))
                .map(i64::from);
            if earliest.is_some_and(|run_at| run_at <= now) {
                wakeup::wake_queue(queue);
            }
        }
        TickReport {
            serving,
            reclaimed,
            purged,
        }
    })
}

/// One row per worker: which database it serves, its pid, its last tick and last error.
// pgrx reads the column names from `name!` in the signature, so the type cannot be an alias.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted)]
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
        name!(last_error, Option<String>),
        name!(last_error_at, Option<TimestampWithTimeZone>),
    ),
> {
    let Some(shared) = shmem::shared() else {
        return TableIterator::empty();
    };
    let rows: Vec<_> = shared
        .workers
        .iter()
        .filter(|w| !w.database().is_empty())
        .map(|w: &WorkerStatus| {
            let timestamp = |value: i64| {
                (value != 0)
                    .then(|| TimestampWithTimeZone::try_from(value).ok())
                    .flatten()
            };
            let pid = w.pid.load(Ordering::Acquire);
            (
                w.database(),
                (pid != 0).then_some(pid),
                timestamp(w.started_at.load(Ordering::Acquire)),
                timestamp(w.last_tick.load(Ordering::Acquire)),
                w.serving.load(Ordering::Acquire) != 0,
                w.ticks.load(Ordering::Acquire) as i64,
                w.reclaimed.load(Ordering::Acquire) as i64,
                w.purged.load(Ordering::Acquire) as i64,
                w.last_error(),
                timestamp(w.last_error_at.load(Ordering::Acquire)),
            )
        })
        .collect();
    TableIterator::new(rows)
}
