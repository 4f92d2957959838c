//! The launcher: the one static background worker pg_jobs registers (`pg_jobs launcher`). It
//! connects to no database (it reads only the shared catalog of databases, as the autovacuum
//! launcher does) and, every `pg_jobs.tick` (at most a second), looks up each database named
//! in `pg_jobs.databases`:
//!
//! * one that does not exist (yet) is waited for: said once in the log and in
//!   `jobs_worker_status()`, and served from the first look after `CREATE DATABASE`;
//! * one that exists and is free to connect to gets a worker (a dynamic background worker,
//!   `pg_jobs worker`, see `super`), started again when it exits: at once after
//!   `pg_terminate_backend` (the postmaster tells the launcher of every exit of a worker it
//!   started), at most once a second for a database whose worker keeps exiting;
//! * one that another session wants to itself (`DROP DATABASE`, `ALTER DATABASE ... RENAME`,
//!   `CREATE DATABASE ... TEMPLATE` of it: [`database::wanted_alone`]) gets no worker until it
//!   is free; its running worker leaves by itself at its next tick.
//!
//! The per-database workers never restart themselves (`BGW_NEVER_RESTART`): after a crash
//! restart the postmaster forgets them, starts the launcher again, and the launcher starts
//! them afresh. A launcher that is terminated alone is started again by the postmaster after a
//! second; the workers it started keep running, and the new launcher leaves a database alone
//! while its status entry names a live worker ([`super::claim_entry`] keeps two workers from
//! serving one database should both start).

use std::time::{Duration, Instant};

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BackgroundWorkerStatus, BgWorkerStartTime,
    DynamicBackgroundWorker, SignalWakeFlags,
};
use pgrx::pg_sys;
use pgrx::prelude::*;

use super::transaction;
use crate::config::settings;
use crate::pg::database::{self, Presence};
use crate::pg::log::server_log;
use crate::runtime::shmem::{self, MAX_DATABASES};
use crate::runtime::worker_status::WorkerStatus;

/// The fewest time between two starts of one database's worker.
const RESTART_INTERVAL: Duration = Duration::from_secs(1);
/// The longest the launcher sleeps between two looks at the catalog.
const MAX_INTERVAL_MS: i32 = 1_000;

/// Registers the launcher; called from `_PG_init` while preloading, when `pg_jobs.databases`
/// names a database.
pub fn register() {
    BackgroundWorkerBuilder::new("pg_jobs launcher")
        .set_type("pg_jobs launcher")
        .set_library("pg_jobs")
        .set_function("pg_jobs_launcher_main")
        // A database connection of no database: the shared catalogs, transactions and locks.
        .enable_spi_access()
        // Started on a hot standby as well: its workers idle there, visible, and serve within
        // a tick of the promotion.
        .set_start_time(BgWorkerStartTime::ConsistentState)
        .set_restart_time(Some(RESTART_INTERVAL))
        .load();
}

/// What the launcher last found of a database, so that each change is said once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Nothing yet (the launcher just started).
    Nothing,
    /// The database does not exist.
    Missing,
    /// It accepts no connections.
    NoConnections,
    /// It exists and accepts connections.
    Present,
}

/// One database of `pg_jobs.databases` and its worker.
struct Database {
    /// Its position in `pg_jobs.databases`: the index of its status entry.
    index: usize,
    /// Its name.
    name: String,
    /// The worker this launcher started last, until it is seen stopped.
    worker: Option<DynamicBackgroundWorker>,
    /// When this launcher started it.
    started: Option<Instant>,
    /// What the last look found.
    found: Found,
    /// Whether the last start failed for want of a background worker slot (said once).
    no_slot: bool,
}

/// The launcher's entry point: look, start what is missing, sleep; until told to stop.
#[pg_guard]
#[no_mangle]
pub extern "C-unwind" fn pg_jobs_launcher_main(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    BackgroundWorker::connect_worker_to_spi(None, None);
    let Some(shared) = shmem::shared() else {
        // Registered only while preloading, so shared memory exists; nothing to do otherwise.
        return;
    };
    let mut databases: Vec<Database> = settings::configured_databases()
        .into_iter()
        .take(MAX_DATABASES)
        .enumerate()
        .map(|(index, name)| Database {
            index,
            name,
            worker: None,
            started: None,
            found: Found::Nothing,
            no_slot: false,
        })
        .collect();
    for database in &databases {
        shared.worker(database.index).set_database(&database.name);
    }

    let mut sleep = Duration::ZERO;
    while BackgroundWorker::wait_latch(Some(sleep)) {
        if BackgroundWorker::sighup_received() {
            // SAFETY: the standard way for a background worker to reload its settings.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
        }
        let interval = settings::TICK_MS.get().min(MAX_INTERVAL_MS);
        sleep = Duration::from_millis(interval as u64);
        let names: Vec<String> = databases.iter().map(|d| d.name.clone()).collect();
        let looks = match transaction::run(c"pg_jobs launcher", || look(&names)) {
            Ok(looks) => looks,
            Err(failure) => {
                server_log!(
                    "pg_jobs launcher: reading the catalog of databases failed, retrying: {}",
                    failure.message
                );
                continue;
            }
        };
        for (database, look) in databases.iter_mut().zip(looks) {
            let status = shared.worker(database.index);
            if let Some(wait) = serve(database, status, look) {
                sleep = sleep.min(wait);
            }
        }
    }
    // Exit 1: the postmaster starts the launcher again unless it is shutting down. The workers
    // it started run on.
    // SAFETY: ends the process the way Postgres expects.
    unsafe { pg_sys::proc_exit(1) };
}

/// What a look at the catalog found of a database.
#[derive(Clone, Copy)]
struct Look {
    presence: Presence,
    /// Another session wants the database to itself.
    wanted_alone: bool,
}

/// Looks the databases `names` up in the catalog (inside the launcher's transaction).
fn look(names: &[String]) -> Vec<Look> {
    // SAFETY: inside the transaction `transaction::run` opened.
    let found = unsafe { database::presence(names) };
    found
        .into_iter()
        .map(|presence| Look {
            presence,
            wanted_alone: match presence {
                // SAFETY: as above.
                Presence::Present(oid) => unsafe { database::wanted_alone(oid) },
                _ => false,
            },
        })
        .collect()
}

/// Acts on what a look found: says what changed, starts the worker the database lacks.
/// Returns how soon to look again when sooner than a tick (a worker that exited too soon
/// after its start is started again once a second has passed).
fn serve(database: &mut Database, status: &WorkerStatus, look: Look) -> Option<Duration> {
    let found = match look.presence {
        Presence::Missing => Found::Missing,
        Presence::NoConnections => Found::NoConnections,
        Presence::Present(_) => Found::Present,
    };
    if found != database.found {
        say(database, status, found);
        database.found = found;
    }
    if found != Found::Present || look.wanted_alone || running(database, status) {
        return None;
    }
    if let Some(started) = database.started {
        let since = started.elapsed();
        if since < RESTART_INTERVAL {
            return Some(RESTART_INTERVAL - since);
        }
    }
    start(database);
    None
}

/// Whether the database has a worker: the one this launcher started, not seen stopped, or one
/// whose pid its status entry holds (started by an earlier launcher).
fn running(database: &mut Database, status: &WorkerStatus) -> bool {
    if let Some(worker) = &database.worker {
        match worker.pid() {
            Ok(_) | Err(BackgroundWorkerStatus::NotYetStarted) => return true,
            Err(_) => database.worker = None,
        }
    }
    status.pid.load(std::sync::atomic::Ordering::Acquire) != 0
}

/// Registers a worker for the database, told to report its start and exit to the launcher.
fn start(database: &mut Database) {
    database.started = Some(Instant::now());
    let builder = BackgroundWorkerBuilder::new(&format!("pg_jobs worker for {}", database.name))
        .set_type("pg_jobs worker")
        .set_library("pg_jobs")
        .set_function("pg_jobs_worker_main")
        .set_argument(Some(pg_sys::Datum::from(database.index)))
        .set_extra(&database.name)
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::ConsistentState)
        // The launcher starts it again: after a crash restart the postmaster forgets it.
        .set_restart_time(None)
        // SAFETY: MyProcPid is set for the life of the process.
        .set_notify_pid(unsafe { pg_sys::MyProcPid });
    match builder.load_dynamic() {
        Ok(worker) => {
            database.worker = Some(worker);
            database.no_slot = false;
        }
        Err(_) => {
            if !database.no_slot {
                database.no_slot = true;
                server_log!(
                    "pg_jobs launcher: no background worker slot is free for the worker of database {}; trying again every tick (raise max_worker_processes: pg_jobs needs one for the launcher and one per database it serves)",
                    database.name
                );
            }
        }
    }
}

/// Says, once, what changed about a database: in the log, and in its status entry while no
/// worker serves it.
fn say(database: &Database, status: &WorkerStatus, found: Found) {
    let name = &database.name;
    match found {
        Found::Missing => {
            server_log!(
                "pg_jobs launcher: database {name} named in pg_jobs.databases does not exist; its worker starts once it is created"
            );
            status.note(&format!(
                "database {name} does not exist; the worker starts serving it once it is created (CREATE DATABASE {name}, then CREATE EXTENSION pg_jobs in it)"
            ));
        }
        Found::NoConnections => {
            server_log!(
                "pg_jobs launcher: database {name} named in pg_jobs.databases does not accept connections; its worker starts once it does"
            );
            status.note(&format!(
                "database {name} does not accept connections; the worker starts once it does (ALTER DATABASE {name} ALLOW_CONNECTIONS true)"
            ));
        }
        Found::Present => match database.found {
            Found::Missing => {
                server_log!("pg_jobs launcher: database {name} exists now; starting its worker")
            }
            Found::NoConnections => server_log!(
                "pg_jobs launcher: database {name} accepts connections now; starting its worker"
            ),
            Found::Present | Found::Nothing => {}
        },
        Found::Nothing => {}
    }
}
