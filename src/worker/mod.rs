//! The background worker: one per database in `pg_jobs.databases`, registered while the library
//! is preloaded. Every `pg_jobs.tick` it runs one tick ([`tick`]): reclaim expired leases, check
//! the claim floors, purge finished jobs past their queue's retention, and wake claims waiting
//! on queues whose delayed jobs came due. Once a minute it writes the minute's counts into the
//! throughput history (`engine::throughput`). A database without the extension is skipped until
//! `CREATE EXTENSION pg_jobs` runs there. A failing tick is logged, recorded in
//! `jobs_worker_status()` and retried at the next tick; the postmaster restarts a worker that
//! dies.
//!
//! While the database has the SQL definitions of another version than the library's (after an
//! upgrade's restart, before `ALTER EXTENSION pg_jobs UPDATE`), the worker runs no work: it
//! shows as not serving, says once in the log what to run, and serves from the first tick
//! after the update, without a restart (README "Upgrading").
//!
//! On a hot standby the worker starts too, but runs no tick while the server is in recovery:
//! nothing can be written there, and the primary's worker does the work. It shows in
//! `jobs_worker_status()` with its pid, not serving, and starts ticking at its next wake-up
//! after `pg_ctl promote`.

mod tick;

use std::sync::atomic::Ordering;
use std::time::Duration;

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::config::settings;
use crate::engine::throughput;
use crate::pg::clock::server_now;
use crate::pg::recovery;
use crate::runtime::shmem::{self, MAX_DATABASES};
use crate::runtime::totals;
use crate::runtime::worker_status::WorkerStatus;

/// Registers one worker per configured database; called from `_PG_init` while preloading.
pub fn register() {
    let databases = settings::configured_databases();
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
            // Started on a hot standby as well, where it idles (see the loop): it is then
            // visible there, and serves within a tick of the promotion.
            .set_start_time(BgWorkerStartTime::ConsistentState)
            .set_restart_time(Some(Duration::from_secs(1)))
            .load();
    }
}

/// The worker's entry point: connect, then tick until told to stop.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_jobs_worker_main(argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = BackgroundWorker::get_extra().to_owned();
    let status = shmem::shared().map(|s| s.worker(argument.value()));
    if let Some(status) = status {
        announce(status, &database);
    }
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    pgrx::log!("pg_jobs worker started for database {database}");
    // Slots that come due from now on come due while this worker is up (schedules' catch_up).
    let started_at = server_now();

    let mut standby = false;
    let mut outdated: Option<String> = None;
    // The minute of the throughput history the counts since the last write belong to.
    let mut history_minute = throughput::minute_of(server_now());
    while BackgroundWorker::wait_latch(Some(Duration::from_millis(settings::TICK_MS.get() as u64)))
    {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the standard way for a background worker to reload its settings.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        // A tick on a standby could only fail at its first write, every tick: wait for the
        // promotion instead, without opening a transaction. Said once each way in the log.
        if recovery::in_recovery() {
            if !standby {
                standby = true;
                if let Some(status) = status {
                    status.serving.store(0, Ordering::Release);
                }
                pgrx::log!(
                    "pg_jobs worker for database {database}: this server is a standby; the worker runs no tick until it is promoted"
                );
            }
            continue;
        }
        if standby {
            standby = false;
            pgrx::log!(
                "pg_jobs worker for database {database}: the server was promoted; the worker serves it"
            );
        }
        let outcome = tick::run(started_at);
        // Once a minute, the minute that ended goes into the history.
        let minute = throughput::minute_of(server_now());
        if minute > history_minute {
            flush_throughput(status, &database, history_minute);
            history_minute = minute;
        }
        if let Ok(report) = &outcome {
            note_version(&database, report, &mut outdated);
        }
        if let Some(status) = status {
            record(status, &database, outcome);
        }
    }

    tick::stopping();
    // A clean stop keeps the current minute: the next worker's writes add to it.
    if !recovery::in_recovery() {
        flush_throughput(status, &database, history_minute);
    }
    // Leave with status 1 so the postmaster starts us again unless it is shutting down:
    // pg_terminate_backend on the worker restarts it rather than stopping the queue for good.
    if let Some(status) = status {
        status.pid.store(0, Ordering::Release);
    }
    // SAFETY: ends the process the way Postgres expects.
    unsafe { pg_sys::proc_exit(1) };
}

/// Claims the worker's status entry at start.
fn announce(status: &WorkerStatus, database: &str) {
    status.set_database(database);
    // SAFETY: MyProcPid is set for the life of the process.
    status
        .pid
        .store(unsafe { pg_sys::MyProcPid }, Ordering::Release);
    status.started_at.store(server_now(), Ordering::Release);
    status.ticks.store(0, Ordering::Release);
}

/// Says in the log, once each way, that the database's SQL definitions are of another version
/// than the library's and the worker waits for `ALTER EXTENSION pg_jobs UPDATE`, and when it
/// resumes. `outdated` holds the version last said.
fn note_version(database: &str, report: &tick::TickReport, outdated: &mut Option<String>) {
    if report.outdated == *outdated {
        return;
    }
    match &report.outdated {
        Some(installed) => pgrx::log!(
            "pg_jobs worker for database {database}: the database has the SQL definitions of pg_jobs {installed} but the library is {}; the worker idles until ALTER EXTENSION pg_jobs UPDATE is run in database {database}",
            crate::pg::extension::LIBRARY_VERSION
        ),
        None if report.serving => pgrx::log!(
            "pg_jobs worker for database {database}: the SQL definitions are now version {}; the worker serves the database",
            crate::pg::extension::LIBRARY_VERSION
        ),
        None => {}
    }
    *outdated = report.outdated.clone();
}

/// Writes the counts since the last write into `minute` of the throughput history; on an
/// ERROR they stay in shared memory for the next write (into a later minute).
fn flush_throughput(status: Option<&WorkerStatus>, database: &str, minute: i64) {
    match tick::flush_throughput(minute) {
        Ok(written) => totals::mark_flushed(&written),
        Err(message) => {
            if let Some(status) = status {
                step_failed(status, database, "writing the throughput history", &message);
            }
        }
    }
}

/// Logs and records a step of a tick that failed and was rolled back alone.
fn step_failed(status: &WorkerStatus, database: &str, step: &str, message: &str) {
    pgrx::log!(
        "pg_jobs worker for database {database}: {step} failed, retrying next tick: {message}"
    );
    status.set_last_error(message);
    status.last_error_at.store(server_now(), Ordering::Release);
}

/// Records what a tick did, or why it failed.
fn record(status: &WorkerStatus, database: &str, outcome: Result<tick::TickReport, String>) {
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
            status
                .floors_healed
                .fetch_add(report.floors_healed as u64, Ordering::AcqRel);
            status
                .idempotency_purged
                .fetch_add(report.idempotency_purged as u64, Ordering::AcqRel);
            status
                .scheduled
                .fetch_add(report.scheduled as u64, Ordering::AcqRel);
            if let Some(message) = report.schedule_error {
                step_failed(status, database, "enqueueing schedules", &message);
            }
            if report.stranded_cleared > 0 {
                pgrx::log!(
                    "pg_jobs worker for database {database}: {} jobs at the head of their groups waited for a hand-over that shared memory lost in a restart; they are claimable again",
                    report.stranded_cleared
                );
            }
            if let Some(message) = report.sweep_error {
                step_failed(
                    status,
                    database,
                    "clearing the marks of stranded group heads",
                    &message,
                );
            }
        }
        Err(message) => {
            pgrx::log!(
                "pg_jobs worker for database {database}: tick failed, retrying next tick: {message}"
            );
            status.set_last_error(&message);
            status.last_error_at.store(server_now(), Ordering::Release);
        }
    }
    status.last_tick.store(server_now(), Ordering::Release);
}
