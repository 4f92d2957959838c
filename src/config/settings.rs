//! The `pg_jobs.*` settings.

use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Largest payload `jobs_enqueue` accepts, in bytes of jsonb.
pub static MAX_PAYLOAD_BYTES: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);

/// Longest `wait` a claim may ask for, in milliseconds.
pub static MAX_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(300_000);

/// The background worker's cadence, in milliseconds.
pub static TICK_MS: GucSetting<i32> = GucSetting::<i32>::new(1_000);

/// The tenant (or comma-separated tenants) this session acts for.
pub static TENANT: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);

/// Whether the fast paths run: the readers and writers of `src/storage/` that work on the tables
/// around the executor, and the state kept in shared memory or the session in place of a table
/// read or write (freed heads, rate buckets, kept queue rows, flow settings and tenant grants).
/// Off, each one takes its SQL statement instead (docs/src/internals/fast-paths.md lists them).
pub static FAST_PATHS: GucSetting<bool> = GucSetting::<bool>::new(true);

/// Comma-separated databases the background worker serves.
pub static DATABASES: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"postgres"));

/// Registers every setting; called from `_PG_init`.
pub fn register() {
    GucRegistry::define_int_guc(
        c"pg_jobs.max_payload_bytes",
        c"Largest job payload accepted, in bytes of jsonb.",
        c"jobs_enqueue and jobs_enqueue_batch refuse larger payloads with SQLSTATE 54000.",
        &MAX_PAYLOAD_BYTES,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.max_wait",
        c"Longest wait a jobs_claim call may ask for.",
        c"A claim asking to wait longer is refused with SQLSTATE 22023.",
        &MAX_WAIT_MS,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"pg_jobs.tick",
        c"How often the pg_jobs background worker reclaims, purges and wakes.",
        c"",
        &TICK_MS,
        10,
        3_600_000,
        GucContext::Sighup,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_string_guc(
        c"pg_jobs.tenant",
        c"The tenant, or comma-separated tenants, this session acts for.",
        c"Checked against the role's tenant grants whenever it is used (jobs_grant_tenant); empty: no tenant.",
        &TENANT,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"pg_jobs.fast_paths",
        c"Whether pg_jobs reads and writes its tables around the executor where it can.",
        c"Off, every such path runs its SQL statement instead: for diagnosis and tests; slower.",
        &FAST_PATHS,
        GucContext::Suset,
        GucFlags::default(),
    );
    // A postmaster-level setting can only be defined while preloading; sessions that load the
    // library later have no worker to configure anyway.
    // SAFETY: a flag Postgres sets while it loads shared_preload_libraries.
    if !unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    GucRegistry::define_string_guc(
        c"pg_jobs.databases",
        c"Databases the pg_jobs background worker serves, comma-separated.",
        c"Read at server start; a database without the extension is skipped until CREATE EXTENSION pg_jobs runs there.",
        &DATABASES,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// Whether the fast paths may run now ([`FAST_PATHS`]): read by each one as it starts, so a
/// change takes effect from the next call on. A plain read of the setting's variable, and never
/// in a database distributed by Citus, where `jobs.job` is an empty shell and its rows are in
/// the shards (docs/src/internals/citus.md).
pub fn fast_paths() -> bool {
    FAST_PATHS.get() && !crate::pg::citus::distributed()
}

/// The databases named in `pg_jobs.databases`.
pub fn configured_databases() -> Vec<String> {
    DATABASES
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
