//! pg_jobs: a durable job queue inside PostgreSQL.
//!
//! Claim, lease renewal, settle, backoff and reclaim are SQL functions; a background worker
//! reclaims expired leases, purges old jobs and wakes waiting claims. The layers, each a folder,
//! depend on each other one way only (README "How it works"):
//!
//! * `api` — the `#[pg_extern]` functions and their argument checks; nothing imports it;
//! * `worker` — the background worker's loop and tick;
//! * `engine` — the model: states, transitions, the claim pipeline, settle, reclaim, backoff;
//! * `runtime` — shared memory, claim floors, wake-ups, locks, transaction effects;
//! * `storage` — declared SQL statements run as kept SPI plans, the extension's row types;
//! * `config` — the `pg_jobs.*` settings;
//! * `pg` — PostgreSQL plumbing, knowing nothing of jobs: errors, datums, the clock, version
//!   shims.
//!
//! This file only wires them together.

use pgrx::prelude::*;

mod api;
mod config;
mod engine;
mod pg;
mod runtime;
mod storage;
mod worker;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
extension_sql_file!("../sql/finalize.sql", name = "finalize", finalize);

/// Library entry point: settings and the transaction callbacks in every process; shared memory
/// and the background worker only while preloading.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::errors::quiet_backtraces();
    pg::errors::install_privilege_hints();
    config::settings::register();
    runtime::effects::register_callbacks(engine::two_phase::STORE);
    pg::roles::register_callbacks();
    pg::extension::register_callbacks();
    // SAFETY: a flag Postgres sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        runtime::shmem::request();
        worker::register();
    }
}

/// Required by `cargo pgrx test`: set-up for the test cluster.
#[cfg(test)]
pub mod pg_test {
    /// One-off initialisation when the test framework starts.
    pub fn setup(_options: Vec<&str>) {}

    /// postgresql.conf settings for the test cluster.
    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec!["shared_preload_libraries = 'pg_jobs'"]
    }
}
