//! Databases: which one this backend is connected to, and whether one a background worker
//! is to serve exists and is free to connect to.

use std::ffi::CStr;

use pgrx::pg_sys;

/// The name of the database this backend is connected to.
pub fn current_database_name() -> String {
    // SAFETY: MyDatabaseId is set for a connected backend; get_database_name returns a palloc'd
    // copy (or NULL for a database dropped meanwhile), read before anything else runs.
    unsafe {
        let name = pg_sys::get_database_name(pg_sys::MyDatabaseId);
        if name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

/// What the catalog says of a database a background worker is to serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// No database of that name (or one a `DROP DATABASE` interrupted half way, which only
    /// `DROP DATABASE` may touch).
    Missing,
    /// It exists but accepts no connections (`ALTER DATABASE ... ALLOW_CONNECTIONS false`, as
    /// `template0`): a worker could not connect.
    NoConnections,
    /// It exists and accepts connections.
    Present(pg_sys::Oid),
}

/// `datconnlimit` of a database that a `DROP DATABASE` interrupted half way (PostgreSQL's
/// `DATCONNLIMIT_INVALID_DB`, in every supported minor release since August 2023; earlier
/// releases never write it).
const INVALID_DATABASE: i32 = -2;

/// Whether each database of `names` exists and accepts connections, in the order of `names`.
/// Needs no database connection: the catalog of databases is shared. Read with a scan of the
/// table, not through its index or the system cache: a process connected to no database may
/// find no index of a shared catalog set up (their relcache entries are built from
/// `pg_class`, which it cannot read, when the server's cache file is missing, as it is after
/// each start until a backend connects to a database). The autovacuum launcher reads it so.
///
/// # Safety
/// Inside a transaction.
pub unsafe fn presence(names: &[String]) -> Vec<Presence> {
    let mut found = vec![Presence::Missing; names.len()];
    // SAFETY: a catalog scan under the catalog snapshot inside the caller's transaction; each
    // tuple is read while the scan holds it.
    unsafe {
        let relation = pg_sys::table_open(
            pg_sys::DatabaseRelationId,
            pg_sys::AccessShareLock as pg_sys::LOCKMODE,
        );
        let scan = pg_sys::table_beginscan_catalog(relation, 0, std::ptr::null_mut());
        loop {
            let tuple = pg_sys::heap_getnext(scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tuple.is_null() {
                break;
            }
            let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_database>(tuple);
            let name = CStr::from_ptr((*form).datname.data.as_ptr()).to_string_lossy();
            let Some(at) = names.iter().position(|n| *n == name) else {
                continue;
            };
            found[at] = if (*form).datconnlimit == INVALID_DATABASE {
                Presence::Missing
            } else if !(*form).datallowconn {
                Presence::NoConnections
            } else {
                Presence::Present((*form).oid)
            };
        }
        pg_sys::table_endscan(scan);
        pg_sys::table_close(relation, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
    }
    found
}

/// Whether another session holds, or waits for, a lock on database `oid` that a new
/// connection to it would wait behind: `DROP DATABASE`, `ALTER DATABASE ... RENAME TO` and
/// `... SET TABLESPACE` (which wait a few seconds for the database's other sessions to leave,
/// and then fail), and `CREATE DATABASE ... TEMPLATE` of it. Asked by taking for a moment the
/// lock a connecting backend takes, without waiting.
///
/// # Safety
/// Inside a transaction (the lock is the transaction's until it is released here).
pub unsafe fn wanted_alone(oid: pg_sys::Oid) -> bool {
    let tag = pg_sys::LOCKTAG {
        // A lock on a shared object (a database) names no database.
        locktag_field1: pg_sys::InvalidOid.into(),
        locktag_field2: pg_sys::DatabaseRelationId.into(),
        locktag_field3: oid.into(),
        locktag_field4: 0,
        locktag_type: pg_sys::LockTagType::LOCKTAG_OBJECT as u8,
        locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
    };
    let mode = pg_sys::RowExclusiveLock as pg_sys::LOCKMODE;
    // SAFETY: a fully initialised object lock tag, taken without waiting in the caller's
    // transaction and released at once when granted.
    unsafe {
        let result = pg_sys::LockAcquire(&tag, mode, false, true);
        if result == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
            return true;
        }
        pg_sys::LockRelease(&tag, mode, false);
    }
    false
}
