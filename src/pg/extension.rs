//! Whether the SQL definitions installed in this database are those of the loaded library.
//!
//! An upgrade installs the new library, restarts the server and only then runs
//! `ALTER EXTENSION pg_jobs UPDATE` (README "Upgrading"). In between, the new library serves
//! the old version's SQL definitions: its functions are called with the old argument lists and
//! find the old tables. Every function therefore asks [`is_current`] before it reads its
//! arguments' meaning or touches a table, and refuses when the versions differ.
//!
//! The answer is cached in the session while it is "current", the only state that lets calls
//! through, and forgotten when `pg_extension` (or `pg_proc`, where PostgreSQL keeps no cache of
//! `pg_extension`) changes; so a call costs one thread-local read, and an update committed by
//! another session is seen at this session's next statement.

use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::FromDatum;

use crate::pg::version;

/// The version of this library, which is the version its SQL definitions must have.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

thread_local! {
    /// Whether the installed version was found equal to [`LIBRARY_VERSION`] since the catalog
    /// last changed. Only that answer is kept: any other is read again at the next call, so
    /// the call that follows `ALTER EXTENSION pg_jobs UPDATE` already works.
    static CURRENT: Cell<bool> = const { Cell::new(false) };
}

/// The version of pg_jobs installed in this database (`pg_extension.extversion`), or `None`
/// when it is not installed.
///
/// Read by an index scan of the catalog, as PostgreSQL's own `get_extension_oid` does, whose
/// lock is released at once: a statement (SPI) would hold a lock on `pg_extension` until the
/// end of the caller's transaction, through a waiting claim's sleep too, and `Spi::get_one`
/// runs as an update, which a standby refuses.
pub fn installed_version() -> Option<String> {
    read_pg_jobs_row(pg_sys::Anum_pg_extension_extversion)
}

/// The role that owns pg_jobs in this database (`pg_extension.extowner`): its functions run as
/// that role. `None` when pg_jobs is not installed.
pub fn owner() -> Option<pg_sys::Oid> {
    read_pg_jobs_row::<pg_sys::Oid>(pg_sys::Anum_pg_extension_extowner)
}

/// Attribute `attribute` of pg_jobs's row of `pg_extension`, read as [`installed_version`]
/// says.
fn read_pg_jobs_row<T: FromDatum>(attribute: u32) -> Option<T> {
    // SAFETY: the catalog scan of get_extension_oid (extension.c), reading one attribute of the
    // tuple found before the scan ends; the value is copied out of it.
    unsafe {
        let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
        let relation = pg_sys::table_open(pg_sys::ExtensionRelationId, lock);
        let mut key: pg_sys::ScanKeyData = std::mem::zeroed();
        pg_sys::ScanKeyInit(
            &mut key,
            pg_sys::Anum_pg_extension_extname as pg_sys::AttrNumber,
            pg_sys::BTEqualStrategyNumber as pg_sys::StrategyNumber,
            pg_sys::Oid::from(pg_sys::F_NAMEEQ),
            pg_sys::Datum::from(c"pg_jobs".as_ptr()),
        );
        let scan = pg_sys::systable_beginscan(
            relation,
            pg_sys::Oid::from(pg_sys::ExtensionNameIndexId),
            true,
            std::ptr::null_mut(),
            1,
            &mut key,
        );
        let tuple = pg_sys::systable_getnext(scan);
        let version = if tuple.is_null() {
            None
        } else {
            let mut is_null = false;
            let datum =
                pg_sys::heap_getattr(tuple, attribute as i32, (*relation).rd_att, &mut is_null);
            T::from_datum(datum, is_null)
        };
        pg_sys::systable_endscan(scan);
        pg_sys::table_close(relation, lock);
        version
    }
}

/// Whether the installed SQL definitions are this library's version: `Ok(())`, or the
/// installed version (`None` when not installed) when they are not.
pub fn is_current() -> Result<(), Option<String>> {
    if CURRENT.with(Cell::get) {
        return Ok(());
    }
    let installed = installed_version();
    if installed.as_deref() == Some(LIBRARY_VERSION) {
        CURRENT.with(|c| c.set(true));
        Ok(())
    } else {
        Err(installed)
    }
}

/// Called by PostgreSQL when cached catalog entries of extensions or functions change.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn catalog_changed(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    CURRENT.with(|c| c.set(false));
}

/// Makes the cached answer follow `CREATE`, `ALTER` and `DROP EXTENSION`; called from
/// `_PG_init`.
pub fn register_callbacks() {
    // SAFETY: a plain function registered once per process, as PostgreSQL's own caches do.
    unsafe {
        // Where PostgreSQL keeps a cache of pg_extension, its invalidations say when a version
        // changes.
        #[cfg(not(any(feature = "pg13", feature = "pg17")))]
        version::register_syscache_callback(
            pg_sys::SysCacheIdentifier::EXTENSIONOID,
            catalog_changed,
        );
        // Everywhere, a change of version comes with changed functions: creating the
        // extension, dropping it, and every update script that changes what a function is.
        // (Through the version shim: PostgreSQL 13.4's bindings lack the declaration.)
        version::register_syscache_callback(pg_sys::SysCacheIdentifier::PROCOID, catalog_changed);
    }
}
