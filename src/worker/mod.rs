//! The background workers: a launcher ([`launcher`]) and one worker per database of
//! `pg_jobs.databases` that exists, which the launcher starts and starts again. Every
//! `pg_jobs.tick` a worker runs one tick ([`tick`]): reclaim expired leases, check the claim
//! floors, enqueue schedules' slots, purge finished jobs past their queue's retention, and
//! wake claims waiting on queues whose delayed jobs came due, each step in short transactions
//! of its own. Once a minute it writes the minute's counts into the throughput history
//! (`engine::throughput`). A database without the extension is skipped until `CREATE EXTENSION pg_jobs`
//! runs there. A failing step is logged, recorded in `jobs_worker_status()` and retried at the
//! next tick.
//!
//! A worker's status lives in shared memory at its database's position in `pg_jobs.databases`
//! ([`WorkerStatus`]): the launcher writes the names there when it starts, and why a database
//! has no worker (it does not exist); the worker claims the entry when it starts (its pid,
//! set from 0, so two workers never serve one database) and gives it back when it exits.
//!
//! A worker leaves its database when another session wants it to itself (`DROP DATABASE`,
//! `ALTER DATABASE ... RENAME TO` or `SET TABLESPACE`, `CREATE DATABASE ... TEMPLATE` of it):
//! those wait a few seconds for the database's other sessions to leave, and the worker looks
//! at every tick. The launcher starts it again once the database is free, or waits for it to
//! be created again if it was dropped. A worker that exits for any other reason
//! (`pg_terminate_backend`, say) is started again by the launcher at once.
//!
//! While the database has the SQL definitions of another version than the library's (after an
//! upgrade's restart, before `ALTER EXTENSION pg_jobs UPDATE`), the worker runs no work: it
//! shows as not serving, says once in the log what to run, and serves from the first tick
//! after the update, without a restart (README "Upgrading").
//!
//! On a hot standby the workers start too, but run no tick while the server is in recovery:
//! nothing can be written there, and the primary's workers do the work. A worker shows in
//! `jobs_worker_status()` with its pid, not serving, and starts ticking at its next wake-up
//! after `pg_ctl promote`.

pub mod launcher;
mod tick;
mod transaction;

use std::sync::atomic::Ordering;
use std::time::Duration;

use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::config::settings;
use crate::engine::throughput;
use crate::pg::clock::server_now;
use crate::pg::log::server_log;
use crate::pg::{database, recovery};
use crate::runtime::shmem::{self, MAX_DATABASES};
use crate::runtime::totals;
use crate::runtime::worker_status::WorkerStatus;

/// Registers the launcher, which starts the workers; called from `_PG_init` while preloading.
pub fn register() {
    let databases = settings::configured_databases();
    if databases.len() > MAX_DATABASES {
        pgrx::warning!(
            "pg_jobs.databases names {} databases; the worker serves only the first {MAX_DATABASES}",
            databases.len()
        );
    }
    if !databases.is_empty() {
        launcher::register();
    }
}

/// A worker's entry point (started by the launcher): claim the status entry, connect, then
/// tick until told to stop or until another session wants the database to itself.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_jobs_worker_main(argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = BackgroundWorker::get_extra().to_owned();
    let index = argument.value() % MAX_DATABASES;
    let status = shmem::shared().map(|s| s.worker(index));
    if let Some(status) = status {
        if let Err(holder) = claim_entry(status, index) {
            server_log!(
                "pg_jobs worker for database {database}: the worker with pid {holder} serves it already; this one exits"
            );
            // SAFETY: ends the process the way Postgres expects.
            unsafe { pg_sys::proc_exit(0) };
        }
        announce(status, &database);
    }
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    server_log!("pg_jobs worker started for database {database}");
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
                server_log!(
                    "pg_jobs worker for database {database}: this server is a standby; the worker runs no tick until it is promoted"
                );
            }
            continue;
        }
        if standby {
            standby = false;
            server_log!(
                "pg_jobs worker for database {database}: the server was promoted; the worker serves it"
            );
        }
        // No session can want the database to itself on a standby (a replayed DROP DATABASE
        // ends the worker's connection by itself).
        if leaving(&database) {
            break;
        }
        let report = tick::run(started_at);
        // Once a minute, the minute that ended goes into the history.
        let minute = throughput::minute_of(server_now());
        if minute > history_minute {
            flush_throughput(status, &database, history_minute);
            history_minute = minute;
        }
        note_version(&database, &report, &mut outdated);
        if let Some(status) = status {
            record(status, &database, report);
        }
    }

    if !recovery::in_recovery() {
        tick::stopping();
        // A clean stop keeps the current minute: the next worker's writes add to it.
        flush_throughput(status, &database, history_minute);
    }
    // Exit 0: the postmaster forgets this worker (it never restarts it); the launcher starts
    // another one when the database is there to serve.
    // SAFETY: ends the process the way Postgres expects.
    unsafe { pg_sys::proc_exit(0) };
}

/// Whether the worker must leave its database: another session wants it to itself (said in
/// the log). Asked in a short transaction of its own.
fn leaving(database: &str) -> bool {
    // SAFETY: MyDatabaseId is set once connected; inside the transaction opened here.
    let wanted = transaction::run(c"pg_jobs worker", || unsafe {
        database::wanted_alone(pg_sys::MyDatabaseId)
    })
    .unwrap_or(false);
    if wanted {
        server_log!(
            "pg_jobs worker for database {database}: another session wants the database to itself (DROP DATABASE, ALTER DATABASE, or CREATE DATABASE from it as a template); the worker leaves it, and serves it again once it is free"
        );
    }
    wanted
}

/// Takes the status entry at `index` for this process: its pid, set from 0, given back (set to
/// 0) when the process exits however it exits, short of a crash (which makes the postmaster
/// set shared memory up afresh). `Err` holds the pid of the live worker that has it.
fn claim_entry(status: &WorkerStatus, index: usize) -> Result<(), i32> {
    // SAFETY: MyProcPid is set for the life of the process.
    let pid = unsafe { pg_sys::MyProcPid };
    status
        .pid
        .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)?;
    // SAFETY: registers a plain function, run once as the process exits.
    unsafe { pg_sys::before_shmem_exit(Some(give_entry_back), pg_sys::Datum::from(index)) };
    Ok(())
}

/// Gives the status entry of the exiting worker back (see [`claim_entry`]).
#[pg_guard]
unsafe extern "C-unwind" fn give_entry_back(_code: std::ffi::c_int, index: pg_sys::Datum) {
    if let Some(shared) = shmem::shared() {
        // SAFETY: MyProcPid is set for the life of the process.
        let pid = unsafe { pg_sys::MyProcPid };
        let status = shared.worker(index.value());
        if status
            .pid
            .compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            status.serving.store(0, Ordering::Release);
        }
    }
}

/// Starts the worker's report afresh, once its status entry is claimed.
fn announce(status: &WorkerStatus, database: &str) {
    status.set_database(database);
    status.clear_error();
    status.serving.store(0, Ordering::Release);
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
        Some(installed) => server_log!(
            "pg_jobs worker for database {database}: the database has the SQL definitions of pg_jobs {installed} but the library is {}; the worker idles until ALTER EXTENSION pg_jobs UPDATE is run in database {database}",
            crate::pg::extension::LIBRARY_VERSION
        ),
        None if report.serving => server_log!(
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
    server_log!(
        "pg_jobs worker for database {database}: {step} failed, retrying next tick: {message}"
    );
    status.set_last_error(message);
    status.last_error_at.store(server_now(), Ordering::Release);
}

/// Records what a tick did, and why its failing steps failed.
fn record(status: &WorkerStatus, database: &str, report: tick::TickReport) {
    status.ticks.fetch_add(1, Ordering::AcqRel);
    status
        .serving
        .store(u32::from(report.serving), Ordering::Release);
    for (total, done) in [
        (&status.reclaimed, report.reclaimed),
        (&status.purged, report.purged),
        (&status.floors_healed, report.floors_healed),
        (&status.idempotency_purged, report.idempotency_purged),
        (&status.scheduled, report.scheduled),
    ] {
        total.fetch_add(done as u64, Ordering::AcqRel);
    }
    if report.stranded_cleared > 0 {
        server_log!(
            "pg_jobs worker for database {database}: {} jobs at the head of their groups waited for a hand-over that shared memory lost in a restart; they are claimable again",
            report.stranded_cleared
        );
    }
    for (step, message) in &report.failures {
        step_failed(status, database, step, message);
    }
    status.last_tick.store(server_now(), Ordering::Release);
}
