//! pg_jobs: a durable job queue inside PostgreSQL.
//!
//! Claim, lease renewal, settle, backoff and reclaim are SQL functions; a background worker
//! reclaims expired leases, purges old jobs and wakes waiting claims. This file only wires the
//! modules together; each concern lives in its own module.

use pgrx::prelude::*;

mod backoff;
mod claim;
mod datum;
mod enqueue;
mod errors;
mod floor;
mod guc;
mod lease;
mod locks;
mod metrics;
mod operate;
mod queue;
mod settle;
mod shmem;
mod spi;
mod wakeup;
mod worker;

#[cfg(any(test, feature = "pg_test"))]
mod tests;

::pgrx::pg_module_magic!();

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);

/// Library entry point: settings and the transaction callback in every process; shared memory
/// and the background worker only while preloading.
#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    wakeup::register_callback();
    // SAFETY: a flag Postgres sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        shmem::request();
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
